"""Retrieval sets in BEIR's layout, and exact dense search over a whole corpus.

    data/corpus.jsonl      {"_id": "d1", "title": "...", "text": "..."} a line
    data/queries.jsonl     {"_id": "q1", "text": "..."} a line
    data/qrels/test.tsv    query-id <TAB> corpus-id <TAB> score (a header line is allowed)

    found = read_beir(Path("data"))
    run = dense_search(embedder, found.queries, found.corpus, top_k=100)   # query -> {doc: cosine}
    per_query = rank_scores(run, found.qrels)                              # bertkit.tasks.ranking
    means, per_query = evaluate_retrieval(found, embedder, rerank=scorer)  # the two, a reranker's too

A document is embedded as BEIR's sentence-transformers models embed it: its title and text joined by a space.
Search is exact: the corpus is embedded once (length-sorted batches), then every query is scored against every
document by cosine, a block of the corpus at a time, keeping each query's best `top_k`.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import BertkitError
from .fileio import read_utf8
from .tasks.ranking import mean_scores, rank_scores

Embed = Callable[[list[str]], np.ndarray]  # texts -> (N, H) vectors
Rerank = Callable[[list[tuple[str, str]]], np.ndarray]  # (query, passage) pairs -> (N,) relevance scores


@dataclass(frozen=True)
class RetrievalSet:
    corpus: dict[str, str]  # document id -> its text (title and text)
    queries: dict[str, str]  # query id -> its text
    qrels: dict[str, dict[str, int]]  # query id -> document id -> relevance grade


def _jsonl(path: Path, fields: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """Gives id -> record of a JSON-lines file whose records have a string `_id` and the string `fields`."""
    if not path.is_file():
        raise BertkitError(f"{path}: no such file (a BEIR folder holds corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv)")
    records: dict[str, dict[str, str]] = {}
    for n, line in enumerate(read_utf8(path, path.name).splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise BertkitError(f"{path} line {n}: invalid JSON ({e.msg})") from None
        if not isinstance(record, dict):
            raise BertkitError(f"{path} line {n}: expected a JSON object")
        for field in ("_id", *fields):
            if field == "title" and record.get(field) is None:
                record[field] = ""
            elif not isinstance(record.get(field), str):
                raise BertkitError(f"{path} line {n}: field '{field}' is missing or not a string")
        if record["_id"] in records:
            raise BertkitError(f"{path} line {n}: field '_id': {record['_id']!r} is given twice")
        records[record["_id"]] = record
    if not records:
        raise BertkitError(f"{path}: no records")
    return records


def _qrels(path: Path, queries: Mapping[str, str], corpus: Mapping[str, str]) -> dict[str, dict[str, int]]:
    if not path.is_file():
        raise BertkitError(f"{path}: no such file")
    qrels: dict[str, dict[str, int]] = {}
    rows = csv.reader(read_utf8(path, path.name).splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE)
    for n, row in enumerate(rows, 1):
        if not row or (n == 1 and row[:2] == ["query-id", "corpus-id"]):
            continue
        if len(row) != 3:
            raise BertkitError(f"{path} line {n}: expected query-id, corpus-id and score, tab-separated; got "
                               f"{len(row)} field(s)")
        query, doc, score = row
        if query not in queries:
            raise BertkitError(f"{path} line {n}: field 'query-id': {query!r} is not in queries.jsonl")
        if doc not in corpus:
            raise BertkitError(f"{path} line {n}: field 'corpus-id': {doc!r} is not in corpus.jsonl")
        try:
            grade = int(score)
        except ValueError:
            raise BertkitError(f"{path} line {n}: field 'score': {score!r} is not an integer") from None
        qrels.setdefault(query, {})[doc] = grade
    if not qrels:
        raise BertkitError(f"{path}: no judgments")
    return qrels


def read_beir(folder: Path, split: str = "test") -> RetrievalSet:
    """Gives the corpus, queries and judgments of a folder in BEIR's layout (`qrels/{split}.tsv`)."""
    if not folder.is_dir():
        raise BertkitError(f"{folder}: no such folder (a BEIR folder holds corpus.jsonl, queries.jsonl, qrels/)")
    docs = _jsonl(folder / "corpus.jsonl", ("title", "text"))
    corpus = {i: f"{d['title']} {d['text']}".strip() for i, d in docs.items()}
    queries = {i: q["text"] for i, q in _jsonl(folder / "queries.jsonl", ("text",)).items()}
    return RetrievalSet(corpus, queries, _qrels(folder / "qrels" / f"{split}.tsv", queries, corpus))


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Gives each row's k largest scores and their columns, best first: ((Q, k), (Q, k))."""
    k = min(k, scores.shape[1])
    cols = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    best = np.take_along_axis(scores, cols, axis=1)
    order = np.argsort(-best, axis=1, kind="stable")
    return np.take_along_axis(best, order, axis=1), np.take_along_axis(cols, order, axis=1)


def dense_search(embed: Embed, queries: Mapping[str, str], corpus: Mapping[str, str],
                 top_k_docs: int = 100, block: int = 65536) -> dict[str, dict[str, float]]:
    """Gives each query's `top_k_docs` documents by cosine of their vectors (`embed`: texts -> (N, H) vectors)."""
    doc_ids: Sequence[str] = list(corpus)
    unit = lambda v: v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)  # noqa: E731
    docs = unit(embed([corpus[d] for d in doc_ids]).astype(np.float32))
    query_ids = list(queries)
    q = unit(embed([queries[i] for i in query_ids]).astype(np.float32))
    best = np.full((len(q), 0), -np.inf, np.float32)
    where = np.zeros((len(q), 0), np.int64)
    for start in range(0, len(docs), block):  # a block of the corpus at a time: memory stays Q x block
        scores, cols = top_k(q @ docs[start : start + block].T, top_k_docs)
        best, pick = top_k(np.concatenate([best, scores], axis=1), top_k_docs)
        where = np.take_along_axis(np.concatenate([where, cols + start], axis=1), pick, axis=1)
    return {qid: {doc_ids[c]: float(s) for s, c in zip(best[i], where[i], strict=True)} for i, qid in enumerate(query_ids)}


def rerank_run(rerank: Rerank, run: Mapping[str, Mapping[str, float]], queries: Mapping[str, str],
               corpus: Mapping[str, str]) -> dict[str, dict[str, float]]:
    """Gives the run with each query's documents scored again by a cross-encoder, best first."""
    asked = [(q, d) for q, docs in run.items() for d in docs]
    scores = rerank([(queries[q], corpus[d]) for q, d in asked]).tolist()
    reranked: dict[str, dict[str, float]] = {q: {} for q in run}
    for (q, d), score in zip(asked, scores, strict=True):
        reranked[q][d] = float(score)
    return {q: dict(sorted(docs.items(), key=lambda item: -item[1])) for q, docs in reranked.items()}


def evaluate_retrieval(data: RetrievalSet, embed: Embed, top_k_docs: int = 100, rerank: Rerank | None = None
                       ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Gives the means and each query's MRR@10, NDCG@10 and Recall@1/10/100 of dense retrieval over the whole
    corpus for the judged queries, its top `top_k_docs` reranked by `rerank` where given."""
    queries = {q: data.queries[q] for q in data.qrels}
    run = dense_search(embed, queries, data.corpus, top_k_docs)
    if rerank is not None:
        run = rerank_run(rerank, run, queries, data.corpus)
    per_query = rank_scores(run, data.qrels)
    return mean_scores(per_query), per_query


def cross_encoder(pipe: Any) -> Rerank:
    """Gives a fine-tuned pair model's pipeline (bertkit.predict.Pipeline) as a reranker: the relevance its task
    reads off each (query, passage) prediction."""
    if not pipe.task.reranks(pipe.labels):
        raise BertkitError(f"a {pipe.task.name} model does not score (query, passage) pairs: rerank with a pair model")

    def rerank(pairs: list[tuple[str, str]]) -> np.ndarray:
        predictions = pipe([q for q, _ in pairs], [p for _, p in pairs])
        return np.array([pipe.task.relevance(p) for p in predictions], dtype=np.float64)

    return rerank
