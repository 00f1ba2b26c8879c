"""Distributed training through torchrun: one process per device, detected from torchrun's environment.

gloo on CPU, NCCL on CUDA. Only rank 0 writes files: the training loop and the checkpoints ask the
process's `Context.is_main`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .errors import BertkitError


@dataclass(frozen=True)
class Context:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup(device: str = "auto") -> Context:
    """Gives this process's rank and device, joining the process group when torchrun started us."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise BertkitError("device cuda was asked for, but PyTorch sees no GPU")
        dev = torch.device("cuda", local_rank if world > 1 else torch.cuda.current_device())
        torch.cuda.set_device(dev)
    elif device == "cpu":
        dev = torch.device("cpu")
    else:
        raise BertkitError(f"device must be auto, cpu or cuda, got {device!r}")
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
    return Context(rank, world, local_rank, dev)


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sums `t` over all processes, in place; a no-op in a single process."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
