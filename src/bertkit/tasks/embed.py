"""The embed family: a sentence embedder (a bi-encoder) trained on pairs, groups or scored pairs (bertkit.tasks.groups).

    bertkit finetune --task embed --model MiniLM --train pairs.tsv --dev dev.tsv --out runs/embedder
    bertkit finetune --task embed --loss cosent --train scored.tsv --dev scored-dev.tsv ...

Every text of a group is its own sequence, `[CLS] text [SEP]`, pooled into one vector (`pooling` mean, cls or the
pooler's output). `loss` mnrl: each anchor against every positive and negative of the batch (in-batch negatives,
`scale` 20, `symmetric` both ways); cosent: scored or labelled pairs, their cosines ordered as their scores.
`gradient_cache` N computes a batch N sequences at a time (GradCache); `matryoshka` trains each leading slice of the
vectors. Dev: scored pairs give Pearson and Spearman of the cosine; pairs and groups, retrieval of each anchor's
positives among all the dev file's positives and negatives (MRR@10, NDCG@10, Recall@1/10/100; with `matryoshka`,
NDCG@10 at each size too, "ndcg@10/64").

The trained folder is an encoder with sentence-transformers' files (bertkit.sentence_files): `bertkit embed`,
`bertkit serve` (/v1/embeddings) and sentence_transformers.SentenceTransformer read its pooling from it.
Nothing here imports torch: training is bertkit.tasks.encoders'.
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
    Learner,
    ReadReport,
    check_text,
    obj,
    output_batches,
    pad_rows,
)
from .groups import GroupTask, TextGroup, kind_of, per_example
from .metrics import pearson, spearman
from .ranking import mean_scores, metric_names, rank_scores

LOSSES = ("mnrl", "cosent")
POOLINGS = ("mean", "cls", "pooler")


@dataclass
class EmbedPrediction:
    example: TextGroup
    vectors: np.ndarray  # (texts of the example, hidden): its anchor's, positive's, negatives'


@dataclass
class EmbedTask(GroupTask):
    """Sentence embeddings trained by in-batch negatives (mnrl) or CoSENT; see the module's doc."""

    name: str = "embed"
    loss: str = "mnrl"
    symmetric: bool = False
    scale: float = 20.0
    pooling: str = "mean"
    normalize_vectors: bool = False  # the saved model's vectors have length 1 (sentence-transformers' Normalize module)
    gradient_cache: int = 0  # > 0: GradCache, this many sequences a forward pass
    matryoshka: tuple[int, ...] = ()
    max_seq_length: int = 128
    main_metric: str = ""
    architecture: str = "BertModel"
    outputs: tuple[str, ...] = ("sentence_embedding",)
    per_token: bool = False
    per_token_loss: bool = False
    class_weighted: bool = False
    soft_targets: str = "vectors"
    problem_type: str | None = None

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise BertkitError(f"--loss {self.loss}: the embed task trains with {' or '.join(LOSSES)}")
        if self.pooling not in POOLINGS:
            raise BertkitError(f"--pooling {self.pooling}: choose one of {', '.join(POOLINGS)}")
        if self.loss == "cosent" and self.gradient_cache:
            raise BertkitError("--gradient-cache is for --loss mnrl (in-batch negatives); CoSENT compares the pairs of "
                               "a batch with each other, which GradCache does not split")
        if self.loss == "cosent" and self.symmetric:
            raise BertkitError("--symmetric is for --loss mnrl")
        if self.gradient_cache < 0 or self.scale <= 0:
            raise BertkitError("--gradient-cache must be >= 0 and --scale > 0")
        dims = tuple(int(d) for d in self.matryoshka)
        if any(d < 1 for d in dims) or len(set(dims)) != len(dims):
            raise BertkitError(f"--matryoshka {','.join(map(str, dims))}: expected distinct sizes >= 1, e.g. 384,256,128,64")
        self.matryoshka = tuple(sorted(dims, reverse=True))
        self.main_metric = self.main_metric or ("spearman" if self.loss == "cosent" else "ndcg@10")

    @property
    def metric_names(self) -> tuple[str, ...]:
        return ("pearson", "spearman", *metric_names())

    def read(self, path: str | Path, **fmt: Any) -> Dataset:
        """Gives the groups of a TSV / CSV / JSON-lines file (bertkit.tasks.groups); CoSENT needs scored pairs."""
        data = self.read_file(path, fmt, scores=True if self.loss == "cosent" else None)
        if self.loss == "cosent" and data.examples and data.examples[0].negatives:
            raise BertkitError(f"{path}: CoSENT trains on scored pairs, not groups with negatives")
        return data

    def labels(self, train: Dataset) -> list[str]:
        return []

    def featurize(self, data: Dataset, tok: Any, label2id: dict[str, int] | None, *,
                  max_seq_length: int | None = None) -> Features:
        """Gives one row a text (an example's anchor, positive, negatives in turn), each `[CLS] text [SEP]`
        truncated to `max_seq_length`; a scored pair's rows carry its score."""
        texts = [(i, t) for i, e in enumerate(data) for t in e.texts]
        encoded = tok.encode_batch([t for _, t in texts], max_length=max_seq_length or self.max_seq_length,
                                   truncation=True) if texts else []
        rows = []
        for (i, _), e in zip(texts, encoded, strict=True):
            row: dict[str, Any] = {"input_ids": e.ids, "token_type_ids": [0] * len(e.ids)}
            if data[i].score is not None:
                row["score"] = float(data[i].score)
            rows.append(row)
        return Features(rows, data, np.array([i for i, _ in texts], np.int64), [], tok.pad_token_id)

    def collate(self, rows: list[dict[str, Any]], pad_token_id: int = 0) -> dict[str, np.ndarray]:
        return pad_rows(rows, pad_token_id)

    def decode(self, features: Features, outputs: Any, **opts: Any) -> list[EmbedPrediction]:
        """Gives each example the vectors of its texts, from the rows' (rows, hidden) sentence embeddings."""
        vectors = np.concatenate([b[0] for b in output_batches(outputs, self.outputs)])
        return [EmbedPrediction(e, v) for e, v in zip(features.data, per_example(features, vectors), strict=True)]

    def score(self, data: Dataset, predictions: Sequence[EmbedPrediction]) -> dict[str, float]:
        """Scored pairs: Pearson and Spearman of the pairs' cosines (percent). Pairs and groups: each anchor's
        positives retrieved among every positive and negative text of the file."""
        if not predictions:
            return {}
        if kind_of(data) == "scored":
            cosines = [float(_unit(p.vectors[0]) @ _unit(p.vectors[1])) for p in predictions]
            gold = [float(p.example.score) for p in predictions]
            return {"pearson": pearson(gold, cosines), "spearman": spearman(gold, cosines)}
        scores = retrieval_scores(predictions)
        for d in self.matryoshka[1:]:
            scores[f"ndcg@10/{d}"] = retrieval_scores(predictions, d)["ndcg@10"]
        return scores

    def tuned_options(self, features: Features, outputs: Callable[[], Any]) -> dict[str, Any]:
        return {}

    def prediction_json(self, prediction: EmbedPrediction) -> dict[str, Any]:
        vector = _unit(prediction.vectors[:1])[0] if self.normalize_vectors else prediction.vectors[0]
        return {"text": prediction.example.anchor, "embedding": [round(float(x), 7) for x in vector]}

    def inputs_from_texts(self, texts: Sequence[str], pairs: Sequence[str] | None = None, **opts: Any) -> Dataset:
        if pairs is not None:
            raise BertkitError("an embedder takes one text an input")
        examples = [TextGroup(t, "", line=i + 1) for i, t in enumerate(texts)]
        return Dataset(examples, ReadReport("<input>", kept=len(examples)))

    def texts_of(self, example: TextGroup) -> tuple[str, str | None]:
        return example.anchor, example.positive or None

    @property
    def second(self) -> str | None:
        return None

    def check_input(self, item: Any, where: str) -> None:
        check_text(item, where)

    def split_inputs(self, items: Sequence[Any]) -> tuple[list[Any], list[str] | None]:
        return list(items), None

    def show_input(self, text: str, second: str | None) -> str:
        return text

    def show_prediction(self, prediction: dict[str, Any]) -> str:
        return f"a vector of {len(prediction.get('embedding', []))}"

    def matches(self, prediction: dict[str, Any], expected: str) -> bool:
        return False

    @property
    def input_schema(self) -> dict[str, Any]:
        return STRING

    @property
    def prediction_schema(self) -> dict[str, Any]:
        return obj({"text": {"type": "string"}, "embedding": {"type": "array", "items": {"type": "number"}}})

    def relevance(self, prediction: dict[str, Any], raw: bool = False) -> float | None:
        return None

    def reranks(self, labels: Sequence[str]) -> bool:
        return False

    def learner(self) -> Learner:
        from .encoders import EmbedLearner  # torch, for training only

        return EmbedLearner(self)


def _unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, np.float64)
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


def retrieval_scores(predictions: Sequence[EmbedPrediction], dims: int | None = None) -> dict[str, float]:
    """MRR@10, NDCG@10, Recall@1/10/100 (percent, as trec_eval) of retrieving each anchor's positives among every
    positive and negative text (each text once) by cosine of their first `dims` dimensions."""
    queries: dict[str, np.ndarray] = {}
    docs: dict[str, np.ndarray] = {}
    qrels: dict[str, dict[str, int]] = {}
    for p in predictions:
        texts = p.example.texts
        queries.setdefault(texts[0], p.vectors[0])
        for text, vector in zip(texts[1:], p.vectors[1:], strict=True):
            docs.setdefault(text, vector)
        qrels.setdefault(texts[0], {})[p.example.positive] = 1
    names = list(docs)
    q = _unit(np.stack(list(queries.values()))[:, :dims])
    d = _unit(np.stack([docs[n] for n in names])[:, :dims])
    run: dict[str, dict[str, float]] = {}
    k = min(100, len(names))
    for start in range(0, len(q), 1024):
        block = q[start : start + 1024] @ d.T
        top = np.argpartition(-block, k - 1, axis=1)[:, :k]
        for row, query in enumerate(list(queries)[start : start + 1024]):
            run[query] = {names[c]: float(block[row, c]) for c in top[row]}
    return mean_scores(rank_scores(run, qrels))


EMBED = Family("embed", EmbedTask, frozenset({"loss", "symmetric", "scale", "pooling", "normalize_vectors",
                                               "gradient_cache", "matryoshka"}),
               "sentence embeddings (a bi-encoder)", "sentence-similarity")
