"""`bertkit finetune`: one of the four task families, end to end, the way the paper does it.

AdamW with weight decay 0.01, linear warmup over 10% of the steps then linear decay, batches of
similar lengths (dynamic padding), evaluation on dev after every epoch. `--grid` runs the paper's
grid (batch 16/32 x lr 5e-5/3e-5/2e-5 x epochs 2/3/4, or the subset given) and keeps the best run on
dev. The best model goes to OUT/model in Hugging Face's layout, with its task settings beside it.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from . import distributed
from .checkpoint import Pretrained
from .errors import BertkitError
from .fileio import atomic_write_text
from .optim import build_optimizer, linear_schedule, warmup_steps_for
from .settings import check
from .tasks import Dataset, Features, Task, get_task
from .tokenizer import Tokenizer
from .train import LoopConfig, set_seed, train

log = logging.getLogger("bertkit")

TASK_FILE = "bertkit_task.json"  # written beside config.json: what a model was fine-tuned for
PAPER_GRID = {"batch_size": (16, 32), "lr": (5e-5, 3e-5, 2e-5), "epochs": (2, 3, 4)}


@dataclass(frozen=True)
class FinetuneSettings:
    task: str
    model: Path
    train: Path
    dev: Path
    out: Path
    test: Path | None = None
    epochs: int = 3
    batch_size: int = 32
    lr: float = 2e-5
    max_seq_length: int | None = None  # default: the task's (128; 384 for qa)
    seed: int = 42
    warmup: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    precision: str = "fp32"
    device: str = "auto"
    eval_batch_size: int = 64
    read_options: dict[str, Any] = field(default_factory=dict)  # reader format / column mapping
    task_options: dict[str, Any] = field(default_factory=dict)  # e.g. regression, doc_stride, scheme
    grid: dict[str, tuple[Any, ...]] | None = None  # None: one run with the settings above
    crf: bool = False  # ner: a CRF layer over the tags
    progress: bool = True

    def __post_init__(self) -> None:
        check(self.epochs > 0, f"epochs must be positive, got {self.epochs}")
        check(self.batch_size > 0, f"batch size must be positive, got {self.batch_size}")
        check(0 < self.lr < 1, f"learning rate must be in (0, 1), got {self.lr}")
        check(self.warmup >= 0, f"warmup must be >= 0, got {self.warmup}")
        check(self.precision in ("fp32", "bf16", "fp16"), f"precision must be fp32, bf16 or fp16, got {self.precision!r}")
        check(self.max_seq_length is None or 8 <= self.max_seq_length <= 512,
              f"max sequence length must be in [8, 512], got {self.max_seq_length}")
        check(not self.crf or self.task == "ner", "a CRF layer is for the ner task only")


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
            return {"n": (batch["labels"] != -100).sum()}
        return {"n": torch.tensor(batch["input_ids"].shape[0], device=batch["input_ids"].device)}

    def __call__(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = model(**batch)
        return {"loss": out.loss * self.counts(batch)["n"]}


# ---- inference -------------------------------------------------------------------------------------

# The logits each task model gives, and whether they come per token (padded to the longest row).
OUTPUTS: dict[str, dict[str, bool]] = {
    "BertForSequenceClassification": {"logits": False},
    "BertForTokenClassification": {"logits": True},
    "BertForQuestionAnswering": {"start_logits": True, "end_logits": True},
}


@torch.inference_mode()
def infer(model: Pretrained, task: Task, features: Features, batch_size: int = 64, device: torch.device | None = None,
          precision: str = "fp32", progress: bool = False) -> dict[str, np.ndarray]:
    """Gives the model's logits for every feature row, in row order; per-token ones padded to the longest row.

    Rows run longest first so that each batch holds rows of similar length: [PAD] costs nothing inside
    the encoder, but attention still sees the batch's longest row.
    """
    device = device or next(model.parameters()).device
    outputs = OUTPUTS[model.hf_architecture]
    lengths = features.lengths
    order = np.argsort(-lengths, kind="stable")
    T = int(lengths.max()) if len(lengths) else 0
    was_training = model.training
    model.eval()
    result: dict[str, np.ndarray] = {}
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    for lo in tqdm(range(0, len(order), batch_size), disable=not progress, desc="predict", unit="batch", leave=False):
        idx = order[lo : lo + batch_size]
        batch = task.collate([features.rows[i] for i in idx], features.pad_token_id)
        batch = {k: v.to(device) for k, v in batch.items() if k in ("input_ids", "token_type_ids", "attention_mask")}
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            out = model(**batch)
        for name, per_token in outputs.items():
            x = getattr(out, name).float().cpu().numpy()  # (B, t, ...) per token, else (B, ...)
            if name not in result:
                rest = x.shape[2:] if per_token else x.shape[1:]
                result[name] = np.zeros((len(lengths), T, *rest) if per_token else (len(lengths), *rest), np.float32)
            if per_token:
                result[name][idx, : x.shape[1]] = x
            else:
                result[name][idx] = x
    model.train(was_training)
    return result


def decode_options(model: Pretrained) -> dict[str, Any]:
    """A tagger with a CRF decodes the best whole tag sequence (Viterbi) rather than each tag alone."""
    crf = getattr(model, "crf", None)
    return {"crf": crf} if crf is not None else {}


def evaluate_task(model: Pretrained, task: Task, features: Features, batch_size: int = 64, precision: str = "fp32",
                  progress: bool = False) -> tuple[dict[str, float], list[Any]]:
    """Gives the task's scores on `features` (percent) and the predictions they were computed from."""
    outputs = infer(model, task, features, batch_size, precision=precision, progress=progress)
    predictions = task.decode(features, outputs, **decode_options(model))
    return task.score(features.data, predictions), predictions


def paired_bootstrap(task: Task, data: Dataset, base: Sequence[Any], other: Sequence[Any], metric: str,
                     resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """The 95% interval of `other`'s score minus `base`'s on `data` (percentile, paired bootstrap over the
    examples, as Koehn (2004) does for comparing two systems): both models' predictions of the same
    resampled examples are scored together, so the interval is of the difference, not of each score."""
    if not (len(base) == len(other) == len(data)) or any(p.example is not e or q.example is not e
                                                         for p, q, e in zip(base, other, data.examples, strict=True)):
        raise ValueError("paired_bootstrap needs one prediction of each model per example, in the data's order")
    rng = np.random.default_rng(seed)
    samples = [rng.integers(0, len(data), len(data)) for _ in range(resamples)]
    a, b = _per_example(task, data, base, metric), _per_example(task, data, other, metric)
    if a is not None and b is not None:  # a mean over examples (accuracy, SQuAD's F1): resample the differences
        gains = [float((b - a)[idx].mean()) for idx in samples]
    else:  # entity F1 and the like: score every resample whole
        gains = []
        for idx in samples:
            sample = replace(data, examples=[data.examples[i] for i in idx])
            gains.append(task.score(sample, [other[i] for i in idx])[metric] - task.score(sample, [base[i] for i in idx])[metric])
    lo, hi = np.percentile(gains, [2.5, 97.5])
    return float(lo), float(hi)


def _per_example(task: Task, data: Dataset, predictions: Sequence[Any], metric: str) -> np.ndarray | None:
    """Each example's own score where the metric is their mean (checked against the whole), else None."""
    with np.errstate(all="ignore"):
        one = np.array([task.score(replace(data, examples=[e]), [p])[metric] for e, p in zip(data.examples, predictions, strict=True)])
    whole = task.score(data, predictions)[metric]
    return one if np.isfinite(one).all() and abs(one.mean() - whole) <= 1e-6 * max(1.0, abs(whole)) else None


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
    ctx = distributed.setup(cfg.device)
    if ctx.world_size > 1:
        raise BertkitError("finetune runs in one process; use torchrun for pre-training")
    out = Path(cfg.out)
    tok = Tokenizer.from_pretrained(cfg.model)
    task = get_task(cfg.task, **({"max_seq_length": cfg.max_seq_length} if cfg.max_seq_length else {}), **cfg.task_options)
    train_data = task.read(cfg.train, **cfg.read_options)
    dev_data = task.read(cfg.dev, **cfg.read_options)
    for d in (train_data, dev_data):
        log.warning("%s", d.report.summary())
    if len(train_data) == 0:
        raise BertkitError(f"{cfg.train}: no training examples")
    labels = task.labels(train_data)
    label2id = {label: i for i, label in enumerate(labels)}
    t0 = time.perf_counter()
    train_features = task.featurize(train_data, tok, label2id)
    dev_features = task.featurize(dev_data, tok, label2id)
    log.warning("featurized %d + %d rows in %.1f s", len(train_features), len(dev_features), time.perf_counter() - t0)

    points = _grid_points(cfg)
    results: list[RunResult] = []
    for bs, lr, epochs in points:
        run_cfg = replace(cfg, batch_size=bs, lr=lr, epochs=epochs)
        run_dir = out / "runs" / f"bs{bs}-lr{lr:g}-ep{epochs}" if len(points) > 1 else out / "run"
        results.append(_one_run(run_cfg, task, labels, train_features, dev_features, run_dir, ctx, resume))
        _write_table(out, cfg, results)

    best = max(results, key=lambda r: r.dev.get(task.main_metric, float("-inf")))
    final = out / "model"
    tmp = out / "model.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(best.path / "model", tmp)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    summary: dict[str, Any] = {
        "task": cfg.task, "main_metric": task.main_metric, "labels": labels,
        "best": {"batch_size": best.batch_size, "lr": best.lr, "epochs": best.epochs, "dev": best.dev},
        "runs": [{"batch_size": r.batch_size, "lr": r.lr, "epochs": r.epochs, "dev": r.dev, "seconds": round(r.seconds, 1)} for r in results],
    }
    if cfg.test is not None:
        test_data = task.read(cfg.test, **cfg.read_options)
        log.warning("%s", test_data.report.summary())
        model = task.model_class.from_pretrained(final)
        model.to(ctx.device)
        summary["test"], _ = evaluate_task(model, task, task.featurize(test_data, tok, label2id), cfg.eval_batch_size, cfg.precision)
    atomic_write_text(out / "results.json", json.dumps(summary, indent=2) + "\n")
    return summary


def _grid_points(cfg: FinetuneSettings) -> list[tuple[int, float, int]]:
    if cfg.grid is None:
        return [(cfg.batch_size, cfg.lr, cfg.epochs)]
    g = {**PAPER_GRID, **cfg.grid}
    return list(itertools.product(g["batch_size"], g["lr"], g["epochs"]))


def _one_run(cfg: FinetuneSettings, task: Task, labels: list[str], train_features: Features, dev_features: Features,
             run_dir: Path, ctx: distributed.Context, resume: bool) -> RunResult:
    done = run_dir / "result.json"
    if resume and done.is_file():
        r = json.loads(done.read_text())
        return RunResult(cfg.batch_size, cfg.lr, cfg.epochs, r["dev"], r["seconds"], run_dir, r.get("history", []))
    if run_dir.exists() and not resume:
        shutil.rmtree(run_dir)
    set_seed(cfg.seed)
    model = task.model_class.from_pretrained(cfg.model, id2label=dict(enumerate(labels)), problem_type=task.problem_type,
                                             **({"crf": True} if cfg.crf else {}))
    model.to(ctx.device)
    batches = EpochBatches(train_features, lambda rows: task.collate(rows, train_features.pad_token_id), cfg.batch_size, cfg.seed)
    steps = batches.per_epoch * cfg.epochs
    optimizer = build_optimizer(model, "adamw", cfg.lr, (0.9, 0.999), 1e-6, cfg.weight_decay)
    scheduler = linear_schedule(optimizer, warmup_steps_for(steps, cfg.warmup), steps)
    loop = LoopConfig(steps=steps, max_grad_norm=cfg.max_grad_norm, precision=cfg.precision,
                      log_every=max(1, min(50, batches.per_epoch // 4)), eval_every=batches.per_epoch,
                      checkpoint_every=batches.per_epoch, keep_checkpoints=1, num_workers=0, seed=cfg.seed,
                      progress=cfg.progress)
    objective = TaskObjective(per_token=task.name == "ner" and not cfg.crf)  # a CRF's loss is per sentence

    def evaluate(m: nn.Module) -> dict[str, float]:
        scores, _ = evaluate_task(model, task, dev_features, cfg.eval_batch_size, cfg.precision)
        return scores

    t0 = time.perf_counter()
    state = train(model, objective, batches, optimizer, scheduler, loop, run_dir, ctx, evaluate=evaluate, resume=resume,
                  run_config={"batch_size": cfg.batch_size, "lr": cfg.lr, "epochs": cfg.epochs, "seed": cfg.seed})
    seconds = time.perf_counter() - t0
    dev = next((  # the last evaluation is the final model's
        {k.removeprefix("eval_"): v for k, v in row.items() if k.startswith("eval_")}
        for row in reversed(state.history) if any(k.startswith("eval_") for k in row)), {})
    save_finetuned(model, Tokenizer.from_pretrained(cfg.model), run_dir / "model", task, labels, cfg, dev)
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # the run is done: its model is saved
    atomic_write_text(done, json.dumps({"dev": dev, "seconds": seconds, "history": state.history}) + "\n")
    log.warning("run bs=%d lr=%g epochs=%d: dev %s (%.0f s)", cfg.batch_size, cfg.lr, cfg.epochs,
                ", ".join(f"{k} {v:.2f}" for k, v in dev.items()), seconds)
    return RunResult(cfg.batch_size, cfg.lr, cfg.epochs, dev, seconds, run_dir, state.history)


def save_finetuned(model: Pretrained, tok: Tokenizer, directory: Path, task: Task, labels: list[str],
                   cfg: FinetuneSettings, dev: dict[str, float]) -> None:
    """Writes model + tokenizer in Hugging Face's layout and TASK_FILE with what `predict` needs."""
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    meta = {
        "task": task.name,
        "labels": labels,
        "task_options": {**cfg.task_options, **({"max_seq_length": cfg.max_seq_length} if cfg.max_seq_length else {})},
        # how user text must be read to look like the training data (NER trained on NFKC text, say)
        "input_options": {k: v for k, v in cfg.read_options.items() if k == "normalize"},
        "settings": {"batch_size": cfg.batch_size, "lr": cfg.lr, "epochs": cfg.epochs, "seed": cfg.seed,
                     "warmup": cfg.warmup, "weight_decay": cfg.weight_decay, "base_model": str(cfg.model)},
        "dev": dev,
    }
    atomic_write_text(directory / TASK_FILE, json.dumps(meta, indent=2, ensure_ascii=False) + "\n")


def _write_table(out: Path, cfg: FinetuneSettings, results: list[RunResult]) -> None:
    metrics = sorted({k for r in results for k in r.dev})
    lines = ["| batch | lr | epochs | " + " | ".join(metrics) + " | seconds |",
             "|---|---|---|" + "---|" * len(metrics) + "---|"]
    for r in results:
        lines.append(f"| {r.batch_size} | {r.lr:g} | {r.epochs} | " + " | ".join(f"{r.dev.get(m, float('nan')):.2f}" for m in metrics) + f" | {r.seconds:.0f} |")
    atomic_write_text(out / "grid.md", "\n".join(lines) + "\n")
