"""Multi-label classification (tags, topics): a text, or a text pair, has any number of labels, each
the sigmoid of its own logit, trained with binary cross-entropy. Saved with Hugging Face's
`problem_type: multi_label_classification`, so transformers loads it and gives the same logits.

Labels come as a JSON list in JSON lines (field `labels` or `label`, or the one `columns` names), or
joined by `label_sep` in a TSV/CSV cell (an empty cell: no labels).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BertkitError
from .base import Dataset, Features, natural_sorted, obj, pad_rows
from .classify import PROBABILITIES, ClassifyTask, echo_schema, pool_windows, text_rows, texts_schema
from .metrics import multilabel_scores
from .tables import TextExample, read_texts


@dataclass
class LabelSetPrediction:
    example: TextExample
    labels: list[str]  # every label whose probability reaches its threshold, in label-id order
    probabilities: dict[str, float]  # label -> sigmoid probability, in label-id order


@dataclass
class MultiLabelTask:
    """`name` "classify" (one text) or "pair"; a label is predicted when its probability reaches `threshold`,
    or its own entry of `thresholds` (tuned on dev by fine-tuning when asked)."""

    name: str = "classify"
    multi_label: bool = True  # as the task file keeps it: get_task(name, multi_label=True, ...) gives this task
    threshold: float = 0.5
    thresholds: dict[str, float] | None = None
    tune_thresholds: bool = False  # fine-tuning tunes `thresholds` on dev (`tuned_options`)
    label_sep: str = ","
    max_seq_length: int = 128
    long: str = "truncate"  # or "sliding": a long text in windows, their logits max-pooled (classify only)
    stride: int | None = None
    main_metric: str = "micro_f1"
    architecture: str = "BertForSequenceClassification"
    problem_type: str | None = "multi_label_classification"
    outputs: tuple[str, ...] = ("logits",)
    per_token: bool = False
    per_token_loss: bool = False
    class_weighted: bool = False
    soft_targets: str = "labels"
    variant: str = "multi-label"
    metric_names: tuple[str, ...] = ("micro_f1", "macro_f1", "subset_accuracy")

    def __post_init__(self) -> None:
        self._texts = ClassifyTask(name=self.name, max_seq_length=self.max_seq_length, long=self.long, stride=self.stride)
        if not 0.0 < self.threshold < 1.0:
            raise BertkitError(f"the threshold must be in (0, 1), got {self.threshold}")

    @property
    def model_options(self) -> dict[str, Any]:
        return {"problem_type": self.problem_type}

    def read(self, path: str | Path, *, label_sep: str | None = None, **fmt: Any) -> Dataset:
        """Gives the examples of a TSV / CSV / JSON-lines file, each label a tuple of label names."""
        sep = label_sep or self.label_sep
        data = read_texts(path, fields=self._texts.fields, no_gold=("-",), **fmt)
        examples = [e if e.label is None or isinstance(e.label, tuple) else
                    dataclasses.replace(e, label=tuple(x.strip() for x in e.label.split(sep) if x.strip()))
                    for e in data]
        return Dataset(examples, data.report)

    def labels(self, train: Dataset) -> list[str]:
        found = {label for e in train if e.label is not None for label in e.label}
        if not found:
            raise BertkitError(f"{train.source}: no labelled examples to learn labels from")
        return natural_sorted(found)

    def featurize(self, data: Dataset, tok: Any, label2id: dict[str, int] | None, *,
                  max_seq_length: int | None = None) -> Features:
        """Gives one row per example (as single-label classification), its target a 0/1 vector over the labels."""
        if label2id is None:
            raise ValueError("featurize needs label2id (the model's config.label2id)")
        rows, example_index = text_rows(data, tok, self.name == "pair", max_seq_length or self.max_seq_length,
                                        self.long, self.stride)
        targets = [self._target(e, data.source, label2id) for e in data]
        for row, i in zip(rows, example_index, strict=True):
            if targets[i] is not None:
                row["labels"] = targets[i]
        return Features(rows, data, example_index, sorted(label2id, key=label2id.__getitem__), tok.pad_token_id)

    @staticmethod
    def _target(e: TextExample, source: str, label2id: dict[str, int]) -> np.ndarray | None:
        if e.label is None:
            return None
        target = np.zeros(len(label2id), dtype=np.float32)
        for label in e.label:
            if label not in label2id:
                raise BertkitError(f"{source} line {e.line}: label {label!r} is not one of "
                                   f"{sorted(label2id, key=label2id.__getitem__)} (the labels seen in training)")
            target[label2id[label]] = 1.0
        return target

    def collate(self, rows: list[dict[str, Any]], pad_token_id: int = 0) -> dict[str, np.ndarray]:
        return pad_rows(rows, pad_token_id)

    def probabilities(self, features: Features, outputs: Any) -> np.ndarray:
        """(examples, labels) sigmoid probabilities (a long text's windows max-pooled)."""
        logits = pool_windows(features, outputs, "max").astype(np.float64)
        return 1.0 / (1.0 + np.exp(-logits))

    def cutoffs(self, labels: Sequence[str]) -> np.ndarray:
        return np.array([(self.thresholds or {}).get(label, self.threshold) for label in labels])

    def decode(self, features: Features, outputs: Any, **opts: Any) -> list[LabelSetPrediction]:
        if opts:
            raise TypeError(f"decode got unexpected options {sorted(opts)}")
        probs = self.probabilities(features, outputs)
        names = features.labels
        chosen = probs >= self.cutoffs(names)
        return [LabelSetPrediction(e, [n for n, c in zip(names, row, strict=True) if c],
                                   dict(zip(names, map(float, p), strict=True)))
                for e, row, p in zip(features.data, chosen, probs, strict=True)]

    def tuned_options(self, features: Features, outputs: Callable[[], Any]) -> dict[str, Any]:
        """With `tune_thresholds`: each label's threshold with its best F1 on these (dev) examples."""
        if not self.tune_thresholds:
            return {}
        gold = [frozenset(e.label or ()) for e in features.data]
        return {"thresholds": tune_thresholds(gold, self.probabilities(features, outputs()), features.labels)}

    def score(self, data: Dataset, predictions: Sequence[LabelSetPrediction]) -> dict[str, float]:
        labels = list(predictions[0].probabilities) if predictions else []
        gold = [frozenset(e.label or ()) for e in data]
        return multilabel_scores(gold, [frozenset(p.labels) for p in predictions], labels)

    def prediction_json(self, prediction: LabelSetPrediction) -> dict[str, Any]:
        e = prediction.example
        out: dict[str, Any] = {"text": e.text}
        if e.pair is not None:
            out["pair"] = e.pair
        out["labels"] = prediction.labels
        out["probabilities"] = {k: round(v, 6) for k, v in prediction.probabilities.items()}
        return out

    def inputs_from_texts(self, texts: Sequence[str], pairs: Sequence[str] | None = None, **opts: Any) -> Dataset:
        return self._texts.inputs_from_texts(texts, pairs, **opts)

    def texts_of(self, example: TextExample) -> tuple[str, str | None]:
        return self._texts.texts_of(example)

    @property
    def second(self) -> str | None:
        return self._texts.second

    @property
    def json_fields(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return self._texts.json_fields

    def check_input(self, item: Any, where: str) -> None:
        self._texts.check_input(item, where)

    def split_inputs(self, items: Sequence[Any]) -> tuple[list[Any], list[str] | None]:
        return self._texts.split_inputs(items)

    def show_input(self, text: str, second: str | None) -> str:
        return self._texts.show_input(text, second)

    def matches(self, prediction: dict[str, Any], expected: str) -> bool:
        return set(prediction.get("labels", [])) == {label.strip() for label in expected.split(",") if label.strip()}

    def show_prediction(self, prediction: dict[str, Any]) -> str:
        return ", ".join(prediction.get("labels", [])) or "(no label)"

    @property
    def input_schema(self) -> dict[str, Any]:
        return texts_schema(self.name)

    @property
    def prediction_schema(self) -> dict[str, Any]:
        labels = {"type": "array", "items": {"type": "string"}}
        return obj({**echo_schema(self.name), "labels": labels, "probabilities": PROBABILITIES})

    def relevance(self, prediction: dict[str, Any], raw: bool = False) -> float | None:
        return None  # several labels at once: no one relevance

    def reranks(self, labels: Sequence[str]) -> bool:
        return False

    def learner(self) -> None:
        """Trained by the task model's own loss."""
        return None


def tune_thresholds(gold: Sequence[frozenset[str]], probs: np.ndarray, labels: Sequence[str]) -> dict[str, float]:
    """Each label's threshold that gives it the best F1 on these examples (dev): the candidates are 0.05, 0.10,
    ..., 0.95; among equals the one nearest 0.5."""
    candidates = sorted(np.round(np.arange(0.05, 0.951, 0.05), 2), key=lambda t: (abs(t - 0.5), t))
    out = {}
    for j, label in enumerate(labels):
        truth = np.array([label in g for g in gold])

        def f1(t: float, j: int = j, truth: np.ndarray = truth) -> float:
            pred = probs[:, j] >= t
            tp = int((pred & truth).sum())
            return 2 * tp / max(int(pred.sum()) + int(truth.sum()), 1)

        out[label] = float(max(candidates, key=f1))  # max keeps the first of equals: the nearest 0.5
    return out
