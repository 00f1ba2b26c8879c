"""Optimizers and the learning-rate schedule of the paper: AdamW (or LAMB for large batches) with
weight decay on everything but LayerNorm and biases, linear warmup, then linear decay to zero."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from .errors import BertkitError
from .settings import Settings, between, check, non_negative, one_of, option


@dataclass(frozen=True)
class OptimSettings(Settings):
    """The optimizer and its schedule, as `[optim]` in pre-training and fine-tuning settings."""

    name: str = option("adamw", check=one_of("adamw", "lamb"))  # lamb: for large batches
    lr: float = option(1e-4, "peak learning rate", check=between(0, 1))
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    weight_decay: float = option(0.01, check=non_negative)  # not on LayerNorm and biases
    # < 1: proportion of the steps; >= 1: a number of steps (the paper: 10k of 1M)
    warmup: float = option(0.01, "warmup: a proportion of the steps (< 1) or a number of steps", check=non_negative)
    max_grad_norm: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), f"optim.betas must be two values in [0, 1), got {self.betas}")


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: matrices and embeddings with weight decay; LayerNorm parameters and biases without."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "norm" in name.lower() else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(
    model: nn.Module,
    name: str = "adamw",
    lr: float = 1e-4,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
    weight_decay: float = 0.01,
) -> torch.optim.Optimizer:
    """Gives AdamW (decoupled weight decay, as Google's AdamWeightDecayOptimizer) or LAMB.

    eps 1e-6 is Google's; AdamW runs as one fused kernel where PyTorch has one for the device.
    """
    groups = parameter_groups(model, weight_decay)
    if name == "adamw":
        device = next(model.parameters()).device
        fused = device.type in ("cpu", "cuda")
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=betas, eps=eps)
    raise BertkitError(f"optimizer must be adamw or lamb, got {name!r}")


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al., 2019), as NVIDIA's BERT uses for batches of 64k: Adam's update, with weight decay
    added to it, scaled per tensor by the trust ratio ||w|| / ||update|| (1 where either norm is zero)."""

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                step = state["step"].to(p.device)  # a tensor: no host sync on CUDA
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.lerp_(p.grad, 1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                m_hat = m / (1 - beta1**step)
                v_hat = v / (1 - beta2**step)
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(p, alpha=group["weight_decay"])
                w_norm, u_norm = p.norm(), update.norm()
                trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                p.add_(update * trust, alpha=-group["lr"])
        return loss


def linear_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup from 0 to the peak over `warmup_steps`, then linear decay to 0 at `total_steps`
    (the same factors as Google's optimization.py and transformers' get_linear_schedule_with_warmup)."""

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: linear_warmup_decay(step, warmup_steps, total_steps))


def linear_warmup_decay(step: float, warmup: float, total: float) -> float:
    """Gives the share of the peak rate at `step`: up from 0 linearly over `warmup`, then down linearly to 0 at
    `total`. Steps, or fractions of a time budget (warmup and total then shares of it)."""
    if step < warmup:
        return step / warmup
    return max(0.0, (total - step) / (total - warmup)) if total > warmup else 0.0


def warmup_steps_for(total_steps: int, warmup: float) -> int:
    """`warmup` < 1 is a proportion of the steps (0.1 as the paper's fine-tuning), >= 1 a count."""
    if warmup < 0:
        raise BertkitError(f"warmup must be >= 0, got {warmup}")
    return math.ceil(warmup * total_steps) if warmup < 1 else int(warmup)
