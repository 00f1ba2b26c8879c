"""`bertkit finetune`'s settings, each declared once with its flag (bertkit.settings.option): the task family and its
options, the files and how to read them, the training run, the paper's grid; checked as they are built.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import BertkitError
from .optim import OptimSettings
from .settings import DEVICES, PRECISIONS, Settings, between, check, non_negative, one_of, option, positive
from .tasks import TASKS, Task, check_options, get_task


@dataclass(frozen=True)
class TaskSettings(Settings):
    """Which task family, and its options: each applies to the families that declare it (bertkit.tasks)."""

    name: str = option("classify", "the task family", flag="--task", check=one_of(*TASKS))
    max_seq_length: int | None = option(None, "tokens a sequence, at most", check=between(8, 512, closed=True),
                                        shows="128; 384 for qa")
    regression: bool = option(False, "classify/pair: predict a score (labels are numbers)")
    multi_label: bool = option(False, "classify/pair: any number of labels an example (a JSON list in JSON lines, or "
                                      "joined by --label-sep in a TSV/CSV cell); a sigmoid each, binary cross-entropy")
    threshold: float | None = option(None, "multi-label: predict a label from this probability", shows="0.5",
                                     check=between(0, 1))
    tune_thresholds: bool = option(False, "multi-label: tune each label's threshold on dev (its best F1) and save "
                                          "them with the model")
    long: str | None = option(None, "classify: a text longer than --max-seq-length is truncated, or read in sliding "
                                    "windows whose logits are averaged (max-pooled for --multi-label)",
                              check=one_of("truncate", "sliding"), shows="truncate")
    stride: int | None = option(None, "--long sliding: tokens between window starts", shows="half a window")
    scheme: str | None = option(None, "ner: tagging scheme to learn", check=one_of("BIO", "BIOES"), shows="the file's")
    crf: bool = option(False, "ner: a CRF layer over the tags (Viterbi decoding)")
    constrained: bool = option(False, "ner without --crf: decode the most probable tag sequence the scheme allows "
                                      "(well-formed BIO/BIOES), not each word's most probable tag alone")
    doc_stride: int | None = option(None, "qa: tokens between passage windows", shows="128")
    null_threshold: float | None = option(None, "qa with unanswerable questions (SQuAD 2.0): answer nothing when the "
                                                "null score beats the best span by more than this",
                                          shows="the threshold with the best dev F1, searched after training")
    loss: str | None = option(None, "embed: mnrl (in-batch negatives, and the file's) or cosent (scored pairs); rerank: "
                                    "bce (a pair at a time) or listwise (a softmax over each query's group)",
                              check=one_of("mnrl", "cosent", "bce", "listwise"), shows="mnrl; bce")
    symmetric: bool = option(False, "embed --loss mnrl: also each positive against every anchor")
    scale: float | None = option(None, "embed: the cosines' scale in the loss (a softmax temperature of 1/SCALE)",
                                 shows="20")
    pooling: str | None = option(None, "embed: a text's vector from the last layer: the mean of its tokens, [CLS], or "
                                       "the pooler's output", check=one_of("mean", "cls", "pooler"), shows="mean")
    normalize_vectors: bool = False  # embed: `--normalize` alone (bertkit.finetune_settings.FinetuneSettings)
    gradient_cache: int | None = option(None, "embed --loss mnrl: encode a batch N texts at a time (GradCache): the "
                                              "loss and gradients of the whole batch in the memory of N",
                                        metavar="N", check=positive)
    matryoshka: tuple[int, ...] | None = option(None, "embed: also train each leading slice of the vectors, e.g. "
                                                      "384,256,128,64, so that a truncated vector keeps its quality",
                                                metavar="DIMS", parse=lambda s: tuple(int(d) for d in s.split(",")))

    def __post_init__(self) -> None:
        super().__post_init__()
        options = self.options()
        check_options(self.name, [k for k in options if k != "max_seq_length"])
        get_task(self.name, **options)  # what the family checks across its options

    def options(self) -> dict[str, Any]:
        """The keyword arguments of `get_task`, as the task file keeps them: only what differs from the defaults."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "name" and v is not None and v is not False}


def parse_columns(spec: str) -> dict[str, str | int]:
    """--columns "text=0,label=1" or "text=review,label=label": where each field is, by index or header name."""
    cols: dict[str, str | int] = {}
    for item in spec.split(","):
        name, sep, col = item.partition("=")
        if not sep:
            raise BertkitError(f"--columns {spec!r}: expected name=column pairs, e.g. text=0,label=1")
        cols[name.strip()] = int(col) if col.strip().lstrip("-").isdigit() else col.strip()
    return cols


@dataclass(frozen=True)
class FinetuneDataSettings(Settings):
    """The labelled files, and how to read the user's own (see docs/your-data.md)."""

    train: Path | None = option(None, "training file")
    dev: Path | None = option(None, "dev file: scored after every epoch (or --eval-every)")
    test: Path | None = option(None, "test file: the best model is scored on it at the end")
    format: str | None = option(None, "classify/pair: file format", check=one_of("tsv", "csv", "jsonl"),
                                shows="by extension")
    columns: dict[str, str | int] | None = option(None, "classify/pair: where fields are, e.g. text=0,pair=1,label=2 "
                                                        "or text=review,label=label", parse=parse_columns)
    header: bool | None = option(None, "classify/pair: the table has no header row", flag="--no-header", const=False)
    normalize: str | None = option(None, "ner: normalize words (NFKC: e.g. full-width digits), also at predict; embed, "
                                         "without a value: the saved model's vectors have length 1",
                                   check=one_of("NFKC", "vectors"), nargs="?", parse=lambda s: s or "vectors",
                                   metavar="NFKC")
    skip_bad_rows: bool = option(False, "skip and count malformed rows instead of stopping")
    label_sep: str | None = option(None, "multi-label TSV/CSV: what joins the labels in a cell", shows="','")

    def read_options(self) -> dict[str, Any]:
        """The keyword arguments of the task's reader."""
        opts: dict[str, Any] = {"format": self.format, "columns": self.columns, "header": self.header,
                                "normalize": self.normalize, "bad_rows": "skip" if self.skip_bad_rows else None,
                                "label_sep": self.label_sep}
        return {k: v for k, v in opts.items() if v is not None}


@dataclass(frozen=True)
class FinetuneTrainSettings(Settings):
    epochs: int = option(3, "passes over the training data", check=positive)
    batch_size: int = option(32, "examples an update, over all processes and micro-batches", check=positive)
    accumulation: int = option(1, "split each batch into this many micro-batches run one after another: the same "
                                  "updates in less memory", check=positive)
    gradient_checkpointing: bool = option(False, "recompute activations in the backward pass: less memory, about a "
                                                 "third more time")
    eval_batch_size: int = option(64, check=positive)
    eval_every: int = option(0, "evaluate on dev every STEPS updates too", metavar="STEPS", check=non_negative,
                             shows="every epoch only")
    metric: str | None = option(None, "the dev score that keeps the best checkpoint and picks the grid run, e.g. f1 or "
                                      "mcc", shows="accuracy; f1 for ner and qa; pearson for regression")
    early_stopping: int = option(0, "stop a run after PATIENCE evaluations without a better --metric",
                                 metavar="PATIENCE", check=non_negative, shows="never")
    class_weights: str | None = option(None, "classify/pair: weight the loss by class, 'auto' (balanced) or one weight "
                                             "a label in label order", metavar="auto|W1,W2,...")
    seed: int = option(42, "random seed")
    precision: str = option("fp32", "bf16: autocast; fp16: with loss scaling (CUDA)", check=PRECISIONS)
    device: str = option("auto", "auto: a GPU when there is one", check=DEVICES)
    progress: bool = True


def parse_grid(spec: str) -> dict[str, list]:
    """--grid with no value: the paper's grid; "batch_size=16,32;lr=5e-5,3e-5;epochs=2,3" a subset."""
    grid: dict[str, list] = {}
    for part in filter(None, spec.split(";")):
        key, sep, values = part.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in ("batch_size", "lr", "epochs"):
            raise BertkitError(f"--grid {spec!r}: expected batch_size=..;lr=..;epochs=.. (any of them)")
        kind = float if key == "lr" else int
        try:
            grid[key] = [kind(v) for v in values.split(",")]
        except ValueError:
            raise BertkitError(f"--grid {spec!r}: {key} values must be numbers") from None
    return grid


@dataclass(frozen=True)
class GridSettings(Settings):
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
class FinetuneSettings(Settings):
    """Everything `bertkit finetune` does, typed: from a TOML/JSON file (`--config`), the command's options,
    then `section.key=value` overrides, as pre-training's settings."""

    model: Path | None = option(None, "pre-trained model: a folder (bertkit's or Hugging Face's layout) or a Hugging "
                                      "Face name such as bert-base-chinese", metavar="DIR|NAME")
    revision: str | None = option(None, "with a Hugging Face model name: the branch, tag or commit to use")
    out: Path | None = option(None, "output folder (OUT/model, OUT/results.json)")
    task: TaskSettings = field(default_factory=TaskSettings)
    data: FinetuneDataSettings = field(default_factory=FinetuneDataSettings)
    optim: OptimSettings = field(default_factory=lambda: OptimSettings(lr=2e-5, warmup=0.1))  # the paper's
    train: FinetuneTrainSettings = field(default_factory=FinetuneTrainSettings)
    # None: one run with train.batch_size, optim.lr and train.epochs
    grid: GridSettings | None = option(None, "the paper's grid (batch 16/32 x lr 5e-5/3e-5/2e-5 x epochs 2/3/4), or a "
                                             "subset: 'lr=5e-5,3e-5;epochs=2'", nargs="?", metavar="SPEC",
                                       parse=parse_grid)

    def __post_init__(self) -> None:
        if self.data.normalize == "vectors":  # --normalize alone: the vectors' length (embed), not the words' text (ner)
            object.__setattr__(self, "data", replace(self.data, normalize=None))
            object.__setattr__(self, "task", replace(self.task, normalize_vectors=True))
        super().__post_init__()
        for value, what, flag, key in ((self.model, "model", "--model DIR", "model"), (self.out, "output folder", "--out DIR", "out"),
                                       (self.data.train, "training file", "--train FILE", "data.train"),
                                       (self.data.dev, "dev file", "--dev FILE", "data.dev")):
            check(value is not None, f"no {what}: give {flag} (or {key} in a --config file)")
        check(self.optim.name == "adamw", f"fine-tuning uses adamw, got optim.name={self.optim.name!r}")
        check(self.data.label_sep is None or self.task.multi_label, "--label-sep is for --multi-label")
        if self.train.class_weights is not None:
            check_class_weights(get_task(self.task.name, **self.task.options()))

    def points(self) -> list[tuple[int, float, int]]:
        """(batch size, learning rate, epochs) of every run."""
        if self.grid is None:
            return [(self.train.batch_size, self.optim.lr, self.train.epochs)]
        return self.grid.points()

    def at(self, batch_size: int, lr: float, epochs: int) -> FinetuneSettings:
        """These settings for one point of the grid."""
        return replace(self, train=replace(self.train, batch_size=batch_size, epochs=epochs), optim=replace(self.optim, lr=lr))



def check_class_weights(task: Task) -> None:
    """BertkitError unless `task`'s loss weights classes (--class-weights): single-label classify and pair."""
    check_options(task.name, ["class_weights"])
    check(task.class_weighted, "--class-weights is for single-label classify and pair")
