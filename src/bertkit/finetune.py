"""`bertkit finetune`: one of the four task families, end to end, the way the paper does it.

AdamW with weight decay 0.01, linear warmup over 10% of the steps then linear decay, batches of
similar lengths (dynamic padding), evaluation on dev after every epoch. `--grid` runs the paper's
grid (batch 16/32 x lr 5e-5/3e-5/2e-5 x epochs 2/3/4, or the subset given) and keeps the best run on
dev. The best model goes to OUT/model in Hugging Face's layout, with its task settings beside it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import math
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from . import distributed, settings
from .config import IGNORE
from .errors import BertkitError
from .fileio import atomic_write_text
from .heads import MODEL_CLASSES, to_tensors
from .model import Pretrained
from .optim import OptimSettings, build_optimizer, linear_schedule, warmup_steps_for
from .predict import TASK_FILE, evaluate_task
from .settings import check
from .tasks import TASKS, Features, Task, get_task
from .tokenizer import Tokenizer
from .train import LoopConfig, set_seed, train

log = logging.getLogger("bertkit")

@dataclass(frozen=True)
class TaskSettings:
    """Which task family, and its options (each for the families it names)."""

    name: str = "classify"  # classify | pair | qa | ner
    max_seq_length: int | None = None  # default: the task's (128; 384 for qa)
    regression: bool = False  # classify/pair: a score (the labels are numbers), not a class
    scheme: str | None = None  # ner: BIO or BIOES to learn (default: the training file's, IOB1 becoming BIO)
    crf: bool = False  # ner: a CRF over the tags (Viterbi decoding)
    constrained: bool = False  # ner without a CRF: the most probable tag sequence the scheme allows
    doc_stride: int | None = None  # qa: tokens between passage windows (default 128)

    def __post_init__(self) -> None:
        check(self.name in TASKS, f"task.name must be one of {', '.join(TASKS)}, got {self.name!r}")
        check(self.max_seq_length is None or 8 <= self.max_seq_length <= 512,
              f"task.max_seq_length must be in [8, 512], got {self.max_seq_length}")
        check(not self.regression or self.name in ("classify", "pair"), "task.regression is for classify and pair only")
        check(not (self.crf or self.constrained or self.scheme) or self.name == "ner",
              "task.crf, task.constrained and task.scheme are for ner only")
        check(self.doc_stride is None or self.name == "qa", "task.doc_stride is for qa only")

    def options(self) -> dict[str, Any]:
        """The keyword arguments of `get_task`, as the task file keeps them: only what differs from the defaults."""
        fields = {k: v for k, v in dataclasses.asdict(self).items() if k != "name"}
        return {k: v for k, v in fields.items() if v not in (None, False)}


@dataclass(frozen=True)
class DataSettings:
    """The labelled files, and how to read the user's own (see docs/finetuning.md)."""

    train: Path | None = None
    dev: Path | None = None
    test: Path | None = None
    format: str | None = None  # classify/pair: tsv | csv | jsonl (default: by the file's extension)
    columns: dict[str, str | int] | None = None  # classify/pair: where the fields are, {text = 0, label = 1}
    header: bool | None = None  # classify/pair: whether the table has a header row (default: detected)
    normalize: str | None = None  # ner: "NFKC" normalizes the words (e.g. full-width digits), also at predict
    skip_bad_rows: bool = False  # skip and count malformed rows instead of stopping

    def read_options(self) -> dict[str, Any]:
        """The keyword arguments of the task's reader."""
        opts: dict[str, Any] = {"format": self.format, "columns": self.columns, "header": self.header,
                                "normalize": self.normalize, "bad_rows": "skip" if self.skip_bad_rows else None}
        return {k: v for k, v in opts.items() if v is not None}


@dataclass(frozen=True)
class TrainSettings:
    epochs: int = 3
    batch_size: int = 32
    eval_batch_size: int = 64
    seed: int = 42
    precision: str = "fp32"  # fp32 | bf16 | fp16 (CUDA)
    device: str = "auto"
    progress: bool = True

    def __post_init__(self) -> None:
        check(self.epochs > 0, f"train.epochs must be positive, got {self.epochs}")
        check(self.batch_size > 0 and self.eval_batch_size > 0,
              f"train.batch_size must be positive, got {self.batch_size}")
        check(self.precision in ("fp32", "bf16", "fp16"), f"train.precision must be fp32, bf16 or fp16, got {self.precision!r}")


@dataclass(frozen=True)
class GridSettings:
    """The paper's grid of fine-tuning runs, or the subset given; the best run on dev is kept."""

    batch_size: tuple[int, ...] = (16, 32)
    lr: tuple[float, ...] = (5e-5, 3e-5, 2e-5)
    epochs: tuple[int, ...] = (2, 3, 4)

    def __post_init__(self) -> None:
        check(all(self.batch_size) and all(self.lr) and all(self.epochs) and
              min(len(self.batch_size), len(self.lr), len(self.epochs)) > 0, "grid values must be non-empty and non-zero")

    def points(self) -> list[tuple[int, float, int]]:
        return list(itertools.product(self.batch_size, self.lr, self.epochs))


@dataclass(frozen=True)
class FinetuneSettings:
    """Everything `bertkit finetune` does, typed: from a TOML/JSON file (`--config`), the command's options,
    then `section.key=value` overrides, as pre-training's settings."""

    model: Path | None = None  # the pre-trained model folder (bertkit's or Hugging Face's)
    out: Path | None = None
    task: TaskSettings = field(default_factory=TaskSettings)
    data: DataSettings = field(default_factory=DataSettings)
    optim: OptimSettings = field(default_factory=lambda: OptimSettings(lr=2e-5, warmup=0.1))  # the paper's
    train: TrainSettings = field(default_factory=TrainSettings)
    grid: GridSettings | None = None  # None: one run with train.batch_size, optim.lr and train.epochs

    def __post_init__(self) -> None:
        for value, what, flag, key in ((self.model, "model", "--model DIR", "model"), (self.out, "output folder", "--out DIR", "out"),
                                       (self.data.train, "training file", "--train FILE", "data.train"),
                                       (self.data.dev, "dev file", "--dev FILE", "data.dev")):
            check(value is not None, f"no {what}: give {flag} (or {key} in a --config file)")
        check(self.optim.name == "adamw", f"fine-tuning uses adamw, got optim.name={self.optim.name!r}")

    def points(self) -> list[tuple[int, float, int]]:
        """(batch size, learning rate, epochs) of every run."""
        if self.grid is None:
            return [(self.train.batch_size, self.optim.lr, self.train.epochs)]
        return self.grid.points()

    def at(self, batch_size: int, lr: float, epochs: int) -> FinetuneSettings:
        """These settings for one point of the grid."""
        return replace(self, train=replace(self.train, batch_size=batch_size, epochs=epochs), optim=replace(self.optim, lr=lr))


# ---- batches and objective -------------------------------------------------------------------------

class EpochBatches:
    """Step -> one batch of rows. Every epoch shuffles with (seed, epoch), then groups rows of similar
    length (sorted within pools of 50 batches, the batches shuffled again) so little is padded."""

    def __init__(self, features: Features, collate, batch_size: int, seed: int, pool: int = 50):
        self.features, self.collate, self.batch_size, self.seed, self.pool = features, collate, batch_size, seed, pool
        self.per_epoch = math.ceil(len(features) / batch_size)
        self.lengths = features.lengths
        self._epoch: tuple[int, list[np.ndarray]] | None = None

    def __len__(self) -> int:
        return self.per_epoch

    def batches_of(self, epoch: int) -> list[np.ndarray]:
        if self._epoch is None or self._epoch[0] != epoch:
            rng = np.random.default_rng([self.seed, epoch])
            order = rng.permutation(len(self.features))
            size = self.batch_size * self.pool
            batches = []
            for lo in range(0, len(order), size):
                chunk = order[lo : lo + size]
                chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
                batches += [chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
            self._epoch = (epoch, [batches[i] for i in rng.permutation(len(batches))])
        return self._epoch[1]

    def __getitem__(self, step: int) -> list[dict[str, torch.Tensor]]:
        epoch, i = divmod(step, self.per_epoch)
        return [self.collate([self.features.rows[j] for j in self.batches_of(epoch)[i]])]


class TaskObjective:
    """The task model's own loss, averaged over the examples (or, for tagging, the labelled tokens)."""

    loss_terms = ("loss",)
    per = {"loss": "n"}

    def __init__(self, per_token: bool):
        self.per_token = per_token

    def counts(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if self.per_token:
            return {"n": (batch["labels"] != IGNORE).sum()}
        return {"n": torch.tensor(batch["input_ids"].shape[0], device=batch["input_ids"].device)}

    def __call__(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = model(**batch)
        return {"loss": out.loss * self.counts(batch)["n"]}


# ---- one run, and the grid ---------------------------------------------------------------------------

@dataclass
class RunResult:
    batch_size: int
    lr: float
    epochs: int
    dev: dict[str, float]
    seconds: float
    path: Path
    history: list[dict[str, Any]] = field(default_factory=list)


def finetune(cfg: FinetuneSettings, resume: bool = False) -> dict[str, Any]:
    """Fine-tunes (one run, or the grid) and gives a summary: every run's dev scores, the best, and
    its test scores when a test file is given. The best model is written to OUT/model."""
    assert cfg.model is not None and cfg.out is not None and cfg.data.train is not None and cfg.data.dev is not None
    ctx = distributed.setup(cfg.train.device)
    if ctx.world_size > 1:
        raise BertkitError("finetune runs in one process; use torchrun for pre-training")
    out = Path(cfg.out)
    tok = Tokenizer.from_pretrained(cfg.model)
    task = get_task(cfg.task.name, **cfg.task.options())
    read_options = cfg.data.read_options()
    train_data = task.read(cfg.data.train, **read_options)
    dev_data = task.read(cfg.data.dev, **read_options)
    for d in (train_data, dev_data):
        log.warning("%s", d.report.summary())
    if len(train_data) == 0:
        raise BertkitError(f"{cfg.data.train}: no training examples")
    labels = task.labels(train_data)
    label2id = {label: i for i, label in enumerate(labels)}
    t0 = time.perf_counter()
    train_features = task.featurize(train_data, tok, label2id)
    dev_features = task.featurize(dev_data, tok, label2id)
    log.warning("featurized %d + %d rows in %.1f s", len(train_features), len(dev_features), time.perf_counter() - t0)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.json", json.dumps(settings.to_dict(cfg), indent=2) + "\n")

    points = cfg.points()
    results: list[RunResult] = []
    for bs, lr, epochs in points:
        run_dir = out / "runs" / f"bs{bs}-lr{lr:g}-ep{epochs}" if len(points) > 1 else out / "run"
        results.append(_one_run(cfg.at(bs, lr, epochs), task, labels, train_features, dev_features, run_dir, ctx, resume))
        _write_table(out, results)

    best = max(results, key=lambda r: r.dev.get(task.main_metric, float("-inf")))
    final = out / "model"
    tmp = out / "model.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(best.path / "model", tmp)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    summary: dict[str, Any] = {
        "task": cfg.task.name, "main_metric": task.main_metric, "labels": labels,
        "best": {"batch_size": best.batch_size, "lr": best.lr, "epochs": best.epochs, "dev": best.dev},
        "runs": [{"batch_size": r.batch_size, "lr": r.lr, "epochs": r.epochs, "dev": r.dev, "seconds": round(r.seconds, 1)} for r in results],
    }
    if cfg.data.test is not None:
        test_data = task.read(cfg.data.test, **read_options)
        log.warning("%s", test_data.report.summary())
        model = MODEL_CLASSES[task.architecture].from_pretrained(final)
        model.to(ctx.device)
        summary["test"], _ = evaluate_task(model, task, task.featurize(test_data, tok, label2id), cfg.train.eval_batch_size,
                                           cfg.train.precision)
    atomic_write_text(out / "results.json", json.dumps(summary, indent=2) + "\n")
    return summary


def _one_run(cfg: FinetuneSettings, task: Task, labels: list[str], train_features: Features, dev_features: Features,
             run_dir: Path, ctx: distributed.Context, resume: bool) -> RunResult:
    assert cfg.model is not None
    t, o = cfg.train, cfg.optim
    done = run_dir / "result.json"
    if resume and done.is_file():
        r = json.loads(done.read_text())
        return RunResult(t.batch_size, o.lr, t.epochs, r["dev"], r["seconds"], run_dir, r.get("history", []))
    if run_dir.exists() and not resume:
        shutil.rmtree(run_dir)
    set_seed(t.seed)
    model = MODEL_CLASSES[task.architecture].from_pretrained(cfg.model, id2label=dict(enumerate(labels)), problem_type=task.problem_type,
                                             **task.model_options)
    model.to(ctx.device)
    batches = EpochBatches(train_features, lambda rows: to_tensors(task.collate(rows, train_features.pad_token_id)),
                           t.batch_size, t.seed)
    steps = batches.per_epoch * t.epochs
    optimizer = build_optimizer(model, o.name, o.lr, tuple(o.betas), o.eps, o.weight_decay)
    scheduler = linear_schedule(optimizer, warmup_steps_for(steps, o.warmup), steps)
    loop = LoopConfig(steps=steps, max_grad_norm=o.max_grad_norm, precision=t.precision,
                      log_every=max(1, min(50, batches.per_epoch // 4)), eval_every=batches.per_epoch,
                      checkpoint_every=batches.per_epoch, keep_checkpoints=1, num_workers=0, seed=t.seed,
                      progress=t.progress)

    def evaluate(m: nn.Module) -> dict[str, float]:
        scores, _ = evaluate_task(model, task, dev_features, t.eval_batch_size, t.precision)
        return scores

    t0 = time.perf_counter()
    state = train(model, TaskObjective(per_token=task.per_token_loss), batches, optimizer, scheduler, loop, run_dir, ctx,
                  evaluate=evaluate, resume=resume,
                  run_config={"batch_size": t.batch_size, "lr": o.lr, "epochs": t.epochs, "seed": t.seed})
    seconds = time.perf_counter() - t0
    dev = next((  # the last evaluation is the final model's
        {k.removeprefix("eval_"): v for k, v in row.items() if k.startswith("eval_")}
        for row in reversed(state.history) if any(k.startswith("eval_") for k in row)), {})
    save_finetuned(model, Tokenizer.from_pretrained(cfg.model), run_dir / "model", task, labels, cfg, dev)
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # the run is done: its model is saved
    atomic_write_text(done, json.dumps({"dev": dev, "seconds": seconds, "history": state.history}) + "\n")
    log.warning("run bs=%d lr=%g epochs=%d: dev %s (%.0f s)", t.batch_size, o.lr, t.epochs,
                ", ".join(f"{k} {v:.2f}" for k, v in dev.items()), seconds)
    return RunResult(t.batch_size, o.lr, t.epochs, dev, seconds, run_dir, state.history)


def save_finetuned(model: Pretrained, tok: Tokenizer, directory: Path, task: Task, labels: list[str],
                   cfg: FinetuneSettings, dev: dict[str, float]) -> None:
    """Writes model + tokenizer in Hugging Face's layout and TASK_FILE with what `predict` needs."""
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    meta = {
        "task": task.name,
        "labels": labels,
        "task_options": cfg.task.options(),
        # how user text must be read to look like the training data (NER trained on NFKC text, say)
        "input_options": {"normalize": cfg.data.normalize} if cfg.data.normalize else {},
        "settings": {"batch_size": cfg.train.batch_size, "lr": cfg.optim.lr, "epochs": cfg.train.epochs,
                     "seed": cfg.train.seed, "warmup": cfg.optim.warmup, "weight_decay": cfg.optim.weight_decay,
                     "base_model": str(cfg.model)},
        "dev": dev,
    }
    atomic_write_text(directory / TASK_FILE, json.dumps(meta, indent=2, ensure_ascii=False) + "\n")


def _write_table(out: Path, results: list[RunResult]) -> None:
    metrics = sorted({k for r in results for k in r.dev})
    lines = ["| batch | lr | epochs | " + " | ".join(metrics) + " | seconds |",
             "|---|---|---|" + "---|" * len(metrics) + "---|"]
    for r in results:
        lines.append(f"| {r.batch_size} | {r.lr:g} | {r.epochs} | " + " | ".join(f"{r.dev.get(m, float('nan')):.2f}" for m in metrics) + f" | {r.seconds:.0f} |")
    atomic_write_text(out / "grid.md", "\n".join(lines) + "\n")
