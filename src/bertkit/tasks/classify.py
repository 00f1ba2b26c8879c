"""Single-sentence and sentence-pair classification (SST-2, waimai, RTE, MRPC, OCNLI) and regression
(STS-B-like scores): `[CLS] text [SEP] (pair [SEP])` -> BertForSequenceClassification.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BertkitError
from .base import (
    STRING,
    Dataset,
    Features,
    InputError,
    ReadReport,
    check_text,
    json_kind,
    natural_sorted,
    obj,
    output_batches,
    pad_rows,
)
from .metrics import classification_scores, regression_scores
from .tables import DEFAULT_NAMES, TextExample, read_texts


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
    long: str = "truncate"  # a text longer than max_seq_length: "truncate", or "sliding" windows (classify only)
    stride: int | None = None  # sliding: tokens between window starts (default half a window)
    architecture: str = "BertForSequenceClassification"
    outputs: tuple[str, ...] = ("logits",)
    per_token: bool = False
    per_token_loss: bool = False

    def __post_init__(self) -> None:
        if self.name not in ("classify", "pair"):
            raise BertkitError(f"ClassifyTask name must be 'classify' or 'pair', not {self.name!r}")
        check_long(self.name, self.long, self.stride, self.max_seq_length)
        self.main_metric = self.main_metric or ("pearson" if self.regression else "accuracy")

    @property
    def problem_type(self) -> str | None:
        return "regression" if self.regression else None

    @property
    def class_weighted(self) -> bool:
        return not self.regression

    @property
    def soft_targets(self) -> str:
        return "score" if self.regression else "classes"

    @property
    def variant(self) -> str:
        return "regression" if self.regression else ""

    @property
    def json_fields(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return DEFAULT_NAMES["text"], DEFAULT_NAMES["pair"]

    @property
    def metric_names(self) -> tuple[str, ...]:
        return ("pearson", "spearman", "corr", "mse") if self.regression else ("accuracy", "f1", "mcc")

    @property
    def model_options(self) -> dict[str, Any]:
        return {"problem_type": self.problem_type}

    @property
    def fields(self) -> tuple[str, ...]:
        return ("text", "pair", "label") if self.name == "pair" else ("text", "label")

    def read(self, path: str | Path, **fmt: Any) -> Dataset:
        """Gives the examples of a TSV / CSV / JSON-lines file; `fmt` goes to `readers.read_texts`."""
        if "label_sep" in fmt:
            raise BertkitError("--label-sep is for multi-label data (a model fine-tuned with --multi-label)")
        return read_texts(path, fields=self.fields, **fmt)

    def labels(self, train: Dataset) -> list[str]:
        """Gives the training labels sorted (as numbers when all are integers); ["score"] for regression."""
        if self.regression:
            return ["score"]
        listed = next((e for e in train if isinstance(e.label, tuple)), None)
        if listed is not None:
            raise BertkitError(f"{train.source} line {listed.line}: the label is a list {list(listed.label)}: "
                               "multi-label data; fine-tune it with --multi-label")
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
        targets = self._targets(data, label2id)
        rows, example_index = text_rows(data, tok, self.name == "pair", length, self.long, self.stride)
        if targets is not None:
            for row, i in zip(rows, example_index, strict=True):
                row["labels"] = targets[i]
        labels = ["score"] if self.regression else sorted(label2id or {}, key=(label2id or {}).__getitem__)
        return Features(rows, data, example_index, labels, tok.pad_token_id)

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

    def collate(self, rows: list[dict[str, Any]], pad_token_id: int = 0) -> dict[str, np.ndarray]:
        """Gives input_ids, token_type_ids, attention_mask (+ labels), padded to the longest row."""
        return pad_rows(rows, pad_token_id)

    def decode(self, features: Features, outputs: Any, **opts: Any) -> list[ClassPrediction]:
        """Gives one prediction per example from the (rows, num_labels) logits, batches in feature order."""
        _no_options(opts, "decode")
        logits = pool_windows(features, outputs, "mean")  # (examples, C): a long text's windows averaged
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

    def tuned_options(self, features: Features, outputs: Callable[[], Any]) -> dict[str, Any]:
        """Nothing of this task is tuned on dev after training."""
        return {}

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

    def texts_of(self, example: TextExample) -> tuple[str, str | None]:
        return example.text, example.pair

    @property
    def second(self) -> str | None:
        return "second text" if self.name == "pair" else None

    def check_input(self, item: Any, where: str) -> None:
        """A text; for the pair task a [text, pair] list."""
        if self.name != "pair":
            check_text(item, where)
            return
        if not (isinstance(item, list) and len(item) == 2):
            raise InputError(f"{where}: a pair model takes [text, pair], got {json_kind(item)}")
        check_text(item[0], f"{where}[0]")
        check_text(item[1], f"{where}[1]")

    def split_inputs(self, items: Sequence[Any]) -> tuple[list[Any], list[str] | None]:
        if self.name == "pair":
            return [i[0] for i in items], [i[1] for i in items]
        return list(items), None

    def show_input(self, text: str, second: str | None) -> str:
        return text if second is None else f"{text} / {second}"

    @property
    def input_schema(self) -> dict[str, Any]:
        return texts_schema(self.name)

    @property
    def prediction_schema(self) -> dict[str, Any]:
        if self.regression:
            return obj({**echo_schema(self.name), "score": {"type": "number"}})
        return obj({**echo_schema(self.name), "label": {"type": "string"}, "probabilities": PROBABILITIES})

    def relevance(self, prediction: dict[str, Any], raw: bool = False) -> float | None:
        """A pair model as a cross-encoder: its score, or the probability of its positive label (RELEVANT); `raw`:
        that probability's log-odds (a score stays as it is)."""
        if self.name != "pair":
            return None
        if self.regression:
            return float(prediction["score"])
        p = float(prediction["probabilities"][positive_label(list(prediction["probabilities"]))])
        return float(np.log(max(p, 1e-12) / max(1 - p, 1e-12))) if raw else p

    def reranks(self, labels: Sequence[str]) -> bool:
        """A pair model reranks: by its score, or by a label that means relevant (a binary model's second)."""
        return self.name == "pair" and (self.regression or len(labels) == 2
                                        or any(label.lower() in RELEVANT for label in labels))

    def learner(self) -> None:
        """Trained by the task model's own loss."""
        return None

    def show_prediction(self, prediction: dict[str, Any]) -> str:
        """The label and its probability (the score for regression)."""
        if "score" in prediction:
            return f"{prediction['score']:.3g}"
        return f"{prediction.get('label')} ({max(prediction.get('probabilities', {}).values(), default=0):.2f})"

    def matches(self, prediction: dict[str, Any], expected: str) -> bool:
        return str(prediction.get("label")) == expected  # a score (regression) is never exactly an expected one


PROBABILITIES = {"type": "object", "additionalProperties": {"type": "number"}}
# a pair classifier's label that means "the second text goes with the first" when reranking with it
RELEVANT = ("1", "entailment", "positive", "relevant", "yes", "true", "paraphrase", "equivalent", "similar")


def positive_label(labels: list[str]) -> str:
    """The label a cross-encoder's relevance is the probability of: one of RELEVANT, else a binary model's second."""
    found = next((label for label in labels if label.lower() in RELEVANT), None)
    if found is None and len(labels) != 2:
        raise BertkitError(f"cannot rerank with labels {labels}: none of them means relevant ({', '.join(RELEVANT)})")
    return found or labels[1]


def texts_schema(name: str) -> dict[str, Any]:
    """A served input: a text, or for the pair task [text, pair]."""
    if name == "pair":
        return {"type": "array", "items": STRING, "minItems": 2, "maxItems": 2}
    return STRING


def echo_schema(name: str) -> dict[str, Any]:
    """The input a classification prediction repeats."""
    return {"text": {"type": "string"}, **({"pair": {"type": "string"}} if name == "pair" else {})}


def check_long(name: str, long: str, stride: int | None, max_seq_length: int) -> None:
    if long not in ("truncate", "sliding"):
        raise BertkitError(f"--long must be truncate or sliding, got {long!r}")
    if long == "sliding" and name != "classify":
        raise BertkitError("--long sliding is for single texts (classify), not pairs")
    if stride is not None and not 0 < stride <= max_seq_length - 2:
        raise BertkitError(f"--stride must be in [1, {max_seq_length - 2}] (the tokens of a window), got {stride}")


def text_rows(data: Dataset, tok: Any, pair: bool, length: int, long: str = "truncate",
              stride: int | None = None) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Gives the model rows of texts (or pairs) and the example of each row: one a text, truncated longest-first
    to `length`; or with long="sliding", a text longer than that in windows of length - 2 tokens, `stride`
    apart (default half a window), the last one ending with the text, each `[CLS] window [SEP]`."""
    texts = [e.text for e in data]
    pairs = [e.pair or "" for e in data] if pair else None
    if long == "truncate":
        encodings = tok.encode_batch(texts, pairs, max_length=length, truncation="longest_first")
        return [{"input_ids": e.ids, "token_type_ids": e.token_type_ids} for e in encodings], np.arange(len(texts))
    size = length - 2
    step = stride or max(1, size // 2)
    rows, index = [], []
    for i, enc in enumerate(tok.encode_batch(texts, add_special_tokens=False)):
        ids = enc.ids
        starts = list(range(0, max(len(ids) - size, 0) + 1, step))
        if starts[-1] + size < len(ids):
            starts.append(len(ids) - size)  # the end of the text in a window of its own
        for a in starts:
            window = [tok.cls_token_id, *ids[a : a + size], tok.sep_token_id]
            rows.append({"input_ids": window, "token_type_ids": [0] * len(window)})
            index.append(i)
    return rows, np.asarray(index, dtype=np.int64)


def pool_windows(features: Features, outputs: Any, how: str) -> np.ndarray:
    """(examples, C) logits from the rows' (rows, C): each example's windows averaged ("mean") or max-pooled."""
    logits = np.concatenate([b[0] for b in output_batches(outputs, ["logits"])])  # (rows, C)
    if logits.shape[0] != len(features):
        raise ValueError(f"outputs hold {logits.shape[0]} rows but the features have {len(features)}")
    n = len(features.data)
    if len(features) == n:
        return logits
    pooled = np.full((n, logits.shape[1]), -np.inf if how == "max" else 0.0, dtype=np.float64)
    if how == "max":
        np.maximum.at(pooled, features.example_index, logits)
        return pooled
    np.add.at(pooled, features.example_index, logits)
    return pooled / np.bincount(features.example_index, minlength=n)[:, None]


def _is_float(s: Any) -> bool:
    try:
        float(s)
    except (TypeError, ValueError):
        return False
    return True


def _no_options(opts: dict[str, Any], where: str) -> None:
    if opts:
        raise TypeError(f"{where}() got unexpected options {sorted(opts)}")
