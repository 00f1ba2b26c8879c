"""Single-sentence and sentence-pair classification (SST-2, waimai, RTE, MRPC, OCNLI) and regression
(STS-B-like scores): `[CLS] text [SEP] (pair [SEP])` -> BertForSequenceClassification.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import BertkitError
from ..heads import BertForSequenceClassification
from .base import Dataset, Features, ReadReport, natural_sorted, output_batches, pad_rows
from .metrics import classification_scores, regression_scores
from .readers import TextExample, read_texts


@dataclass
class ClassPrediction:
    example: TextExample
    label: str | float  # the predicted class, or the predicted score for regression
    probabilities: dict[str, float]  # class -> softmax probability, in label-id order; {} for regression


@dataclass
class ClassifyTask:
    """Classification of one text ("classify") or a text pair ("pair"); `regression` for float labels.

    `main_metric` defaults to accuracy (Pearson for regression); GLUE reports F1 for MRPC and Matthews
    correlation ("mcc") for CoLA.
    """

    name: str = "classify"
    regression: bool = False
    main_metric: str = ""
    max_seq_length: int = 128
    model_class: type = BertForSequenceClassification

    def __post_init__(self) -> None:
        if self.name not in ("classify", "pair"):
            raise BertkitError(f"ClassifyTask name must be 'classify' or 'pair', not {self.name!r}")
        self.main_metric = self.main_metric or ("pearson" if self.regression else "accuracy")

    @property
    def problem_type(self) -> str | None:
        return "regression" if self.regression else None

    @property
    def fields(self) -> tuple[str, ...]:
        return ("text", "pair", "label") if self.name == "pair" else ("text", "label")

    def read(self, path: str | Path, **fmt: Any) -> Dataset:
        """Gives the examples of a TSV / CSV / JSON-lines file; `fmt` goes to `readers.read_texts`."""
        return read_texts(path, fields=self.fields, **fmt)

    def labels(self, train: Dataset) -> list[str]:
        """Gives the training labels sorted (as numbers when all are integers); ["score"] for regression."""
        if self.regression:
            return ["score"]
        found = {e.label for e in train if e.label is not None}
        if not found:
            raise BertkitError(f"{train.source}: no labelled examples to learn labels from")
        return natural_sorted(found)

    def featurize(self, data: Dataset, tok: Any, label2id: dict[str, int] | None, *,
                  max_seq_length: int | None = None) -> Features:
        """Gives one row per example, truncated longest-first to `max_seq_length` (128 by default).

        `label2id` is the model's (config.label2id); only regression does without. Rows carry labels
        when the examples have them; a label that is not in `label2id` (never seen in training) is a
        BertkitError naming the file, line, label and the known labels.
        """
        if label2id is None and not self.regression:
            raise ValueError("featurize needs label2id (the model's config.label2id) to decode classes")
        length = max_seq_length or self.max_seq_length
        texts = [e.text for e in data]
        pairs = [e.pair or "" for e in data] if self.name == "pair" else None
        encodings = tok.encode_batch(texts, pairs, max_length=length, truncation="longest_first")
        targets = self._targets(data, label2id)
        rows: list[dict[str, Any]] = []
        for i, enc in enumerate(encodings):
            row: dict[str, Any] = {"input_ids": enc.ids, "token_type_ids": enc.token_type_ids}
            if targets is not None:
                row["labels"] = targets[i]
            rows.append(row)
        labels = ["score"] if self.regression else sorted(label2id or {}, key=(label2id or {}).__getitem__)
        return Features(rows, data, np.arange(len(rows)), labels, tok.pad_token_id)

    def _targets(self, data: Dataset, label2id: dict[str, int] | None) -> list[int] | list[float] | None:
        if not data.examples or data.examples[0].label is None:
            return None
        if self.regression:
            try:
                return [float(e.label) for e in data]
            except (TypeError, ValueError):
                bad = next(e for e in data if not _is_float(e.label))
                raise BertkitError(f"{data.source} line {bad.line}: label {bad.label!r} is not a number "
                                   f"(regression)") from None
        assert label2id is not None
        out = []
        for e in data:
            if e.label not in label2id:
                raise BertkitError(f"{data.source} line {e.line}: label {e.label!r} is not one of "
                                   f"{sorted(label2id, key=label2id.__getitem__)} (the labels seen in training)")
            out.append(label2id[e.label])
        return out

    def collate(self, rows: list[dict[str, Any]], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
        """Gives input_ids, token_type_ids, attention_mask (+ labels), padded to the longest row."""
        return pad_rows(rows, pad_token_id)

    def decode(self, features: Features, outputs: Any, **opts: Any) -> list[ClassPrediction]:
        """Gives one prediction per example from the (rows, num_labels) logits, batches in feature order."""
        _no_options(opts, "decode")
        logits = np.concatenate([b[0] for b in output_batches(outputs, ["logits"])])  # (N, C)
        if logits.shape[0] != len(features):
            raise ValueError(f"outputs hold {logits.shape[0]} rows but the features have {len(features)}")
        if self.regression:
            return [ClassPrediction(e, float(v), {}) for e, v in zip(features.data, logits[:, 0], strict=True)]
        z = np.exp(logits - logits.max(-1, keepdims=True))
        probs = z / z.sum(-1, keepdims=True)
        best = probs.argmax(-1)
        names = features.labels
        return [
            ClassPrediction(e, names[k], dict(zip(names, map(float, p), strict=True)))
            for e, k, p in zip(features.data, best, probs, strict=True)
        ]

    def score(self, data: Dataset, predictions: Sequence[ClassPrediction]) -> dict[str, float]:
        """Gives accuracy, F1 and Matthews correlation; Pearson and Spearman for regression (percent)."""
        gold = [e.label for e in data]
        if self.regression:
            return regression_scores([float(g) for g in gold], [float(p.label) for p in predictions])
        labels = list(predictions[0].probabilities) if predictions else natural_sorted(set(gold))
        return classification_scores(gold, [str(p.label) for p in predictions], labels)

    def prediction_json(self, prediction: ClassPrediction) -> dict[str, Any]:
        e = prediction.example
        out: dict[str, Any] = {"text": e.text}
        if e.pair is not None:
            out["pair"] = e.pair
        if self.regression:
            out["score"] = prediction.label
        else:
            out["label"] = prediction.label
            out["probabilities"] = {k: round(v, 6) for k, v in prediction.probabilities.items()}
        return out

    def inputs_from_texts(self, texts: Sequence[str], pairs: Sequence[str] | None = None,
                          **opts: Any) -> Dataset:
        """Gives unlabelled examples from user text (the pair task needs `pairs`, one per text)."""
        _no_options(opts, "inputs_from_texts")
        if self.name == "pair" and (pairs is None or len(pairs) != len(texts)):
            raise BertkitError(f"the pair task needs a second text for each of the {len(texts)} texts")
        seconds = pairs if self.name == "pair" and pairs is not None else [None] * len(texts)
        examples = [TextExample(t, p, None, i + 1) for i, (t, p) in enumerate(zip(texts, seconds, strict=True))]
        return Dataset(examples, ReadReport("<input>", kept=len(examples)))


def _is_float(s: Any) -> bool:
    try:
        float(s)
    except (TypeError, ValueError):
        return False
    return True


def _no_options(opts: dict[str, Any], where: str) -> None:
    if opts:
        raise TypeError(f"{where}() got unexpected options {sorted(opts)}")
