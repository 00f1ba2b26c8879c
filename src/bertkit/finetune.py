"""`bertkit finetune`: one of the four task families, end to end, the way the paper does it.

AdamW with weight decay 0.01, linear warmup over 10% of the steps then linear decay, batches of
similar lengths (dynamic padding), evaluation on dev after every epoch (or every `eval_every` steps).
Each run keeps its best checkpoint by one dev metric (the task's own, or the one asked for) and may
stop early. `--grid` runs the paper's grid (batch 16/32 x lr 5e-5/3e-5/2e-5 x epochs 2/3/4, or the
subset given) and keeps the best run by the same metric. The winner goes to OUT/model in Hugging
Face's layout, with its task settings beside it.

Under `torchrun --nproc_per_node N` each process takes its share of every batch (and of its
`accumulation` micro-batches): the updates are those of one process with the same batch size.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from . import distributed, settings
from .config import IGNORE, BertConfig
from .errors import BertkitError
from .fileio import atomic_write_text, recover_dir, staged_dir
from .finetune_settings import FinetuneSettings, FinetuneTrainSettings
from .folders import TASK_FILE, read_task_file
from .heads import MODEL_CLASSES, to_tensors
from .hub import resolve_model
from .model import Pretrained
from .modelcard import write_model_card
from .optim import OptimSettings, build_optimizer, linear_schedule, warmup_steps_for
from .predict import evaluate_task, infer
from .tasks import Features, Learner, Task, get_task
from .tokenizer import Tokenizer
from .train import LoopConfig, set_seed, train

log = logging.getLogger("bertkit")


# ---- batches and objective -------------------------------------------------------------------------

class EpochBatches:
    """Step -> this process's micro-batches of one batch. Every epoch shuffles with (seed, epoch), then
    groups rows of similar length (sorted within pools of 50 batches, the batches shuffled again) so
    little is padded. A batch is cut into `accumulation` x processes parts: micro-batch m of process r
    is part m * processes + r, so the parts together are the batch one process would take."""

    def __init__(self, features: Features, collate, batch_size: int, seed: int, pool: int = 50,
                 accumulation: int = 1, rank: int = 0, world_size: int = 1):
        self.features, self.collate, self.batch_size, self.seed, self.pool = features, collate, batch_size, seed, pool
        self.accumulation, self.rank, self.world_size = accumulation, rank, world_size
        short = len(features) % batch_size
        # under torchrun a last batch with fewer rows than processes would leave one without work: it is dropped
        self.per_epoch = math.ceil(len(features) / batch_size) - (0 < short < world_size)
        self.lengths = features.sort_keys
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
            batches = [batches[i] for i in rng.permutation(len(batches))]
            self._epoch = (epoch, [b for b in batches if len(b) >= self.world_size])
        return self._epoch[1]

    def __getitem__(self, step: int) -> list[dict[str, torch.Tensor]]:
        epoch, i = divmod(step, self.per_epoch)
        parts = np.array_split(self.batches_of(epoch)[i], self.accumulation * self.world_size)
        mine = [parts[m * self.world_size + self.rank] for m in range(self.accumulation)]
        # a short last batch may leave some parts empty, but never all of a process's parts
        return [self.collate([self.features.rows[j] for j in part]) for part in mine if len(part)]


class TaskObjective:
    """The task model's own loss, averaged over the examples (or, for tagging, the labelled tokens). With
    class weights, the weighted cross-entropy averaged over the weights, as PyTorch's `weight=` mean."""

    loss_terms = ("loss",)
    per = {"loss": "n"}

    def __init__(self, per_token: bool, class_weights: torch.Tensor | None = None):
        self.per_token, self.class_weights = per_token, class_weights

    def counts(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if self.per_token:
            return {"n": (batch["labels"] != IGNORE).sum()}
        if self.class_weights is not None:
            return {"n": self.class_weights[batch["labels"]].sum()}
        return {"n": torch.tensor(batch["input_ids"].shape[0], device=batch["input_ids"].device)}

    def __call__(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = model(**batch)
        if self.class_weights is not None:  # summed: the step divides by counts()' total weight
            task_model = getattr(model, "module", model)  # under torchrun, the model inside DistributedDataParallel
            return {"loss": task_model.loss_of(out, labels=batch["labels"], class_weights=self.class_weights, reduction="sum")}
        return {"loss": out.loss * self.counts(batch)["n"]}


class OwnLoss:
    """The Learner of a family trained by its task model's own loss (`TaskObjective`) on the feature rows as they
    are: `MODEL_CLASSES[task.architecture]` with a new head for `labels`."""

    def __init__(self, task: Task, weights: list[float] | None = None):
        self.task, self.weights = task, weights

    def check(self, base: Path, train: Features) -> None:
        pass

    def model(self, base: Path, labels: list[str]) -> nn.Module:
        return MODEL_CLASSES[self.task.architecture].from_pretrained(base, id2label=dict(enumerate(labels)),
                                                                     **self.task.model_options)

    def load(self, folder: Path) -> nn.Module:
        return MODEL_CLASSES[self.task.architecture].from_pretrained(folder)

    def objective(self, device: torch.device) -> TaskObjective:
        return TaskObjective(self.task.per_token_loss, None if self.weights is None else torch.tensor(self.weights, device=device))

    def training_features(self, features: Features) -> Features:
        return features

    def save(self, model: Pretrained, folder: Path) -> None:
        model.save_pretrained(folder)

    def student(self, teacher: Pretrained, build: Callable[[Pretrained], Pretrained]) -> Pretrained:
        return build(teacher)

    def hard_loss(self, outputs: Any, batch: dict[str, torch.Tensor]) -> None:
        return None  # distillation computes the task model's own loss itself (class weights included)


def learner_of(task: Task, weights: list[float] | None = None) -> Learner:
    """How `task` trains: its family's own Learner, or its task model's own loss."""
    return task.learner() or OwnLoss(task, weights)


def class_weights(spec: str, features: Features) -> list[float]:
    """"auto": n / (classes x n_c) for each class c (scikit-learn's "balanced"); else the weights given, one a label."""
    labels = features.labels
    if spec == "auto":
        counts = np.bincount([row["labels"] for row in features.rows], minlength=len(labels))
        return [len(features) / (len(labels) * max(int(c), 1)) for c in counts]
    try:
        weights = [float(w) for w in spec.split(",")]
    except ValueError:
        raise BertkitError(f"--class-weights {spec!r}: expected auto or numbers, e.g. 1,3") from None
    if len(weights) != len(labels) or min(weights) <= 0:
        raise BertkitError(f"--class-weights {spec!r}: expected {len(labels)} positive numbers, one for each label "
                           f"in order: {', '.join(labels)}")
    return weights


# ---- model selection ---------------------------------------------------------------------------------

LOWER_IS_BETTER = frozenset({"mse"})


def is_better(metric: str, value: float, than: float | None) -> bool:
    """Whether `value` beats `than` on `metric` (higher is better, but for errors such as mse); ties do not."""
    if than is None or math.isnan(than):
        return not math.isnan(value)
    return value < than if metric in LOWER_IS_BETTER else value > than


def check_metric(task: Task, metric: str) -> None:
    """A metric the task reports, or a clear error naming the ones it does."""
    if metric.split("/")[0] not in task.metric_names:
        raise BertkitError(f"--metric {metric}: the {task.name} task reports {', '.join(task.metric_names)}")


@dataclass(frozen=True)
class Selection:
    """Which dev evaluation of a run is its best, by one metric, and when the run stops early: a pure
    function of the run's history, so a resumed run chooses and stops as the uninterrupted one."""

    metric: str
    patience: int = 0  # > 0: stop after this many evaluations without a better metric

    def evaluations(self, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [row for row in history if f"eval_{self.metric}" in row]

    def best(self, history: list[dict[str, Any]]) -> int | None:
        """The index (among the evaluations) of the best one; the first of equals."""
        best, value = None, None
        for i, row in enumerate(self.evaluations(history)):
            if is_better(self.metric, row[f"eval_{self.metric}"], value):
                best, value = i, row[f"eval_{self.metric}"]
        return best

    def stop(self, history: list[dict[str, Any]]) -> bool:
        best = self.best(history)
        return self.patience > 0 and best is not None and len(self.evaluations(history)) - 1 - best >= self.patience


# ---- one run, and the grid ---------------------------------------------------------------------------

@dataclass
class RunResult:
    batch_size: int
    lr: float
    epochs: int
    dev: dict[str, float]  # the scores of the checkpoint kept
    step: int  # the update after which it was evaluated
    epoch: float  # the same, in epochs
    seconds: float
    path: Path
    history: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "lr": self.lr, "epochs": self.epochs, "step": self.step,
                "epoch": self.epoch, "dev": self.dev, "seconds": round(self.seconds, 1)}


def finetune(cfg: FinetuneSettings, resume: bool = False) -> dict[str, Any]:
    """Fine-tunes (one run, or the grid) and gives a summary: every run's dev scores, the best, and
    its test scores when a test file is given. The best checkpoint of the best run is written to OUT/model."""
    ctx = distributed.setup(cfg.train.device)
    try:
        return _finetune(cfg, resume, ctx)
    finally:
        distributed.teardown()


def _finetune(cfg: FinetuneSettings, resume: bool, ctx: distributed.Context) -> dict[str, Any]:
    assert cfg.model is not None and cfg.out is not None and cfg.data.train is not None and cfg.data.dev is not None
    out = Path(cfg.out)
    base = resolve_model(cfg.model, cfg.revision)  # a folder, or a Hugging Face name's folder in the cache
    tok = Tokenizer.from_pretrained(base)
    task = get_task(cfg.task.name, **cfg.task.options())
    metric = cfg.train.metric or task.main_metric
    check_metric(task, metric)
    for bs in {p[0] for p in cfg.points()}:
        if bs < cfg.train.accumulation * ctx.world_size:
            raise BertkitError(f"batch size {bs} is smaller than --accumulation {cfg.train.accumulation} x "
                               f"{ctx.world_size} processes: each micro-batch needs an example")
    read_options = cfg.data.read_options()
    train_data = task.read(cfg.data.train, **read_options)
    dev_data = task.read(cfg.data.dev, **read_options)
    for d in (train_data, dev_data):
        log.warning("%s", d.report.summary())
    if len(train_data) == 0:
        raise BertkitError(f"{cfg.data.train}: no training examples ({train_data.report.summary()})")
    labels = task.labels(train_data)
    label2id = {label: i for i, label in enumerate(labels)}
    t0 = time.perf_counter()
    train_features = task.featurize(train_data, tok, label2id)
    dev_features = task.featurize(dev_data, tok, label2id)
    log.warning("featurized %d + %d rows in %.1f s", len(train_features), len(dev_features), time.perf_counter() - t0)
    learner_of(task).check(base, train_features)
    if ctx.is_main:
        out.mkdir(parents=True, exist_ok=True)
        settings.save(out, cfg)

    hidden, top_lr = BertConfig.load(base).hidden_size, max(p[1] for p in cfg.points())
    if hidden <= 256 and top_lr <= 5e-5:
        log.warning("a learning rate of %g is the paper's for BERT-Base; a model of hidden size %d usually wants more "
                    "(about 1e-3 for the tiny preset): docs/your-data.md", top_lr, hidden)
    weights = class_weights(cfg.train.class_weights, train_features) if cfg.train.class_weights else None
    if weights is not None:
        log.warning("class weights: %s", ", ".join(f"{label} {w:.3g}" for label, w in zip(labels, weights, strict=True)))
    points = cfg.points()
    results: list[RunResult] = []
    for bs, lr, epochs in points:
        run_dir = out / "runs" / f"bs{bs}-lr{lr:g}-ep{epochs}" if len(points) > 1 else out / "run"
        results.append(_one_run(cfg.at(bs, lr, epochs), base, task, metric, labels, train_features, dev_features, run_dir,
                                ctx, resume, weights))
        if ctx.is_main:
            _write_table(out, results, metric)

    best = results[0]
    for r in results[1:]:  # by the same metric as the checkpoints; the first of equals
        if is_better(metric, r.dev.get(metric, math.nan), best.dev.get(metric)):
            best = r
    summary: dict[str, Any] = {
        "task": cfg.task.name, "metric": metric, "labels": labels, "best": best.summary(),
        "runs": [r.summary() for r in results],
    }
    if ctx.is_main:
        final = out / "model"
        with staged_dir(final) as tmp:
            shutil.copytree(best.path / "model", tmp, dirs_exist_ok=True)
            tuned = _tune_on_dev(tmp, task, dev_features, cfg, ctx)
        if tuned is not None:
            summary["best"]["tuned"], summary["best"]["dev_tuned"] = tuned
        if cfg.data.test is not None:
            test_data = task.read(cfg.data.test, **read_options)
            log.warning("%s", test_data.report.summary())
            saved = get_task(task.name, **read_task_file(final)["task_options"])  # with what was tuned on dev
            model = learner_of(saved).load(final).to(ctx.device)
            summary["test"], _ = evaluate_task(model, saved, saved.featurize(test_data, tok, label2id), cfg.train.eval_batch_size,
                                               cfg.train.precision)
        atomic_write_text(out / "results.json", json.dumps(summary, indent=2) + "\n")
        write_model_card(final, read_task_file(final), summary,
                         {"train": str(cfg.data.train), "dev": str(cfg.data.dev), "test": cfg.data.test and str(cfg.data.test)})
    distributed.barrier()
    return summary


def _one_run(cfg: FinetuneSettings, base: Path, task: Task, metric: str, labels: list[str], train_features: Features,
             dev_features: Features, run_dir: Path, ctx: distributed.Context, resume: bool,
             weights: list[float] | None = None) -> RunResult:
    """One fine-tuning run; its best checkpoint by `metric` is kept in run_dir/model, written at each evaluation
    that beats the one before."""
    t, o = cfg.train, cfg.optim
    done = run_dir / "result.json"
    if resume and done.is_file():
        r = json.loads(done.read_text())
        return RunResult(t.batch_size, o.lr, t.epochs, r["dev"], r["step"], r["epoch"], r["seconds"], run_dir, r.get("history", []))
    if ctx.is_main and run_dir.exists() and not resume:
        shutil.rmtree(run_dir)
    distributed.barrier()
    set_seed(t.seed)
    learner = learner_of(task, weights)
    model = learner.model(base, labels)
    tok = Tokenizer.from_pretrained(base)
    state, seconds = fit(model, learner.objective(ctx.device), learner.training_features(train_features), dev_features,
                         task, metric, t, o, run_dir, ctx, resume,
                         lambda m, tmp, scores, chosen: save_finetuned(m, tok, tmp, task, labels, cfg, scores, chosen, learner))
    meta = read_task_file(run_dir / "model")
    dev, chosen = meta["dev"], meta["selected"]
    if ctx.is_main:
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # the run is done: its model is saved
        atomic_write_text(done, json.dumps({"dev": dev, "step": chosen["step"], "epoch": chosen["epoch"],
                                            "seconds": seconds, "history": state.history}) + "\n")
    log.warning("run bs=%d lr=%g epochs=%d: best %s %.2f after step %d (epoch %g); dev %s (%.0f s)", t.batch_size, o.lr,
                t.epochs, metric, dev[metric], chosen["step"], chosen["epoch"],
                ", ".join(f"{k} {v:.2f}" for k, v in dev.items()), seconds)
    return RunResult(t.batch_size, o.lr, t.epochs, dev, chosen["step"], chosen["epoch"], seconds, run_dir, state.history)


def fit(model: nn.Module, objective: Any, train_features: Features, dev_features: Features, task: Task, metric: str,
        t: FinetuneTrainSettings, o: OptimSettings, run_dir: Path, ctx: distributed.Context, resume: bool,
        save: Callable[[nn.Module, Path, dict[str, float], dict[str, Any]], None]) -> tuple[Any, float]:
    """Trains a task model on `train_features` with `objective` (fine-tuning's, or distillation's), evaluating on
    dev every epoch (or `t.eval_every` updates) and keeping the best checkpoint by `metric` in RUN/model, written by
    `save(model, folder, dev scores, which evaluation)`; gives the loop's final state and the seconds it took."""
    if t.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.to(ctx.device)
    batches = EpochBatches(train_features, lambda rows: to_tensors(train_features.collate(rows)),
                           t.batch_size, t.seed, accumulation=t.accumulation, rank=ctx.rank, world_size=ctx.world_size)
    steps = batches.per_epoch * t.epochs
    optimizer = build_optimizer(model, o.name, o.lr, tuple(o.betas), o.eps, o.weight_decay)
    scheduler = linear_schedule(optimizer, warmup_steps_for(steps, o.warmup), steps)
    eval_every = min(t.eval_every, steps) if t.eval_every else batches.per_epoch
    loop = LoopConfig(steps=steps, max_grad_norm=o.max_grad_norm, precision=t.precision,
                      log_every=max(1, min(50, batches.per_epoch // 4)), eval_every=eval_every,
                      checkpoint_every=eval_every, keep_checkpoints=1, num_workers=0, seed=t.seed,
                      progress=t.progress)
    selection = Selection(metric, t.early_stopping)
    kept = recover_dir(run_dir / "model")

    def evaluate(m: nn.Module, step: int) -> dict[str, float]:
        scores, _ = evaluate_task(model, task, dev_features, t.eval_batch_size, t.precision)
        if metric not in scores:
            raise BertkitError(f"--metric {metric}: the {task.name} task reported {', '.join(scores)}")
        before = read_task_file(kept)["dev"].get(metric) if (kept / TASK_FILE).is_file() else None
        if is_better(metric, scores[metric], before):
            chosen = {"metric": metric, "step": step, "epoch": round(step / batches.per_epoch, 2)}
            with staged_dir(kept) as tmp:
                save(model, tmp, scores, chosen)
        return scores

    t0 = time.perf_counter()
    state = train(model, objective, batches, optimizer, scheduler, loop, run_dir, ctx,
                  evaluate=evaluate, resume=resume, stop_when=selection.stop,
                  run_config={"batch_size": t.batch_size, "lr": o.lr, "epochs": t.epochs, "seed": t.seed})
    seconds = time.perf_counter() - t0
    distributed.barrier()  # the main process has written the kept checkpoint
    return state, seconds


def _tune_on_dev(model_dir: Path, task: Task, dev: Features, cfg: FinetuneSettings,
                 ctx: distributed.Context) -> tuple[dict[str, Any], dict[str, float]] | None:
    """Decoding settings the task tunes on dev for the kept model (multi-label thresholds; SQuAD 2.0's null-score
    threshold), written into its task options; gives them and the dev scores with them (optimistic: tuned on dev)."""
    @functools.cache
    def outputs() -> Any:  # the kept model's dev logits, computed only when the task tunes something, and once
        model = learner_of(task).load(model_dir).to(ctx.device)
        return infer(model, task, dev, cfg.train.eval_batch_size, cfg.train.precision)

    found = task.tuned_options(dev, outputs)
    if not found:
        return None
    meta = read_task_file(model_dir)
    meta["task_options"] |= found
    tuned = get_task(task.name, **meta["task_options"])
    scores = tuned.score(dev.data, tuned.decode(dev, outputs()))
    meta["dev_tuned"] = scores
    atomic_write_text(model_dir / TASK_FILE, json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    log.warning("tuned on dev: %s; dev %s", json.dumps(found), ", ".join(f"{k} {v:.2f}" for k, v in scores.items()))
    return found, scores


def save_finetuned(model: Pretrained, tok: Tokenizer, directory: Path, task: Task, labels: list[str],
                   cfg: FinetuneSettings, dev: dict[str, float], selected: dict[str, Any] | None = None,
                   learner: Learner | None = None) -> None:
    """Writes model + tokenizer in Hugging Face's layout (and the files its family adds, `Learner.save`) and TASK_FILE
    with what `predict` needs."""
    (learner or learner_of(task)).save(model, directory)
    tok.save_pretrained(directory)
    meta = {
        "task": task.name,
        "labels": labels,
        "task_options": cfg.task.options(),
        # how user text must be read to look like the training data (NER trained on NFKC text, say)
        "input_options": {"normalize": cfg.data.normalize} if cfg.data.normalize else {},
        "settings": {"batch_size": cfg.train.batch_size, "lr": cfg.optim.lr, "epochs": cfg.train.epochs,
                     "seed": cfg.train.seed, "warmup": cfg.optim.warmup, "weight_decay": cfg.optim.weight_decay,
                     "base_model": str(cfg.model), **({"revision": cfg.revision} if cfg.revision else {})},
        "dev": dev,
        **({"selected": selected} if selected else {}),  # which evaluation of the run this checkpoint is
    }
    atomic_write_text(directory / TASK_FILE, json.dumps(meta, indent=2, ensure_ascii=False) + "\n")


def _write_table(out: Path, results: list[RunResult], metric: str) -> None:
    """OUT/grid.md: each run's kept checkpoint (its step and dev scores), the metric that chose it first."""
    metrics = [metric, *sorted({k for r in results for k in r.dev} - {metric})]
    lines = ["| batch | lr | epochs | kept step | " + " | ".join(metrics) + " | seconds |",
             "|---|---|---|---|" + "---|" * len(metrics) + "---|"]
    for r in results:
        lines.append(f"| {r.batch_size} | {r.lr:g} | {r.epochs} | {r.step} | "
                     + " | ".join(f"{r.dev.get(m, float('nan')):.2f}" for m in metrics) + f" | {r.seconds:.0f} |")
    atomic_write_text(out / "grid.md", "\n".join(lines) + "\n")
