"""`bertkit pretrain`: masked-LM + next-sentence pre-training from a prepared data folder.

The settings are typed and strict (a TOML/JSON file, then `section.key=value` overrides); the run
folder holds the resolved config, checkpoints, log.jsonl, TensorBoard events and, at the end,
`model/` in Hugging Face's layout (config.json, model.safetensors, vocab.txt, tokenizer_config.json).
"""

from __future__ import annotations

import bisect
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import distributed, settings
from .config import IGNORE, PRESETS, BertConfig
from .errors import BertkitError
from .fileio import staged_dir
from .heads import BertForPreTraining
from .initialization import INITS, initialize
from .optim import OptimSettings, build_optimizer, linear_warmup_decay, warmup_steps_for
from .pretraining import PretrainingData, collate
from .settings import DEVICES, PRECISIONS, Settings, non_negative, one_of, option, positive
from .tokenizer import Tokenizer
from .train import Clock, LoopConfig, set_seed, train

log = logging.getLogger("bertkit")


# ---- settings ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelSettings(Settings):
    preset: str = option("tiny", "model size", check=one_of(*PRESETS))
    init_from: Path | None = None  # a model folder to continue from (e.g. phase 2, or domain adaptation)
    # A new model's starting weights: "bert" (Google's), or "local": every attention head starts on a neighbour and
    # the MLM output bias at the log-frequencies of the data's tokens (see docs/pretraining.md).
    init: str = option("bert", check=one_of(*INITS))
    vocab_size: int | None = None  # default: the data's vocabulary
    hidden_size: int | None = None
    num_hidden_layers: int | None = None
    num_attention_heads: int | None = None
    intermediate_size: int | None = None
    hidden_act: str | None = None
    hidden_dropout_prob: float | None = None
    attention_probs_dropout_prob: float | None = None
    max_position_embeddings: int | None = None
    initializer_range: float | None = None

    def config(self, vocab_size: int) -> BertConfig:
        fields = {k: v for k, v in self.__dict__.items() if k not in ("preset", "init_from", "init") and v is not None}
        fields.setdefault("vocab_size", vocab_size)
        if "hidden_size" in fields and "intermediate_size" not in fields:
            fields["intermediate_size"] = 4 * fields["hidden_size"]
        return BertConfig.preset(self.preset, **fields)


@dataclass(frozen=True)
class PhaseSettings(Settings):
    """One pre-training phase: the paper runs 90% of the steps at length 128, then 10% at 512."""

    data: Path
    steps: int = option(check=positive)
    batch_size: int | None = None  # default: train.batch_size
    lr: float | None = None  # default: optim.lr
    warmup: float | None = None  # default: optim.warmup


@dataclass(frozen=True)
class PretrainTrainSettings(Settings):
    steps: int = option(1000, "optimizer steps", check=positive)
    # > 0: a wall-clock budget (Cramming): the run stops when it is spent, or at `steps`, and the learning rate
    # warms up and decays over the fraction of the budget spent rather than of the steps
    minutes: float = option(0.0, check=non_negative)
    batch_size: int = option(32, "sequences an optimizer step, all processes together", check=positive)
    accumulation: int = option(1, "micro-batches a step, run one after another", check=positive)
    gradient_checkpointing: bool = option(False, "recompute activations in the backward pass: less memory, about a "
                                                 "third more time")
    precision: str = option("fp32", "bf16: autocast; fp16: with loss scaling (CUDA)", check=PRECISIONS)
    seed: int = option(12345, "seeds the model's initialization and every batch and mask")
    device: str = option("auto", "auto: a GPU when there is one", check=DEVICES)
    compile: bool = False


@dataclass(frozen=True)
class PretrainDataSettings(Settings):
    path: Path | None = option(None, "data folder made by `bertkit prepare`", flag="--data")
    num_workers: int = option(1, check=non_negative)
    eval_batches: int = option(20, check=positive)  # held-out batches per evaluation


@dataclass(frozen=True)
class CheckpointSettings(Settings):
    every: int = option(500, check=non_negative)  # steps between checkpoints (0: only at the end)
    keep: int = option(2, check=positive)  # the latest checkpoints kept


@dataclass(frozen=True)
class LogSettings(Settings):
    every: int = option(10, check=positive)
    eval_every: int = option(200, check=non_negative)
    progress: bool = True


@dataclass(frozen=True)
class PretrainSettings(Settings):
    model: ModelSettings = field(default_factory=ModelSettings)
    data: PretrainDataSettings = field(default_factory=PretrainDataSettings)
    optim: OptimSettings = field(default_factory=OptimSettings)
    train: PretrainTrainSettings = field(default_factory=PretrainTrainSettings)
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)
    log: LogSettings = field(default_factory=LogSettings)
    phases: list[PhaseSettings] = field(default_factory=list)

    def resolved_phases(self) -> list[PhaseSettings]:
        if self.phases:
            return self.phases
        if self.data.path is None:
            raise BertkitError("no data: give --data DATA_DIR (a folder made by `bertkit prepare`) or [[phases]] in the config")
        return [PhaseSettings(data=self.data.path, steps=self.train.steps)]


# ---- what a step optimizes --------------------------------------------------------------------------

class PretrainingObjective:
    """MLM loss averaged over predicted tokens plus NSP loss averaged over sequences (Google's loss)."""

    loss_terms = ("mlm_loss", "nsp_loss")
    per = {"mlm_loss": "mlm", "mlm_acc": "mlm", "nsp_loss": "nsp", "nsp_acc": "nsp"}  # sums -> their counts

    def counts(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"mlm": (batch["mlm_labels"] != IGNORE).sum(), "nsp": (batch["nsp_labels"] != IGNORE).sum()}

    def __call__(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        labels, nsp = batch["mlm_labels"], batch["nsp_labels"]
        out = model(batch["input_ids"], attention_mask=batch.get("attention_mask"), token_type_ids=batch["token_type_ids"],
                    mlm_labels=labels, packed_indices=batch.get("packed_indices"), mlm_positions=batch.get("mlm_positions"))
        targets = labels.flatten()[batch["mlm_positions"]] if "mlm_positions" in batch else labels[labels != IGNORE]
        return {
            "mlm_loss": out.mlm_loss * targets.numel(),
            "mlm_acc": (out.prediction_logits.argmax(-1) == targets).sum(),
            "nsp_loss": F.cross_entropy(out.seq_relationship_logits.float(), nsp, ignore_index=IGNORE, reduction="sum"),
            "nsp_acc": (out.seq_relationship_logits.argmax(-1) == nsp).sum(),
        }


# ---- the batches of every step ------------------------------------------------------------------------

class PretrainBatches:
    """Step -> this process's micro-batches. Each epoch visits the instances in a fresh permutation
    drawn from (seed, epoch); a step's global batch is the next slice of that stream, split into
    micro-batches and then among processes. A pure function of the step, so resuming is exact."""

    def __init__(self, phases: list[tuple[int, PretrainingData, int]], accumulation: int, ctx: distributed.Context,
                 seed: int):
        self.starts = [start for start, _, _ in phases]
        self.phases = phases
        self.accumulation, self.ctx, self.seed = accumulation, ctx, seed
        self._orders: dict[tuple[int, int], np.ndarray] = {}

    def _order(self, phase: int, epoch: int) -> np.ndarray:
        key = (phase, epoch)
        if key not in self._orders:
            n = len(self.phases[phase][1])
            self._orders = {key: np.random.default_rng([self.seed, phase, epoch]).permutation(n)}
        return self._orders[key]

    def __getitem__(self, step: int) -> list[dict[str, torch.Tensor]]:
        p = bisect.bisect_right(self.starts, step) - 1
        start, data, batch_size = self.phases[p]
        n, local = len(data), step - start
        positions = np.arange(local * batch_size, (local + 1) * batch_size)  # in the endless stream of epochs
        micro = batch_size // (self.accumulation * self.ctx.world_size)
        out = []
        for m in range(self.accumulation):
            lo = (m * self.ctx.world_size + self.ctx.rank) * micro
            examples = []
            for pos in positions[lo : lo + micro]:
                epoch, i = divmod(int(pos), n)
                examples.append(data.example(int(self._order(p, epoch)[i]), epoch, self.seed))
            out.append(training_batch(collate(examples)))
        return out


def training_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Adds what the model would otherwise find on the device with a host sync: the flat positions of
    real tokens and of predicted ones; a batch without padding drops its attention mask instead."""
    mask = batch["attention_mask"]
    if bool(mask.all()):
        batch = {k: v for k, v in batch.items() if k != "attention_mask"}
    else:
        batch["packed_indices"] = mask.flatten().nonzero().squeeze(1)
    batch["mlm_positions"] = (batch["mlm_labels"].flatten() != IGNORE).nonzero().squeeze(1)
    return batch


def evaluate_pretraining(model: BertForPreTraining, data: PretrainingData, batches: int, batch_size: int,
                         seed: int, device: torch.device) -> dict[str, float]:
    """Held-out MLM and NSP loss and accuracy on fixed masks; the accuracy of always guessing the
    most frequent masked token (the baseline pre-training must beat); and the MLM accuracy with the
    words of each segment shuffled (`mlm_shuffled_acc`): close to `mlm_acc`, the model has not yet
    learnt to use word order, only which words occur together (a bag of words)."""
    objective = PretrainingObjective()
    sums: dict[str, float] = {}
    counts = {"mlm": 0, "nsp": 0}
    target_counts: dict[int, int] = {}
    rng = np.random.default_rng(seed)
    n = min(len(data), batches * batch_size)
    for lo in range(0, n, batch_size):
        examples = [data.example(i, 0, seed) for i in range(lo, min(n, lo + batch_size))]
        batch = {k: v.to(device) for k, v in collate(examples).items()}
        for k, v in objective(model, batch).items():
            sums[k] = sums.get(k, 0.0) + float(v)
        shuffled = {k: v.to(device) for k, v in collate([shuffle_segments(e, rng) for e in examples]).items()}
        sums["mlm_shuffled_acc"] = sums.get("mlm_shuffled_acc", 0.0) + float(objective(model, shuffled)["mlm_acc"])
        for k, v in objective.counts(batch).items():
            counts[k] += int(v)
        ids, freq = np.unique(batch["mlm_labels"][batch["mlm_labels"] != IGNORE].cpu().numpy(), return_counts=True)
        for i, f in zip(ids.tolist(), freq.tolist(), strict=True):
            target_counts[i] = target_counts.get(i, 0) + f
    per = {**objective.per, "mlm_shuffled_acc": "mlm"}
    out = {k: v / max(counts[per[k]], 1) for k, v in sums.items()}
    out["loss"] = out["mlm_loss"] + out["nsp_loss"]
    out["mlm_baseline_acc"] = max(target_counts.values(), default=0) / max(counts["mlm"], 1)
    return out


def shuffle_segments(example: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Gives the instance with the tokens of each segment in a random order (their MLM labels moved
    with them); [CLS], the [SEP]s and the segment lengths stay where they are."""
    ids, labels, types = example["input_ids"].copy(), example["mlm_labels"].copy(), example["token_type_ids"]
    n, len_a = len(ids), int((types == 0).sum())  # segment A spans [CLS] ... [SEP] (token type 0)
    for lo, hi in ((1, len_a - 1), (len_a, n - 1)):
        order = lo + rng.permutation(max(hi - lo, 0))
        ids[lo:hi], labels[lo:hi] = ids[order], labels[order]
    return {**example, "input_ids": ids, "mlm_labels": labels}


# ---- the run ------------------------------------------------------------------------------------------

def pretrain(cfg: PretrainSettings, run_dir: Path, resume: bool = False) -> Path:
    """Pre-trains as configured; gives the folder of the final model (RUN/model, Hugging Face layout)."""
    ctx = distributed.setup(cfg.train.device)
    try:
        return _pretrain(cfg, run_dir, resume, ctx)
    finally:
        distributed.teardown()


def _pretrain(cfg: PretrainSettings, run_dir: Path, resume: bool, ctx: distributed.Context) -> Path:
    run_dir = Path(run_dir)
    if settings.saved(run_dir) is not None and not resume:
        raise BertkitError(f"{run_dir} already holds a run: add --resume to continue it, or choose another --out")
    phases = cfg.resolved_phases()
    if cfg.train.minutes and len(phases) > 1:
        raise BertkitError("train.minutes (a time budget) works with one phase; give the phases steps instead")
    datasets = [PretrainingData(p.data, "train") for p in phases]
    tokenizer = Tokenizer.from_pretrained(phases[0].data)
    set_seed(cfg.train.seed + ctx.rank)

    if cfg.model.init_from is not None:
        model = BertForPreTraining.from_pretrained(cfg.model.init_from)
    else:
        model = BertForPreTraining(cfg.model.config(tokenizer.vocab_size))
        initialize(model, cfg.model.init, datasets[0].token_counts)
    if model.config.vocab_size < tokenizer.vocab_size:
        raise BertkitError(f"model vocab_size {model.config.vocab_size} is smaller than the data's vocabulary ({tokenizer.vocab_size})")
    for data in datasets:
        data.check_compatible(tokenizer, model.config.max_position_embeddings)
    if cfg.train.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.to(ctx.device)

    schedule: list[tuple[int, PretrainingData, int]] = []
    lr_plan: list[tuple[int, int, float, int]] = []  # (start, steps, peak lr, warmup steps) per phase
    start = 0
    for p, data in zip(phases, datasets, strict=True):
        batch_size = p.batch_size or cfg.train.batch_size
        if batch_size % (cfg.train.accumulation * ctx.world_size):
            raise BertkitError(
                f"batch size {batch_size} is not divisible by accumulation {cfg.train.accumulation} x "
                f"{ctx.world_size} processes"
            )
        schedule.append((start, data, batch_size))
        lr_plan.append((start, p.steps, p.lr or cfg.optim.lr, warmup_steps_for(p.steps, p.warmup if p.warmup is not None else cfg.optim.warmup)))
        start += p.steps
    total_steps = start

    o = cfg.optim
    optimizer = build_optimizer(model, o.name, 1.0, tuple(o.betas), o.eps, o.weight_decay)  # the schedule gives the rate
    clock = Clock(cfg.train.minutes * 60) if cfg.train.minutes else None
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _phase_lr(lr_plan) if clock is None else _budget_lr(lr_plan[0], clock))
    if ctx.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        settings.save(run_dir, cfg)

    step_model: nn.Module = torch.compile(model, dynamic=True) if cfg.train.compile else model
    eval_data = PretrainingData(phases[0].data, "eval")  # held out by the first phase's prepare

    def evaluate(m: nn.Module, step: int) -> dict[str, float]:
        return evaluate_pretraining(model, eval_data, cfg.data.eval_batches, schedule[0][2], cfg.train.seed, ctx.device)

    loop = LoopConfig(
        steps=total_steps, max_grad_norm=o.max_grad_norm, precision=cfg.train.precision, log_every=cfg.log.every,
        eval_every=cfg.log.eval_every, checkpoint_every=cfg.checkpoint.every, keep_checkpoints=cfg.checkpoint.keep,
        num_workers=cfg.data.num_workers, seed=cfg.train.seed, progress=cfg.log.progress,
    )
    t0 = time.perf_counter()
    batches = PretrainBatches(schedule, cfg.train.accumulation, ctx, cfg.train.seed)
    held_out = len(eval_data) > 0  # `prepare --eval-fraction 0` holds nothing out: no evaluation then
    train(step_model, PretrainingObjective(), batches, optimizer, scheduler, loop, run_dir, ctx,
          evaluate=evaluate if held_out else None, resume=resume, run_config=settings.to_dict(cfg), clock=clock)
    out = run_dir / "model"
    if ctx.is_main:
        save_model(model, tokenizer, out)
        log.warning("pre-training done in %.0f s; model in %s", time.perf_counter() - t0, out)
    distributed.barrier()
    return out


def _phase_lr(plan: list[tuple[int, int, float, int]]):
    """The learning rate at each global step: every phase warms up and decays linearly on its own."""
    starts = [s for s, _, _, _ in plan]

    def lr(step: int) -> float:
        start, steps, peak, warmup = plan[max(0, bisect.bisect_right(starts, step) - 1)]
        return peak * linear_warmup_decay(step - start, warmup, steps)

    return lr


def _budget_lr(phase: tuple[int, int, float, int], clock: Clock):
    """The learning rate under a time budget: warmup and linear decay over the fraction of the budget spent
    (or of the steps, if they run out first), so that the rate reaches zero when the time does."""
    _, steps, peak, warmup = phase
    w = warmup / steps

    def lr(step: int) -> float:
        return peak * linear_warmup_decay(max(clock.fraction, step / steps), w, 1.0)

    return lr


def save_model(model: BertForPreTraining, tokenizer: Tokenizer, out: Path) -> None:
    """Writes the model and its tokenizer to `out` in Hugging Face's layout, replacing it whole."""
    with staged_dir(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)


