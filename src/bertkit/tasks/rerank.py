"""The rerank family: a cross-encoder that scores (query, passage) pairs, trained on groups or labelled pairs.

    bertkit finetune --task rerank --model MiniLM --train groups.tsv --dev dev-groups.tsv --out runs/reranker
    bertkit finetune --task rerank --loss listwise --train groups.tsv ...

Each (query, passage) pair is one sequence, `[CLS] query [SEP] passage [SEP]`, and one logit: its relevance is the
logit's sigmoid, as sentence-transformers' CrossEncoder gives it. `loss` bce: binary cross-entropy a pair (a group's
positive 1, its negatives 0; a labelled pair its label, 0 to 1); listwise: a softmax over each group's pairs, the
positive to win. Dev: each query's candidates in the file (its positives and negatives, every pair it appears in)
reranked, MRR@10 and NDCG@10 as trec_eval computes them.

The trained folder is a pair model (BertForSequenceClassification, one label "score"): `bertkit serve` answers
/v1/rerank and /v1/predict with it, `bertkit evaluate --first-stage` reranks with it, and CrossEncoder loads it.
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
    Family,
    Features,
    InputError,
    Learner,
    ReadReport,
    check_text,
    json_kind,
    obj,
    output_batches,
    pad_rows,
)
from .groups import GroupTask, TextGroup, per_example
from .ranking import mean_scores, rank_scores

LOSSES = ("bce", "listwise")


@dataclass
class RerankPrediction:
    example: TextGroup
    logits: np.ndarray  # (candidates,): the positive's, then the negatives'


@dataclass
class RerankTask(GroupTask):
    """A cross-encoder trained by binary cross-entropy or listwise softmax; see the module's doc."""

    name: str = "rerank"
    loss: str = "bce"
    max_seq_length: int = 128
    main_metric: str = "ndcg@10"
    architecture: str = "BertForSequenceClassification"
    outputs: tuple[str, ...] = ("logits",)
    per_token: bool = False
    per_token_loss: bool = False
    class_weighted: bool = False
    soft_targets: str = "score"
    problem_type: str | None = None
    metric_names: tuple[str, ...] = ("mrr@10", "ndcg@10")

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise BertkitError(f"--loss {self.loss}: the rerank task trains with {' or '.join(LOSSES)}")

    def read(self, path: str | Path, **fmt: Any) -> Dataset:
        """Gives the groups or labelled pairs of a TSV / CSV / JSON-lines file (bertkit.tasks.groups)."""
        data = self.read_file(path, fmt)
        bad = next((e for e in data if e.score is not None and not 0 <= e.score <= 1), None)
        if bad is not None:
            raise BertkitError(f"{path} line {bad.line}: field 'score': {bad.score:g} is not a relevance from 0 to 1 "
                               "(a reranker learns labelled pairs: 1 relevant, 0 not)")
        return data

    def labels(self, train: Dataset) -> list[str]:
        return ["score"]

    def featurize(self, data: Dataset, tok: Any, label2id: dict[str, int] | None, *,
                  max_seq_length: int | None = None) -> Features:
        """Gives one row a (query, candidate) pair, the candidates of an example in turn (its positive, then its
        negatives), truncated longest-first; each row's relevance is 1 for a positive, 0 for a negative, a
        labelled pair's own label."""
        pairs = [(i, e.anchor, text, relevance) for i, e in enumerate(data) for text, relevance in _candidates(e)]
        encoded = tok.encode_batch([p[1] for p in pairs], [p[2] for p in pairs], truncation="longest_first",
                                   max_length=max_seq_length or self.max_seq_length) if pairs else []
        rows = [{"input_ids": e.ids, "token_type_ids": e.token_type_ids, "relevance": p[3]}
                for p, e in zip(pairs, encoded, strict=True)]
        return Features(rows, data, np.array([p[0] for p in pairs], np.int64), ["score"], tok.pad_token_id)

    def collate(self, rows: list[dict[str, Any]], pad_token_id: int = 0) -> dict[str, np.ndarray]:
        return pad_rows(rows, pad_token_id)

    def decode(self, features: Features, outputs: Any, **opts: Any) -> list[RerankPrediction]:
        logits = np.concatenate([b[0] for b in output_batches(outputs, self.outputs)])[:, 0]
        return [RerankPrediction(e, v) for e, v in zip(features.data, per_example(features, logits), strict=True)]

    def score(self, data: Dataset, predictions: Sequence[RerankPrediction]) -> dict[str, float]:
        """MRR@10 and NDCG@10 (percent) of each query's candidates ranked by their logits; a candidate is relevant
        when it is a positive (a labelled pair: its label at least 0.5)."""
        run: dict[str, dict[str, float]] = {}
        qrels: dict[str, dict[str, int]] = {}
        for p in predictions:
            for (text, relevance), logit in zip(_candidates(p.example), p.logits, strict=True):
                run.setdefault(p.example.anchor, {})[text] = float(logit)
                grades = qrels.setdefault(p.example.anchor, {})
                grades[text] = max(grades.get(text, 0), int(relevance >= 0.5))
        means = mean_scores(rank_scores(run, qrels))
        return {name: means.get(name, 0.0) for name in self.metric_names}

    def tuned_options(self, features: Features, outputs: Callable[[], Any]) -> dict[str, Any]:
        return {}

    def prediction_json(self, prediction: RerankPrediction) -> dict[str, Any]:
        e = prediction.example
        return {"text": e.anchor, "pair": e.positive, "score": float(1 / (1 + np.exp(-float(prediction.logits[0]))))}

    def inputs_from_texts(self, texts: Sequence[str], pairs: Sequence[str] | None = None, **opts: Any) -> Dataset:
        if pairs is None or len(pairs) != len(texts):
            raise BertkitError(f"a reranker scores (query, passage) pairs: it needs a passage for each of the "
                               f"{len(texts)} queries")
        examples = [TextGroup(t, p, line=i + 1) for i, (t, p) in enumerate(zip(texts, pairs, strict=True))]
        return Dataset(examples, ReadReport("<input>", kept=len(examples)))

    def texts_of(self, example: TextGroup) -> tuple[str, str | None]:
        return example.anchor, example.positive

    @property
    def second(self) -> str | None:
        return "passage"

    def check_input(self, item: Any, where: str) -> None:
        if not (isinstance(item, list) and len(item) == 2):
            raise InputError(f"{where}: a reranker takes [query, passage], got {json_kind(item)}")
        check_text(item[0], f"{where}[0]")
        check_text(item[1], f"{where}[1]")

    def split_inputs(self, items: Sequence[Any]) -> tuple[list[Any], list[str] | None]:
        return [i[0] for i in items], [i[1] for i in items]

    def show_input(self, text: str, second: str | None) -> str:
        return f"{text} / {second}"

    def show_prediction(self, prediction: dict[str, Any]) -> str:
        return f"{prediction['score']:.3g}"

    def matches(self, prediction: dict[str, Any], expected: str) -> bool:
        return False

    @property
    def input_schema(self) -> dict[str, Any]:
        return {"type": "array", "items": STRING, "minItems": 2, "maxItems": 2}

    @property
    def prediction_schema(self) -> dict[str, Any]:
        return obj({"text": {"type": "string"}, "pair": {"type": "string"}, "score": {"type": "number"}})

    def relevance(self, prediction: dict[str, Any], raw: bool = False) -> float | None:
        """The pair's relevance, the sigmoid of its logit; `raw`: the logit."""
        p = float(prediction["score"])
        return float(np.log(max(p, 1e-12) / max(1 - p, 1e-12))) if raw else p

    def reranks(self, labels: Sequence[str]) -> bool:
        return True

    def learner(self) -> Learner:
        from .encoders import RerankLearner  # torch, for training only

        return RerankLearner(self)


def _candidates(example: TextGroup) -> list[tuple[str, float]]:
    """An example's passages and their relevance: a labelled pair's own; a group's positive 1, negatives 0."""
    first = 1.0 if example.score is None else float(example.score)
    return [(example.positive, first), *((n, 0.0) for n in example.negatives)]


RERANK = Family("rerank", RerankTask, frozenset({"loss"}), "reranking (a cross-encoder)", "text-ranking")
