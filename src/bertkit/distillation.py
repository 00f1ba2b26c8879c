"""`bertkit distill`: a small student that keeps a fine-tuned teacher's accuracy at a fraction of its cost.

    bertkit distill --teacher runs/sst2/model --student layers:0,2,4 --train train.tsv --dev dev.tsv --out runs/sst2-3l

The teacher's folder gives the task, its labels and options, the tokenizer and the input options; the data
files are read as `bertkit finetune` reads them. The student (bertkit.students) learns from:
- the soft targets: the teacher's distribution at a temperature T (KL, times T^2; per span position for QA,
  per token for NER; a CRF student matches the teacher's emission scores), weight `--soft-weight`;
- the labels, as fine-tuning does (a CRF's transitions learn from them), weight `--hard-weight`;
- hidden states through a layer map, and attention scores as TinyBERT's (`--hidden-weight`,
  `--attention-weight`), when asked.
An embedder's student learns the teacher's vectors (mean squared error; its pairs' own loss takes whole groups,
so `--hard-weight` does not apply), a reranker's the teacher's logits and its pairs' labels (binary cross-entropy).
`--unlabeled FILE ...` adds in-domain text the teacher labels: soft targets only. When only the outputs are
distilled, the teacher runs once over the training rows and its outputs are kept memory-mapped in
OUT/run/teacher (an epoch then costs the student's forward and backward alone); with hidden or attention
losses it runs beside the student. Runs evaluate on dev, keep the best checkpoint and resume as fine-tuning's
(bertkit.finetune.fit). OUT/model is an ordinary fine-tuned model folder; `--compare-alone` also fine-tunes
the same student without the teacher, for the results.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .config import IGNORE
from .distributed import Context, barrier, setup, teardown
from .errors import BertkitError
from .fileio import atomic_write_text, staged_dir
from .finetune import check_metric, class_weights, fit, learner_of
from .finetune_settings import FinetuneDataSettings, FinetuneTrainSettings, check_class_weights
from .folders import TASK_FILE, read_task_file
from .hub import resolve_model
from .modelcard import write_model_card
from .optim import OptimSettings
from .predict import evaluate_task, infer
from .settings import Settings, check, non_negative, option, positive
from .settings import save as save_settings
from .students import Probe, attention_mse, build_student, hidden_mse, layer_map, projections, soft_loss
from .tasks import Features, Learner, Task, get_task
from .tokenizer import Tokenizer
from .train import set_seed

log = logging.getLogger("bertkit")


# ---- settings ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LossSettings(Settings):
    """What the student learns from, each with its weight (any may be 0)."""

    soft: float = option(1.0, "weight of the soft targets: KL to the teacher's distribution at --temperature, x T^2",
                         flag="--soft-weight", check=non_negative)
    hard: float = option(1.0, "weight of the labels' own loss (as fine-tuning's)", flag="--hard-weight",
                         check=non_negative)
    hidden: float = option(0.0, "weight of the hidden-state MSE through the layer map", flag="--hidden-weight",
                           check=non_negative)
    attention: float = option(0.0, "weight of the attention-score MSE (TinyBERT's)", flag="--attention-weight",
                              check=non_negative)
    temperature: float = option(4.0, "the soft targets' temperature", check=positive)
    layer_map: str | None = option(None, "student layer:teacher layer pairs, e.g. 0:1,1:3,2:5", metavar="MAP",
                                   shows="uniform: student layer i from teacher layer (i+1)k-1")


@dataclass(frozen=True)
class DistillSettings(Settings):
    """Everything `bertkit distill` does, typed: from `--config`, the options, then `key=value` overrides."""

    teacher: Path | None = option(None, "the fine-tuned teacher: a folder from `bertkit finetune`, or a Hugging Face "
                                        "name", metavar="DIR|NAME")
    revision: str | None = option(None, "with a Hugging Face teacher name: the branch, tag or commit to use")
    student: str | None = option(None, "layers:0,2,4 (the teacher's embeddings and those layers) or a preset "
                                       "(tiny, mini, small, ...) trained from scratch", metavar="SPEC")
    student_init: Path | None = option(None, "start the student from this pre-trained model (the teacher's "
                                             "vocabulary), with a preset --student's shape ignored", metavar="DIR")
    out: Path | None = option(None, "output folder (OUT/model, OUT/results.json)")
    unlabeled: tuple[Path, ...] = option((), "in-domain text the teacher labels softly: text lines (pair: two "
                                             "texts, tab-separated) or files in the task's own format",
                                         nargs="+", metavar="FILE", shows="none")
    compare_alone: bool = option(False, "also fine-tune the same student without the teacher, for results.json")
    loss: LossSettings = field(default_factory=LossSettings)
    data: FinetuneDataSettings = field(default_factory=FinetuneDataSettings)
    optim: OptimSettings = field(default_factory=lambda: OptimSettings(lr=5e-5, warmup=0.1))
    train: FinetuneTrainSettings = field(default_factory=FinetuneTrainSettings)

    def __post_init__(self) -> None:
        super().__post_init__()
        for value, flag in ((self.teacher, "--teacher DIR"), (self.student, "--student SPEC"), (self.out, "--out DIR"),
                            (self.data.train, "--train FILE"), (self.data.dev, "--dev FILE")):
            check(value is not None, f"no {flag.split()[0][2:]}: give {flag}")
        check(self.optim.name == "adamw", f"distillation uses adamw, got optim.name={self.optim.name!r}")
        check(self.loss.soft + self.loss.hard + self.loss.hidden + self.loss.attention > 0,
                       "every loss weight is 0: the student would learn nothing")


# ---- the teacher's outputs, once -------------------------------------------------------------------------------

class TeacherOutputs:
    """The teacher's outputs for every training row, computed once and kept memory-mapped in a folder; a run that
    resumes (or a later epoch) reads them back. Per-token outputs are stored padded to the longest row.

    Under torchrun only rank 0 (`is_main`) runs the teacher and writes; the other processes wait for it, then read.
    """

    def __init__(self, folder: Path, teacher: nn.Module, task: Task, features: Features, batch_size: int,
                 precision: str, key: str, progress: bool = False, is_main: bool = True):
        stamp = folder / "key.json"
        if is_main and not (stamp.is_file() and json.loads(stamp.read_text())["key"] == key):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            outputs = infer(teacher, task, features, batch_size, precision, progress=progress)
            for name, array in outputs.items():
                np.save(folder / f"{name}.npy", array.astype(np.float32))
            atomic_write_text(stamp, json.dumps({"key": key, "rows": len(features)}) + "\n")  # last: the cache is whole
        barrier()
        self.arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in task.outputs}
        self.per_token = task.per_token  # (rows, T, ...) padded to the longest row, else (rows, ...)

    def rows(self, rows: torch.Tensor, length: int, device: torch.device) -> dict[str, torch.Tensor]:
        """The outputs of these rows, per-token ones cut to the batch's length."""
        idx = rows.cpu().numpy()
        return {name: torch.from_numpy(np.asarray(a[idx, :length] if self.per_token else a[idx])).to(device)
                for name, a in self.arrays.items()}


# ---- what a step optimizes --------------------------------------------------------------------------------------

class DistillObjective:
    """The weighted sum of the soft-target, label, hidden-state and attention losses, averaged over the batch's
    rows (the labels' loss over its labelled rows); each logged on its own."""

    loss_terms = ("loss",)
    per = {"loss": "n", "soft": "n", "hard": "n", "hidden": "n", "attention": "n"}

    def __init__(self, student: nn.Module, teacher: nn.Module, cache: TeacherOutputs | None, task: Task,
                 losses: LossSettings, weights: torch.Tensor | None, learner: Learner | None = None):
        self.student, self.teacher, self.cache, self.losses = student, teacher, cache, losses
        self.learner = learner  # a family's own labels' loss (`Learner.hard_loss`); None: the task model's
        self.outputs, self.kind, self.per_token = task.outputs, task.soft_targets, task.per_token
        self.weights = weights
        self.map = layer_map(student.config.num_hidden_layers, teacher.config.num_hidden_layers, losses.layer_map)
        inner = losses.hidden > 0 or losses.attention > 0
        self.probes = (Probe(student, list(self.map), losses.hidden > 0, losses.attention > 0),
                       Probe(teacher, list(self.map.values()), losses.hidden > 0, losses.attention > 0)) if inner else None

    def counts(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"n": torch.tensor(batch["input_ids"].shape[0], device=batch["input_ids"].device)}

    def __call__(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        batch = dict(batch)
        rows, labeled = batch.pop("row"), batch.pop("labeled").bool()
        inputs = {k: batch.pop(k) for k in ("input_ids", "attention_mask", "token_type_ids")}
        ours = model(**inputs)
        if self.cache is not None:
            theirs = self.cache.rows(rows, inputs["input_ids"].shape[1], inputs["input_ids"].device)
        else:
            with torch.no_grad():
                out = self.teacher(**inputs)
            theirs = {name: getattr(out, name) for name in self.outputs}
        mask = inputs["attention_mask"].bool()
        terms = {"soft": torch.stack([self._soft(getattr(ours, n), theirs[n], mask) for n in self.outputs]).mean()}
        hard = self._hard(ours, batch, labeled) if labeled.any() else None
        terms["hard"] = terms["soft"] * 0.0 if hard is None else hard
        if self.probes is not None:
            s, t = self.probes
            proj = getattr(self.student, "distill_projections", None)
            if self.losses.hidden > 0:
                terms["hidden"] = torch.stack([hidden_mse(s.hidden[i], t.hidden[j], None if proj is None else proj[str(i)])
                                               for i, j in self.map.items()]).mean()
            if self.losses.attention > 0:
                terms["attention"] = torch.stack([attention_mse(s.scores[i], t.scores[j], inputs["attention_mask"])
                                                  for i, j in self.map.items()]).mean()
        w = dataclasses.asdict(self.losses)
        n = inputs["input_ids"].shape[0]
        loss = sum(w[name] * value for name, value in terms.items())
        return {"loss": loss * n, **{name: value.detach() * n for name, value in terms.items()}}

    def _soft(self, student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return soft_loss(student, teacher, self.losses.temperature, self.kind, mask if self.per_token else None)

    def _hard(self, ours: Any, labels: dict[str, torch.Tensor], labeled: torch.Tensor) -> torch.Tensor | None:
        """The labels' loss on the labelled rows, as the task model computes it (class weights as fine-tuning's), or
        as the family's Learner does; None where the family's loss takes whole groups, not rows."""
        sub = dataclasses.replace(ours, **{f.name: getattr(ours, f.name)[labeled] for f in dataclasses.fields(ours)
                                           if isinstance(getattr(ours, f.name), torch.Tensor)})
        targets = {k: v[labeled] for k, v in labels.items()}
        if self.learner is not None:
            return self.learner.hard_loss(sub, targets)
        weighted = {} if self.weights is None else {"class_weights": self.weights}
        return self.student.loss_of(sub, **targets, **weighted)


# ---- the rows --------------------------------------------------------------------------------------------------

def distill_rows(task: Task, labeled: Features, extra: list[Features]) -> Features:
    """The training rows: the labelled ones, then the unlabeled ones with stand-in labels (never read: `labeled`
    is 0 there); each with its index ("row") into the teacher's outputs."""
    template = labeled.rows[0]
    label_keys = [k for k in template if k not in ("input_ids", "token_type_ids")]
    rows = [{**r, "row": i, "labeled": 1} for i, r in enumerate(labeled.rows)]
    for features in extra:
        for r in features.rows:
            stand_in = {k: _stand_in(template[k], len(r["input_ids"])) for k in label_keys}
            rows.append({**r, **stand_in, "row": len(rows), "labeled": 0})
    index = np.concatenate([labeled.example_index, *[f.example_index + 10**9 for f in extra]]) if extra else labeled.example_index
    return Features(rows, labeled.data, index, labeled.labels, labeled.pad_token_id)


def _stand_in(value: Any, length: int) -> Any:
    if isinstance(value, list):
        return [IGNORE] * length
    if isinstance(value, np.ndarray):
        return np.zeros_like(value)
    return 0.0 if isinstance(value, float) else 0


def read_unlabeled(task: Task, paths: tuple[Path, ...], read_options: dict[str, Any]) -> list[Any]:
    """The datasets of the unlabeled files: text lines (.txt; a pair's two texts tab-separated), else the task's
    own format (its labels, if any, unused)."""
    out = []
    for path in paths:
        if path.suffix.lower() == ".txt":
            lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            if not lines:
                raise BertkitError(f"{path}: no text")
            if task.second is not None:
                split = [line.split("\t", 1) for line in lines]
                bad = next((i for i, s in enumerate(split) if len(s) != 2), None)
                if bad is not None:
                    raise BertkitError(f"{path} line {bad + 1}: expected two texts separated by a tab ({task.name} task)")
                out.append(task.inputs_from_texts([s[0] for s in split], [s[1] for s in split]))
            else:
                out.append(task.inputs_from_texts(lines, **({"normalize": read_options["normalize"]}
                                                            if "normalize" in read_options else {})))
        else:
            out.append(task.read(path, **read_options))
    return out


# ---- the run ---------------------------------------------------------------------------------------------------

def distill(cfg: DistillSettings, resume: bool = False) -> dict[str, Any]:
    """Distills the teacher into the student; gives the summary written to OUT/results.json (teacher, student and,
    with compare_alone, the student fine-tuned alone: dev and test scores)."""
    ctx = setup(cfg.train.device)
    try:
        return _distill(cfg, resume, ctx)
    finally:
        teardown()


def _distill(cfg: DistillSettings, resume: bool, ctx: Context) -> dict[str, Any]:
    assert cfg.teacher is not None and cfg.out is not None and cfg.student is not None
    out = Path(cfg.out)
    teacher_dir = resolve_model(cfg.teacher, cfg.revision)
    if not (teacher_dir / TASK_FILE).is_file():
        raise BertkitError(f"{teacher_dir}: no {TASK_FILE}: a teacher is a fine-tuned model (from `bertkit finetune`)")
    meta = read_task_file(teacher_dir)
    task = get_task(meta["task"], **meta.get("task_options", {}))
    if cfg.train.class_weights:
        check_class_weights(task)
    labels = list(meta["labels"])
    label2id = {label: i for i, label in enumerate(labels)}
    tok = Tokenizer.from_pretrained(teacher_dir)
    learner = learner_of(task)
    teacher = learner.load(teacher_dir).to(ctx.device).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    set_seed(cfg.train.seed)
    student = learner.student(teacher, lambda model: build_student(model, cfg.student, cfg.student_init))
    metric = cfg.train.metric or task.main_metric
    check_metric(task, metric)
    read_options = {**meta.get("input_options", {}), **cfg.data.read_options()}
    train_data, dev_data = task.read(cfg.data.train, **read_options), task.read(cfg.data.dev, **read_options)
    train_features = task.featurize(train_data, tok, label2id)  # a label the teacher does not know: an error
    dev_features = task.featurize(dev_data, tok, label2id)
    extra = [task.featurize(d, tok, label2id) for d in read_unlabeled(task, tuple(cfg.unlabeled), read_options)]
    rows = distill_rows(task, train_features, extra)
    log.warning("%s; %d unlabeled rows", train_data.report.summary(), len(rows) - len(train_features))
    if ctx.is_main:
        out.mkdir(parents=True, exist_ok=True)
        save_settings(out, cfg)
    weights = class_weights(cfg.train.class_weights, train_features) if cfg.train.class_weights else None
    weight_tensor = None if weights is None else torch.tensor(weights, device=ctx.device)

    live = cfg.loss.hidden > 0 or cfg.loss.attention > 0
    cache = None if live else TeacherOutputs(out / "run" / "teacher", teacher, task, rows, cfg.train.eval_batch_size,
                                             cfg.train.precision, _cache_key(teacher_dir, rows), cfg.train.progress,
                                             ctx.is_main)
    if cfg.loss.hidden > 0:
        lmap = layer_map(student.config.num_hidden_layers, teacher.config.num_hidden_layers, cfg.loss.layer_map)
        proj = projections(student, teacher, lmap)
        if proj is not None:
            student.distill_projections = proj  # trained and checkpointed with the student; not saved in OUT/model
    objective = DistillObjective(student, teacher, cache, task, cfg.loss, weight_tensor, task.learner())
    recipe = {"teacher": str(cfg.teacher), "student": cfg.student, "student_init": cfg.student_init and str(cfg.student_init),
              "losses": dataclasses.asdict(cfg.loss), "unlabeled": [str(p) for p in cfg.unlabeled],
              "unlabeled_rows": len(rows) - len(train_features)}

    def save(model: nn.Module, folder: Path, scores: dict[str, float], chosen: dict[str, Any]) -> None:
        save_student(model, tok, folder, meta, cfg, scores, chosen, recipe, learner)

    state, seconds = fit(student, objective, rows, dev_features, task, metric, cfg.train, cfg.optim, out / "run", ctx,
                         resume, save)
    summary: dict[str, Any] = {"task": task.name, "metric": metric, "teacher": str(cfg.teacher), "recipe": recipe}
    if ctx.is_main:
        final = out / "model"
        with staged_dir(final) as tmp:
            shutil.copytree(out / "run" / "model", tmp, dirs_exist_ok=True)
        shutil.rmtree(out / "run" / "checkpoints", ignore_errors=True)
        test = task.read(cfg.data.test, **read_options) if cfg.data.test else None
        test_features = task.featurize(test, tok, label2id) if test is not None else None
        kept, distilled = read_task_file(final), learner.load(final).to(ctx.device)
        summary["student"] = _scores(distilled, task, dev_features, test_features, cfg)
        summary["student"] |= {"step": kept["selected"]["step"], "seconds": round(seconds, 1),
                               "parameters": sum(p.numel() for p in distilled.parameters())}
        summary["teacher_scores"] = _scores(teacher, task, dev_features, test_features, cfg)
        summary["teacher_scores"]["parameters"] = sum(p.numel() for p in teacher.parameters())
        if cfg.compare_alone:
            summary["alone"] = _alone(cfg, teacher, task, metric, train_features, dev_features, test_features, tok,
                                      meta, resume, ctx)
        atomic_write_text(out / "results.json", json.dumps(summary, indent=2) + "\n")
        write_model_card(final, read_task_file(final), {"best": {**kept["selected"], "dev": kept["dev"], "batch_size":
                         cfg.train.batch_size, "lr": cfg.optim.lr, "epochs": cfg.train.epochs},
                         "metric": metric, **({"test": summary["student"]["test"]} if test is not None else {})},
                         {"train": str(cfg.data.train), "dev": str(cfg.data.dev), "test": cfg.data.test and str(cfg.data.test)})
    barrier()
    del state
    return summary


def _cache_key(teacher_dir: Path, rows: Features) -> str:
    """What the teacher's outputs depend on: its weights and every row's tokens."""
    digest = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "pytorch_model.bin"):
        path = teacher_dir / name
        if path.is_file():
            stat = path.stat()
            digest.update(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    for r in rows.rows:
        digest.update(np.asarray(r["input_ids"], dtype=np.int32).tobytes() + np.asarray(r["token_type_ids"], dtype=np.int8).tobytes())
    return digest.hexdigest()


def _scores(model: nn.Module, task: Task, dev: Features, test: Features | None, cfg: DistillSettings) -> dict[str, Any]:
    model.eval()
    dev_scores, _ = evaluate_task(model, task, dev, cfg.train.eval_batch_size, cfg.train.precision)
    found: dict[str, Any] = {"dev": dev_scores}
    if test is not None:
        found["test"], _ = evaluate_task(model, task, test, cfg.train.eval_batch_size, cfg.train.precision)
    return found


def _alone(cfg: DistillSettings, teacher: nn.Module, task: Task, metric: str, train: Features, dev: Features,
           test: Features | None, tok: Tokenizer, meta: dict[str, Any], resume: bool, ctx: Context) -> dict[str, Any]:
    """The same student, from the same start, fine-tuned on the labels alone with the same settings."""
    assert cfg.out is not None and cfg.student is not None
    set_seed(cfg.train.seed)
    weights = class_weights(cfg.train.class_weights, train) if cfg.train.class_weights else None
    learner = learner_of(task, weights)
    student = learner.student(teacher, lambda model: build_student(model, cfg.student, cfg.student_init))
    run = Path(cfg.out) / "alone"
    fit(student, learner.objective(ctx.device), learner.training_features(train), dev, task, metric, cfg.train,
        cfg.optim, run, ctx, resume,
        lambda m, folder, scores, chosen: save_student(m, tok, folder, meta, cfg, scores, chosen, {"alone": True}, learner))
    shutil.rmtree(run / "checkpoints", ignore_errors=True)
    return _scores(learner.load(run / "model").to(ctx.device), task, dev, test, cfg)


def save_student(model: nn.Module, tok: Tokenizer, folder: Path, teacher_meta: dict[str, Any], cfg: DistillSettings,
                 dev: dict[str, float], selected: dict[str, Any], recipe: dict[str, Any],
                 learner: Learner | None = None) -> None:
    """Writes the student as a fine-tuned model folder: the teacher's task, labels and options, and how it was made;
    the projections the hidden-state loss trained are left out."""
    projections_ = model._modules.pop("distill_projections", None)
    try:
        if learner is not None:
            learner.save(model, folder)  # with the family's files (an embedder's pooling)
        else:
            model.save_pretrained(folder)
    finally:
        if projections_ is not None:
            model.distill_projections = projections_
    tok.save_pretrained(folder)
    meta = {
        "task": teacher_meta["task"], "labels": teacher_meta["labels"], "task_options": teacher_meta.get("task_options", {}),
        "input_options": teacher_meta.get("input_options", {}),
        "settings": {"batch_size": cfg.train.batch_size, "lr": cfg.optim.lr, "epochs": cfg.train.epochs,
                     "seed": cfg.train.seed, "warmup": cfg.optim.warmup, "weight_decay": cfg.optim.weight_decay,
                     "base_model": str(cfg.student_init or cfg.teacher)},
        "distilled": recipe, "dev": dev, "selected": selected,
    }
    atomic_write_text(folder / TASK_FILE, json.dumps(meta, indent=2, ensure_ascii=False) + "\n")

