"""One explicit training loop for pre-training and fine-tuning.

It knows nothing about tasks: it gets a model, an objective (what to sum and over what to average),
the batches of every step, an optimizer and a schedule. It owns precision, gradient accumulation,
clipping, DistributedDataParallel, logging, held-out evaluation, checkpoints and exact resumption.

Losses are averaged over the whole global batch (all micro-batches on all processes) rather than per
micro-batch, so a step's update does not depend on how the batch was split: a run under torchrun
with N processes equals a single-process run with the same global batch.
"""

from __future__ import annotations

import contextlib
import logging
import random
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from . import distributed
from .checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from .errors import BertkitError
from .runlog import MetricsLog
from .settings import PRECISIONS, Settings, option

log = logging.getLogger("bertkit")

Batch = dict[str, torch.Tensor]


class Objective(Protocol):
    """What a step optimizes: sums over the batch, and the counts they are averaged over.

    `loss_terms` name the sums whose averages add up to the loss; `per` gives, for every sum, the
    name of the count it is averaged over (e.g. {"mlm_loss": "mlm", "mlm_correct": "mlm"}). An objective may also
    have `backward(model, batch, to_loss)`, not None, when it runs the batch's backward passes itself (GradCache):
    it backpropagates `to_loss(sums)`, the loss as the step scales it, and gives the sums.
    """

    loss_terms: tuple[str, ...]
    per: dict[str, str]

    def counts(self, batch: Batch) -> dict[str, torch.Tensor]: ...

    def __call__(self, model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]: ...


class StepBatches(Protocol):
    """The micro-batches of this process for each optimizer step, a pure function of the step."""

    def __getitem__(self, step: int) -> list[Batch]: ...


@dataclass(frozen=True)
class LoopConfig(Settings):
    steps: int
    max_grad_norm: float = 1.0
    precision: str = option("fp32", check=PRECISIONS)  # fp16: CUDA only, with loss scaling
    log_every: int = 10
    eval_every: int = 0  # 0: only at the end
    checkpoint_every: int = 0  # 0: only at the end
    keep_checkpoints: int = 2
    num_workers: int = 1  # data-loading processes; 0 loads in the training process
    seed: int = 0
    progress: bool = True


@dataclass
class LoopState:
    step: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)


class Clock:
    """A budget of wall-clock seconds for a run (Cramming's way of training "for a day"): the loop stops when
    it is spent, and a schedule can read `fraction` instead of the step. Elapsed time is checkpointed, so a
    resumed run spends only what is left."""

    def __init__(self, seconds: float):
        if seconds <= 0:
            raise BertkitError(f"a time budget must be positive, got {seconds} s")
        self.seconds = seconds
        self.elapsed = 0.0

    @property
    def fraction(self) -> float:
        return min(1.0, self.elapsed / self.seconds)


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# ---- the loop -----------------------------------------------------------------------------------

def train(
    model: nn.Module,
    objective: Objective,
    batches: StepBatches,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    cfg: LoopConfig,
    run_dir: Path,
    ctx: distributed.Context,
    evaluate: Callable[[nn.Module, int], dict[str, float]] | None = None,
    resume: bool = False,
    run_config: dict[str, Any] | None = None,
    clock: Clock | None = None,
    stop_when: Callable[[list[dict[str, Any]]], bool] | None = None,
) -> LoopState:
    """Runs optimizer steps until `cfg.steps`, or until `clock`'s budget is spent; gives the final state.
    Ctrl-C or SIGTERM saves and stops.

    `evaluate(model, step)` runs on the main process every `cfg.eval_every` steps and at the end; its
    scores go to the log and the history as eval_* rows. `stop_when(history)`, asked after each evaluation
    (and on resuming), ends the run early when it says so: early stopping, decided from the history alone
    so that a resumed run decides as the uninterrupted one did."""
    run_dir.mkdir(parents=True, exist_ok=True)
    loop = _Loop(model, objective, optimizer, scheduler, cfg, run_dir / "checkpoints", ctx, clock)
    if resume and loop.resume() and stop_when is not None and stop_when(loop.state.history):
        log.warning("the run had stopped early at step %d", loop.state.step)
        return loop.state
    metrics_log = MetricsLog(run_dir, enabled=ctx.is_main, truncate_after=loop.state.step)
    loop.wrap()
    stopper = _Stopper()
    bar = tqdm(total=cfg.steps, initial=loop.state.step, disable=not (cfg.progress and ctx.is_main), unit="step",
               dynamic_ncols=True)
    interval = _Interval()
    started = time.perf_counter() - (clock.elapsed if clock else 0.0)
    state = loop.state
    model.train()
    try:
        for step, micro_batches, tokens in _prefetch(batches, state.step, cfg.steps, cfg.num_workers, ctx.device):
            interval.tokens += tokens
            lr, grad_norm = loop.step(micro_batches, interval, started, log_step=(step + 1) % cfg.log_every == 0)
            state.step = step + 1
            bar.update(1)

            done = state.step == cfg.steps or (clock is not None and clock.fraction >= 1.0)
            if state.step % cfg.log_every == 0 or done:
                row = {"step": state.step, "lr": lr, "grad_norm": float(grad_norm), **interval.flush(objective, ctx)}
                metrics_log.write(row)
                state.history.append(row)
                _show(bar, row, cfg.steps, state.step, clock)
            evaluating = evaluate is not None and ((cfg.eval_every and state.step % cfg.eval_every == 0) or done)
            if evaluating and loop.evaluate(evaluate, metrics_log, stop_when) and not done:  # type: ignore[arg-type]
                log.warning("early stopping at step %d", state.step)
                done = True
            # Under torchrun the processes agree to stop through a collective: only at log steps.
            stop = stopper.requested(ctx) if ctx.world_size == 1 or state.step % cfg.log_every == 0 or done else False
            if done or stop or (cfg.checkpoint_every and state.step % cfg.checkpoint_every == 0):
                save_checkpoint(loop.ckpt_dir, state.step, state.history, model, optimizer, scheduler, loop.scaler, ctx,
                                cfg.keep_checkpoints, run_config, clock.elapsed if clock else 0.0)
            if stop:
                bar.close()
                raise KeyboardInterrupt(f"stopped at step {state.step}; resume with --resume")
            if done:
                break
    finally:
        bar.close()
        stopper.restore()
        metrics_log.close()
    return state


class _Loop:
    """What one run's steps share: the model (wrapped by DDP under torchrun), the objective, optimizer, schedule,
    precision and its loss scaler, the clock; and the state they advance."""

    def __init__(self, model: nn.Module, objective: Objective, optimizer: torch.optim.Optimizer,
                 scheduler: torch.optim.lr_scheduler.LRScheduler, cfg: LoopConfig, ckpt_dir: Path,
                 ctx: distributed.Context, clock: Clock | None):
        self.model, self.objective, self.optimizer, self.scheduler = model, objective, optimizer, scheduler
        self.cfg, self.ckpt_dir, self.ctx, self.clock = cfg, ckpt_dir, ctx, clock
        self.state = LoopState()
        self.scaler = torch.amp.GradScaler(ctx.device.type, enabled=cfg.precision == "fp16")
        if cfg.precision == "fp16" and ctx.device.type != "cuda":
            raise BertkitError("precision fp16 needs a CUDA device; use bf16 on CPU")
        self.wrapped: nn.Module = model
        self.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.precision)

    def wrap(self) -> None:
        """Under torchrun, wraps the model in DistributedDataParallel (after resuming: it starts from rank 0's weights)."""
        if self.ctx.world_size > 1:
            device_ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
            self.wrapped = DistributedDataParallel(self.model, device_ids=device_ids)

    def autocast(self) -> Any:
        return torch.autocast(self.ctx.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None)

    def resume(self) -> bool:
        """Loads the latest checkpoint into the model, optimizer, schedule, scaler and clock; tells whether there was one."""
        path = latest_checkpoint(self.ckpt_dir)
        if path is None:
            log.warning("%s: no checkpoint to resume from; starting at step 0", self.ckpt_dir)
            return False
        resumed = load_checkpoint(path, self.model, self.optimizer, self.scheduler, self.scaler, self.ctx)
        self.state.step, self.state.history = resumed.step, resumed.history
        if self.clock is not None:
            self.clock.elapsed = resumed.elapsed
        log.warning("resumed from %s at step %d", path, self.state.step)
        return True

    def step(self, micro_batches: list[Batch], interval: _Interval, started: float, log_step: bool) -> tuple[float, Any]:
        """One optimizer step over this process's micro-batches; gives the learning rate it used and the gradient norm."""
        ctx, objective, optimizer = self.ctx, self.objective, self.optimizer
        counts = _global_counts(objective, micro_batches)
        for i, batch in enumerate(micro_batches):
            last = i == len(micro_batches) - 1
            sync = contextlib.nullcontext() if last or ctx.world_size == 1 else self.wrapped.no_sync()  # type: ignore[operator]
            # DDP averages gradients over processes: multiply back so the result is the global mean.
            def to_loss(sums: dict[str, torch.Tensor]) -> torch.Tensor:
                return sum(sums[t] / counts[objective.per[t]] for t in objective.loss_terms) * ctx.world_size

            own_backward = getattr(objective, "backward", None)
            with sync, self.autocast():
                if own_backward is not None:  # it runs its backward passes itself, the loss scaled as here
                    sums = own_backward(self.wrapped, batch, lambda s: self.scaler.scale(to_loss(s)))
                else:
                    sums = objective(self.wrapped, batch)
            if own_backward is None:
                self.scaler.scale(to_loss(sums)).backward()
            interval.add(sums, objective.counts(batch))
        self.scaler.unscale_(optimizer)
        max_norm = self.cfg.max_grad_norm if self.cfg.max_grad_norm > 0 else float("inf")
        grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        self.scaler.step(optimizer)
        self.scaler.update()
        lr = self.scheduler.get_last_lr()[0]
        if self.clock is not None and (ctx.world_size == 1 or log_step):
            # before the schedule's step, which may read the budget's fraction; under torchrun every process
            # takes rank 0's clock, at log steps only, so that all agree on the rate and on when to stop
            self.clock.elapsed = _rank0_value(time.perf_counter() - started, ctx)
        self.scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        return lr, grad_norm

    def evaluate(self, evaluate: Callable[[nn.Module, int], dict[str, float]], metrics_log: MetricsLog,
                 stop_when: Callable[[list[dict[str, Any]]], bool] | None) -> bool:
        """Evaluates on the main process and logs the scores; tells whether `stop_when` ends the run (all processes
        agree)."""
        stop_early = False
        if self.ctx.is_main:
            self.model.eval()
            with torch.inference_mode(), self.autocast():
                result = evaluate(self.model, self.state.step)
            self.model.train()
            row = {"step": self.state.step, **{f"eval_{k}": v for k, v in result.items()}}
            metrics_log.write(row)
            self.state.history.append(row)
            stop_early = stop_when is not None and stop_when(self.state.history)
        if stop_when is not None and self.ctx.world_size > 1:  # the main process decided; all stop together
            flag = torch.tensor([float(stop_early)], device=self.ctx.device)
            stop_early = bool(distributed.all_reduce_sum(flag).item() > 0)
        return stop_early


def _show(bar: Any, row: dict[str, Any], steps: int, step: int, clock: Clock | None) -> None:
    """A log row on the progress bar; with a time budget, the steps it will allow at this pace as the bar's total."""
    bar.set_postfix({k: _short(v) for k, v in row.items() if k in ("loss", "mlm_acc", "accuracy", "tokens_per_s")})
    if clock is not None and clock.fraction > 0:
        bar.total = min(steps, max(step, round(step / clock.fraction)))
        bar.refresh()


def _rank0_value(x: float, ctx: distributed.Context) -> float:
    if ctx.world_size == 1:
        return x
    return float(distributed.all_reduce_sum(torch.tensor([x if ctx.is_main else 0.0], device=ctx.device)).item())


def _global_counts(objective: Objective, micro_batches: list[Batch]) -> dict[str, torch.Tensor]:
    """The denominators of this step's averages, summed over micro-batches and processes."""
    total: dict[str, torch.Tensor] = {}
    for batch in micro_batches:
        for k, v in objective.counts(batch).items():
            total[k] = total.get(k, 0) + v
    names = sorted(total)
    stacked = distributed.all_reduce_sum(torch.stack([total[k].float() for k in names]))
    return {k: stacked[i].clamp(min=1) for i, k in enumerate(names)}


class _Interval:
    """Sums of the objective's outputs since the last log line, kept on the device (no host sync per step)."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, torch.Tensor] = {}
        self.tokens = 0
        self.start = time.perf_counter()

    def add(self, sums: dict[str, torch.Tensor], counts: dict[str, torch.Tensor]) -> None:
        for k, v in sums.items():
            self.sums[k] = self.sums.get(k, 0) + v.detach().float()
        for k, v in counts.items():
            self.counts[k] = self.counts.get(k, 0) + v

    def flush(self, objective: Objective, ctx: distributed.Context) -> dict[str, float]:
        names, cnames = sorted(self.sums), sorted(self.counts)
        if not names:
            return {}
        flat = torch.stack([self.sums[k] for k in names] + [torch.as_tensor(self.counts[k], dtype=torch.float32, device=self.sums[names[0]].device) for k in cnames])
        flat = distributed.all_reduce_sum(flat).tolist()
        sums, counts = dict(zip(names, flat[: len(names)], strict=True)), dict(zip(cnames, flat[len(names):], strict=True))
        out = {k: sums[k] / max(counts[objective.per[k]], 1.0) for k in names}
        out["loss"] = sum(out[t] for t in objective.loss_terms)
        elapsed = time.perf_counter() - self.start
        out["tokens_per_s"] = self.tokens * ctx.world_size / max(elapsed, 1e-9)
        self.__init__()  # type: ignore[misc]
        return out


def _short(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


# ---- data loading ---------------------------------------------------------------------------------

class _StepDataset(torch.utils.data.Dataset):
    def __init__(self, batches: StepBatches, start: int, stop: int):
        self.batches, self.start, self.stop = batches, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, i: int) -> tuple[int, list[Batch]]:
        step = self.start + i
        return step, self.batches[step]


def _prefetch(batches: StepBatches, start: int, stop: int, workers: int, device: torch.device) -> Iterator[tuple[int, list[Batch], int]]:
    """Yields (step, micro-batches on the device, real tokens in them) from `start`, loading ahead in
    worker processes; tokens are counted on the host, before the copy."""
    loader = torch.utils.data.DataLoader(
        _StepDataset(batches, start, stop), batch_size=None, shuffle=False, num_workers=workers,
        prefetch_factor=4 if workers else None, persistent_workers=False, pin_memory=device.type == "cuda",
        collate_fn=lambda x: x,
        generator=torch.Generator(),  # its own seed draw must not consume the global RNG (exact resume)
    )
    for step, micro in loader:
        tokens = sum(int(b["attention_mask"].sum()) if "attention_mask" in b else b["input_ids"].numel() for b in micro)
        yield step, [{k: v.to(device, non_blocking=True) for k, v in b.items()} for b in micro], tokens


# ---- stopping on Ctrl-C / SIGTERM ---------------------------------------------------------------

class _Stopper:
    """Turns the first SIGINT/SIGTERM into a request to save and stop after the current step."""

    def __init__(self) -> None:
        self.flag = False
        self.previous: dict[int, Any] = {}
        with contextlib.suppress(ValueError):  # signals can only be caught in the main thread
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.flag:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.flag = True
        log.warning("stopping after this step and saving a checkpoint (again to abort)")

    def requested(self, ctx: distributed.Context) -> bool:
        if ctx.world_size == 1:
            return self.flag
        flag = torch.tensor([float(self.flag)], device=ctx.device)  # any process asked: all stop together
        return bool(distributed.all_reduce_sum(flag).item() > 0)

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
