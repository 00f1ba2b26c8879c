"""What every task family shares: the Task interface, the Family that builds it, datasets with a read
report, features, padding, and turning model outputs into per-row numpy arrays.

Fine-tuning, prediction, the server and the demo's report drive any task through the same calls and attributes
(see `Task`); none of them needs to know whether rows are sentences, question windows or tagged words, nor
which family a task is: what differs by family is here, in tasks/.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..config import IGNORE
from ..errors import BertkitError
from ..fileio import ReadReport


@dataclass
class Dataset:
    """Examples read from one file (or built from user text), with what was skipped or fixed on the way.

    `scheme` is the tag scheme of an NER file as read ("IOB1", "BIO" or "BIOES"); `impossible` counts
    SQuAD v2 questions without an answer.
    """

    examples: list[Any]
    report: ReadReport
    scheme: str | None = None
    impossible: int = 0

    @property
    def source(self) -> str:
        return self.report.source

    def __len__(self) -> int:
        return len(self.examples)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.examples)

    def __getitem__(self, i: int) -> Any:
        return self.examples[i]


@dataclass
class Features:
    """Model-input rows (lists of ints) and what decoding needs to map their outputs back to examples.

    `rows[i]` is one sequence for the model; `example_index[i]` is the example it came from (QA and
    long NER sentences give several rows per example). `labels` are the class names, in id order.
    """

    rows: list[dict[str, Any]]
    data: Dataset
    example_index: np.ndarray  # (rows,) int
    labels: list[str]
    pad_token_id: int = 0

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.rows[i]

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(r["input_ids"]) for r in self.rows), dtype=np.int64, count=len(self.rows))

    @property
    def sort_keys(self) -> np.ndarray:
        """What training groups rows into batches by: their lengths (rows of similar length, little padding)."""
        return self.lengths

    def collate(self, rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        """Gives the batch for the model: `pad_rows` with this tokenizer's [PAD] id."""
        return pad_rows(rows, self.pad_token_id)


@runtime_checkable
class Task(Protocol):
    """One task family, driven by the training loop without knowing which.

    Every score is in percent (0-100), as the paper and the official QA scripts report them.
    """

    name: str  # "classify" | "pair" | "qa" | "ner"
    architecture: str  # the model class to fine-tune, by its name in bertkit and transformers (bertkit.heads)
    main_metric: str  # the key of `score` that picks the best checkpoint, unless fine-tuning is told another
    metric_names: tuple[str, ...]  # the keys of `score` (NER adds per-type ones, "f1/PER")
    # for BertConfig.with_labels: "regression", "multi_label_classification", or None (one class, a tag, a span)
    problem_type: str | None
    outputs: tuple[str, ...]  # the model outputs `decode` reads, by their names on the model's output
    per_token: bool  # those outputs come per token, (B, T, ...), rather than per row, (B, ...)
    per_token_loss: bool  # the training loss is a mean over labelled tokens, rather than over rows
    class_weighted: bool  # the loss may weight each class (--class-weights): one class a row
    # how distillation compares a student's outputs with its teacher's (bertkit.students.soft_loss): "classes",
    # "labels" (multi-label), "score" (regression), "positions" (a span's start and end), "emissions" (a CRF's)
    soft_targets: str
    variant: str  # what sets this task apart within its family ("regression", "multi-label"), or ""

    @property
    def model_options(self) -> dict[str, Any]: ...  # config fields the task model needs: problem_type, a CRF

    def read(self, path: str | Path, **fmt: Any) -> Dataset: ...
    def labels(self, train: Dataset) -> list[str]: ...
    def featurize(self, data: Dataset, tok: Any, label2id: dict[str, int] | None, **opts: Any) -> Features: ...
    def collate(self, rows: list[dict[str, Any]], pad_token_id: int = 0) -> dict[str, np.ndarray]: ...
    def decode(self, features: Features, outputs: Any, **opts: Any) -> list[Any]: ...
    def score(self, data: Dataset, predictions: Sequence[Any]) -> dict[str, float]: ...
    # decoding settings tuned on dev after training; `outputs()` gives the model's logits on `features` when called
    def tuned_options(self, features: Features, outputs: Callable[[], Any]) -> dict[str, Any]: ...
    def prediction_json(self, prediction: Any) -> dict[str, Any]: ...
    def inputs_from_texts(self, texts: Sequence[str], pairs: Sequence[str] | None = None, **opts: Any) -> Dataset: ...
    # an example's first input (a text, a question, an NER sentence's words) and second text: what inputs_from_texts takes
    def texts_of(self, example: Any) -> tuple[str | tuple[str, ...], str | None]: ...
    # the keys an input's text and its second text may have in a JSON line (`bertkit predict`), as training files name them
    @property
    def json_fields(self) -> tuple[tuple[str, ...], tuple[str, ...]]: ...

    # An input as the server and `Pipeline.predict` take it: a text, [text, pair], {"question", "context"}, words.
    @property
    def second(self) -> str | None: ...  # what an input's second text is ("second text", "context"); None: one text
    def check_input(self, item: Any, where: str) -> None: ...  # raises InputError naming what is wrong at `where`
    def split_inputs(self, items: Sequence[Any]) -> tuple[list[Any], list[str] | None]: ...  # -> texts, seconds
    # One line each, for a report: an input (its text and second text), and a prediction as `prediction_json` gave it.
    def show_input(self, text: str, second: str | None) -> str: ...
    def show_prediction(self, prediction: dict[str, Any]) -> str: ...
    # whether a prediction (as `prediction_json` gave it) is an expected answer written as `show_prediction` shows it:
    # a label, an answer's text, entities "PER: a, b; LOC: c" in any order
    def matches(self, prediction: dict[str, Any], expected: str) -> bool: ...
    # JSON schemas of one served input and one prediction (the server's /openapi.json)
    @property
    def input_schema(self) -> dict[str, Any]: ...
    @property
    def prediction_schema(self) -> dict[str, Any]: ...
    # a cross-encoder's relevance of a (query, text) pair from its prediction; None: this task does not rerank
    def relevance(self, prediction: dict[str, Any], raw: bool = False) -> float | None: ...
    # whether a model of this task with these labels scores (query, text) pairs as a cross-encoder (`relevance`)
    def reranks(self, labels: Sequence[str]) -> bool: ...
    # how fine-tuning trains it: None, the task model (`architecture`) by its own loss on the feature rows; else
    # the family's own model, loss and saved files (see `Learner`)
    def learner(self) -> Learner | None: ...


class Learner(Protocol):
    """How `bertkit finetune` trains a family that brings its own model, loss or files (an embedder: an encoder that
    pools, a loss over the vectors of a batch's groups of texts, sentence-transformers' files beside the weights).
    Dev evaluation stays the task's: `infer` with the model, then `decode` and `score`."""

    # a BertkitError if it cannot train on `train` from the model in `base` (before anything is written)
    def check(self, base: Path, train: Features) -> None: ...
    def model(self, base: Path, labels: list[str]) -> Any: ...  # the module to train, from a pre-trained folder
    def load(self, folder: Path) -> Any: ...  # the trained module, back from a folder `save` wrote
    def objective(self, device: Any) -> Any: ...  # what a step optimizes (bertkit.train.Objective)
    def training_features(self, features: Features) -> Features: ...  # the rows training batches are made of
    def save(self, model: Any, folder: Path) -> None: ...  # the weights and config, and the family's other files
    # distillation (bertkit.distillation): the student of a trained model, `build` (bertkit.students.build_student)
    # making its encoder; and the labels' own loss on rows as `featurize` gives them, None when it needs whole groups
    def student(self, teacher: Any, build: Callable[[Any], Any]) -> Any: ...
    def hard_loss(self, outputs: Any, batch: dict[str, Any]) -> Any | None: ...


@dataclass(frozen=True)
class Family:
    """A task family as the rest of bertkit knows it: its name, how its Task is built from options, and which
    fine-tuning options apply to it (by setting name: "crf", "doc_stride", ...; `max_seq_length` applies to all)."""

    name: str
    build: Callable[..., Task]
    options: frozenset[str]
    title: str  # what the family does, in words ("extractive question answering")
    pipeline_tag: str  # its task on the Hugging Face Hub (a model card's pipeline_tag)


# ---------------------------------------------------------------------------------------------------
# Inputs given to a fine-tuned model (the server's bodies, predict's lines)


class InputError(BertkitError):
    """An input that is not what the model's task takes; the message names where it is."""


def check_text(value: Any, where: str) -> None:
    """A non-blank string, or an InputError naming `where`."""
    if not isinstance(value, str):
        raise InputError(f"{where}: expected a string, got {json_kind(value)}")
    if not value.strip():
        raise InputError(f"{where}: the text is empty")


STRING = {"type": "string", "minLength": 1}


def obj(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    """A JSON schema of an object with these properties (`required` ones always there)."""
    return {"type": "object", "required": list(required), "properties": {**required, **(optional or {})}}


def json_kind(value: Any) -> str:
    """Says what a JSON value is, for an error message."""
    if value is None:
        return "null"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return "an object" if isinstance(value, dict) else {bool: "a boolean", str: "a string"}.get(type(value), "a number")


# ---------------------------------------------------------------------------------------------------
# Padding


_PAD_VALUES = {"input_ids": None, "token_type_ids": 0, "labels": IGNORE}  # None: the tokenizer's [PAD] id


def pad_rows(rows: list[dict[str, Any]], pad_token_id: int = 0) -> dict[str, np.ndarray]:
    """Gives int64 arrays padded to the longest row, plus attention_mask; scalars stack as they are.

    A row's list fields (input_ids, token_type_ids, per-token labels) share one length; scalar fields
    (a class label, start/end positions) become a (B,) array, float32 when the values are floats.
    Numpy, so that inference runs without torch (bertkit.runtime); training makes tensors of it.
    """
    lengths = [len(r["input_ids"]) for r in rows]
    B, T = len(rows), max(lengths)
    batch: dict[str, np.ndarray] = {}
    mask = np.zeros((B, T), dtype=np.int64)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    for key in rows[0]:
        values = [r[key] for r in rows]
        if isinstance(values[0], np.ndarray):  # a vector a row (multi-label targets)
            batch[key] = np.stack(values)
        elif isinstance(values[0], list):
            pad = _PAD_VALUES.get(key, 0)
            out = np.full((B, T), pad_token_id if pad is None else pad, dtype=np.int64)
            for i, v in enumerate(values):
                out[i, : len(v)] = v
            batch[key] = out
        else:
            batch[key] = np.asarray(values, dtype=np.float32 if isinstance(values[0], float) else np.int64)
    batch["attention_mask"] = mask
    return batch


# ---------------------------------------------------------------------------------------------------
# Model outputs -> numpy


def _as_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, told without importing torch
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float32)


def output_batches(outputs: Any, names: Sequence[str]) -> list[tuple[np.ndarray, ...]]:
    """Gives, for each batch, the named logits as float32 arrays.

    `outputs` is one batch or a list of batches, in feature order. A batch is a model output
    (attributes `names`), a dict, a tuple of arrays in `names` order, or a bare array/tensor when
    one name is asked for.
    """
    batches = outputs if isinstance(outputs, list) else [outputs]
    got = []
    for b in batches:
        if isinstance(b, dict):
            arrays = tuple(b[n] for n in names)
        elif isinstance(b, tuple):
            arrays = b
        elif isinstance(b, np.ndarray) or hasattr(b, "detach"):
            arrays = (b,)
        else:
            arrays = tuple(getattr(b, n) for n in names)
        if len(arrays) != len(names):
            raise ValueError(f"expected outputs {list(names)}, got {len(arrays)} arrays in a batch")
        got.append(tuple(_as_numpy(a) for a in arrays))
    return got


def output_rows(outputs: Any, names: Sequence[str], lengths: np.ndarray) -> list[tuple[np.ndarray, ...]]:
    """Gives, for each feature row, its named per-token logits cut to the row's length (padding dropped)."""
    rows: list[tuple[np.ndarray, ...]] = []
    for arrays in output_batches(outputs, names):
        for i in range(arrays[0].shape[0]):
            n = lengths[len(rows)] if len(rows) < len(lengths) else 0
            rows.append(tuple(a[i, :n] for a in arrays))
    if len(rows) != len(lengths):
        raise ValueError(f"outputs hold {len(rows)} rows but the features have {len(lengths)}")
    return rows


def natural_sorted(values: set[str] | list[str]) -> list[str]:
    """Gives labels sorted as numbers when they all are integers ("2" before "10"), else as strings."""
    values = sorted(set(values))
    try:
        return sorted(values, key=int)
    except ValueError:
        return values
