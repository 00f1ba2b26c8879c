"""Ranking metrics against trec_eval itself (pytrec_eval): a small hand-made case with ties, graded and several
relevant documents, and random runs; plus the hand-worked figures of the smallest cases."""

from __future__ import annotations

import math
import random

import pytest

from bertkit.tasks.ranking import mean_scores, query_scores, rank_scores, ranked

pytrec_eval = pytest.importorskip("pytrec_eval")

RUN = {
    "q1": {"d1": 0.9, "d2": 0.8, "d3": 0.8, "d4": 0.1, "d5": 0.5},  # d2 and d3 tie
    "q2": {"d1": 0.3, "d2": 0.3, "d3": 0.3},  # all tie: the order is the ids' reverse
    "q3": {"d7": 1.0, "d8": 0.2},  # its relevant document is never retrieved
    "q4": {"d1": 0.5},  # judged, but nothing relevant: left out
    "q5": {"d1": 0.5},  # not judged: left out
}
QRELS = {
    "q1": {"d3": 2, "d5": 1, "d9": 1, "d4": 0},  # graded, several relevant, one never retrieved
    "q2": {"d1": 1},
    "q3": {"d6": 1},
    "q4": {"d1": 0},
}


def trec_eval(run: dict, qrels: dict) -> dict[str, dict[str, float]]:
    """The reference: trec_eval's recip_rank on the run cut at 10, ndcg_cut_10, recall_1/10/100, in percent."""
    measures = {"ndcg_cut.10", "recall.1,10,100"}
    full = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    top10 = {q: {d: docs[d] for d in ranked(docs)[:10]} for q, docs in run.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    return {q: {"mrr@10": 100 * rr[q]["recip_rank"], "ndcg@10": 100 * m["ndcg_cut_10"],
                "recall@1": 100 * m["recall_1"], "recall@10": 100 * m["recall_10"], "recall@100": 100 * m["recall_100"]}
            for q, m in full.items()}


def assert_equal_scores(ours: dict, ref: dict) -> None:
    assert ours.keys() == ref.keys()
    for q in ref:
        assert ours[q] == pytest.approx(ref[q], abs=1e-9), q


def test_the_hand_made_case_against_trec_eval() -> None:
    ours = rank_scores(RUN, QRELS)
    assert set(ours) == {"q1", "q2", "q3"}
    assert_equal_scores(ours, trec_eval({q: RUN[q] for q in ours}, {q: QRELS[q] for q in ours}))
    assert ranked(RUN["q2"]) == ["d3", "d2", "d1"]
    assert ours["q2"]["mrr@10"] == pytest.approx(100 / 3)
    # q1: ranking d1 d3 d2 d5 d4 (d3 before d2 on the tie); gains 0 2 0 1 0; ideal 2 1 1
    dcg = 2 / math.log2(3) + 1 / math.log2(5)
    idcg = 2 + 1 / math.log2(3) + 1 / math.log2(4)
    assert ours["q1"]["ndcg@10"] == pytest.approx(100 * dcg / idcg)
    assert ours["q1"]["recall@10"] == pytest.approx(200 / 3) and ours["q1"]["mrr@10"] == 50.0
    assert ours["q3"] == {"mrr@10": 0.0, "ndcg@10": 0.0, "recall@1": 0.0, "recall@10": 0.0, "recall@100": 0.0}
    means = mean_scores(ours)
    assert means["mrr@10"] == pytest.approx((50 + 100 / 3 + 0) / 3)


def test_random_runs_against_trec_eval() -> None:
    rng = random.Random(0)
    docs = [f"doc{i:03d}" for i in range(150)]
    run = {f"q{i}": {d: round(rng.random(), 1) for d in rng.sample(docs, 120)} for i in range(40)}  # many ties
    qrels = {q: {d: rng.choice([0, 1, 1, 2, 3]) for d in rng.sample(docs, rng.randint(1, 15))} for q in run}
    qrels = {q: g for q, g in qrels.items() if any(v >= 1 for v in g.values())}
    assert_equal_scores(rank_scores(run, qrels), trec_eval({q: run[q] for q in qrels}, qrels))


def test_a_query_missing_from_the_run_scores_zero() -> None:
    assert rank_scores({}, {"q": {"d": 1}}) == {"q": query_scores([], {"d": 1})}
    assert mean_scores(rank_scores({}, {"q": {"d": 1}}))["ndcg@10"] == 0.0
    assert mean_scores({}) == {}
