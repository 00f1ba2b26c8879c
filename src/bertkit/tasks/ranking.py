"""Ranking metrics as trec_eval computes them (the reference BEIR and MS MARCO scores go through), in percent:
MRR@k, NDCG@k and Recall@k of a run (query -> document -> score) against relevance judgments (query -> document
-> grade).

trec_eval's conventions, kept exactly: documents are ranked by score, ties broken by document id in reverse
string order; a document is relevant when its grade is at least 1; NDCG's gain is the grade itself (not 2^grade
- 1) over log2(rank + 1), its ideal ranking made from every judged document; a query without a relevant
document is left out of the means (trec_eval only scores the queries it has judgments for).

    per_query = rank_scores(run, qrels)                 # {query: {"ndcg@10": ..., "mrr@10": ..., ...}}
    means = mean_scores(per_query)                      # {"ndcg@10": ..., ...}
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]

CUTOFFS = (1, 10, 100)


def ranked(scores: Mapping[str, float]) -> list[str]:
    """Gives the documents best first, ties in reverse order of their ids (as trec_eval breaks them)."""
    return sorted(scores, key=lambda doc: (scores[doc], doc), reverse=True)


def metric_names(cutoffs: Iterable[int] = CUTOFFS) -> list[str]:
    cutoffs = sorted(set(cutoffs))
    return ["mrr@10", "ndcg@10", *(f"recall@{k}" for k in cutoffs)]


def query_scores(ranking: list[str], grades: Mapping[str, int], cutoffs: Iterable[int] = CUTOFFS) -> dict[str, float]:
    """Gives one query's MRR@10, NDCG@10 and Recall@k (percent) for a ranking (best first) and its judgments."""
    relevant = {doc for doc, grade in grades.items() if grade >= 1}
    first = next((i for i, doc in enumerate(ranking[:10]) if doc in relevant), None)
    dcg = sum(max(grades.get(doc, 0), 0) / math.log2(i + 2) for i, doc in enumerate(ranking[:10]))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:10]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    scores = {"mrr@10": 0.0 if first is None else 100.0 / (first + 1), "ndcg@10": 100.0 * dcg / idcg if idcg else 0.0}
    for k in sorted(set(cutoffs)):
        scores[f"recall@{k}"] = 100.0 * len(relevant.intersection(ranking[:k])) / len(relevant) if relevant else 0.0
    return scores


def rank_scores(run: Run, qrels: Qrels, cutoffs: Iterable[int] = CUTOFFS) -> dict[str, dict[str, float]]:
    """Gives each judged query's scores (a query the run misses scores 0); queries without a relevant document,
    and the run's queries nobody judged, are left out."""
    return {query: query_scores(ranked(run.get(query, {})), grades, cutoffs)
            for query, grades in qrels.items() if any(g >= 1 for g in grades.values())}


def mean_scores(per_query: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Gives each metric's mean over the queries (an empty dict for no query)."""
    if not per_query:
        return {}
    names = next(iter(per_query.values())).keys()
    return {name: sum(s[name] for s in per_query.values()) / len(per_query) for name in names}
