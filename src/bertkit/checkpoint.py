"""Resumable training checkpoints: RUN/checkpoints/step-N.pt, written atomically by rank 0.

A checkpoint holds everything a run needs to continue exactly: the model, optimizer, schedule and
loss-scaler states, the step, every process's random states, the metrics so far, the run's
settings and, for a run with a time budget, the seconds it has spent. Model folders in Hugging
Face's layout are a different thing: `Pretrained.save_pretrained` (bertkit.model) writes those.
"""

from __future__ import annotations

import logging
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from . import distributed
from .errors import BertkitError
from .fileio import atomic_write

log = logging.getLogger("bertkit")

_CKPT = re.compile(r"^step-(\d+)\.pt$")


@dataclass
class Resumed:
    """What a checkpoint gives back besides the states it loads into the objects."""

    step: int
    history: list[dict[str, Any]] = field(default_factory=list)
    elapsed: float = 0.0  # seconds spent by a run with a time budget


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    """Gives the checkpoint of the highest step in `ckpt_dir`, if any."""
    if not ckpt_dir.is_dir():
        return None
    found = sorted((int(m.group(1)), p) for p in ckpt_dir.iterdir() if (m := _CKPT.match(p.name)))
    return found[-1][1] if found else None


def _rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def _set_rng_state(s: dict[str, Any]) -> None:
    random.setstate(s["python"])
    np.random.set_state(s["numpy"])
    torch.set_rng_state(s["torch"])
    if s.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def save_checkpoint(
    ckpt_dir: Path,
    step: int,
    history: list[dict[str, Any]],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    scaler: torch.amp.GradScaler,
    ctx: distributed.Context,
    keep: int,
    run_config: dict[str, Any] | None,
    elapsed: float = 0.0,
) -> None:
    """Writes checkpoints/step-N.pt atomically (rank 0), with every process's RNG state; keeps the last `keep`."""
    rng = [_rng_state()]
    if ctx.world_size > 1:
        rng = [None] * ctx.world_size
        dist.all_gather_object(rng, _rng_state())
    if ctx.is_main:
        payload = {
            "step": step,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "rng": rng,
            "world_size": ctx.world_size,
            "history": history,
            "config": run_config,
            "elapsed": elapsed,  # seconds of a run with a time budget
        }
        path = ckpt_dir / f"step-{step:08d}.pt"
        atomic_write(path, lambda tmp: torch.save(payload, tmp))
        old = sorted(p for p in ckpt_dir.iterdir() if _CKPT.match(p.name))
        for p in old[: max(0, len(old) - max(keep, 1))]:
            p.unlink(missing_ok=True)
    distributed.barrier()


def load_checkpoint(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    scaler: torch.amp.GradScaler,
    ctx: distributed.Context,
) -> Resumed:
    """Restores a checkpoint into the objects given and this process's random states; gives the step,
    the metrics so far and the seconds spent."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # a truncated file from a full disk would only be a .tmp; this is a foreign file
        raise BertkitError(f"{path}: cannot read the checkpoint ({str(e).splitlines()[0]})") from None
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    scheduler.load_state_dict(payload["scheduler"])
    scaler.load_state_dict(payload["scaler"])
    rng = payload["rng"]
    if len(rng) == ctx.world_size:
        _set_rng_state(rng[ctx.rank])
    else:
        log.warning("checkpoint from %d processes resumed on %d: dropout randomness will differ", len(rng), ctx.world_size)
        _set_rng_state(rng[0])
    return Resumed(payload["step"], payload.get("history", []), float(payload.get("elapsed", 0.0)))
