"""Retrieval sets in BEIR's layout and exact dense search: the reader against hand-made folders (bad lines named
by file, line and field), the blockwise search against a full sort and against sentence-transformers'
semantic_search, and MiniLM finding paraphrases' documents."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertkit.errors import BertkitError
from bertkit.retrieval import dense_search, read_beir, top_k
from bertkit.tasks.ranking import mean_scores, rank_scores

DOCS = {
    "d1": ("Guitar", "A man is playing a guitar on the stage."),
    "d2": ("Cooking", "She is slicing onions in the kitchen for dinner."),
    "d3": ("", "The cat sleeps on the warm windowsill all afternoon."),
    "d4": ("Football", "The striker scored twice in the final minutes of the match."),
    "d5": ("Weather", "Heavy rain and strong winds are expected tomorrow morning."),
}
QUERIES = {"q1": "someone plays an instrument", "q2": "preparing vegetables for a meal", "q3": "a kitten napping",
           "q4": "goals in a soccer game", "q5": "storm forecast", "q6": "a query nobody judged"}


def beir(folder: Path, qrels: str = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td3\t1\nq4\td4\t1\nq5\td5\t2\n",
         corpus: list[dict] | None = None) -> Path:
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    corpus = corpus or [{"_id": i, "title": t, "text": x} for i, (t, x) in DOCS.items()]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in QUERIES.items()),
                                          encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text(qrels, encoding="utf-8")
    return folder


def test_the_reader_joins_title_and_text_and_reads_grades(tmp_path: Path) -> None:
    found = read_beir(beir(tmp_path))
    assert found.corpus["d1"] == "Guitar A man is playing a guitar on the stage."
    assert found.corpus["d3"] == "The cat sleeps on the warm windowsill all afternoon."  # no title: no leading space
    assert found.queries["q6"] == "a query nobody judged"
    assert found.qrels == {"q1": {"d1": 1}, "q2": {"d2": 1}, "q3": {"d3": 1}, "q4": {"d4": 1}, "q5": {"d5": 2}}


@pytest.mark.parametrize(("qrels", "corpus", "message"), [
    ("q1\td9\t1\n", None, r"qrels/test\.tsv line 1: field 'corpus-id': 'd9' is not in corpus\.jsonl"),
    ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq7\td1\t1\n", None, r"test\.tsv line 3: field 'query-id': 'q7' is not in"),
    ("q1\td1\thigh\n", None, r"test\.tsv line 1: field 'score': 'high' is not an integer"),
    ("q1 d1 1\n", None, r"test\.tsv line 1: expected query-id, corpus-id and score, tab-separated"),
    ("q1\td1\t1\n", [{"_id": "d1", "text": "a"}, {"_id": "d1", "text": "b"}], r"corpus\.jsonl line 2: field '_id'"),
    ("q1\td1\t1\n", [{"_id": "d1"}], r"corpus\.jsonl line 1: field 'text' is missing or not a string"),
    ("", None, r"qrels/test\.tsv: no judgments"),
])
def test_bad_lines_are_named_by_file_line_and_field(tmp_path: Path, qrels: str, corpus: list | None, message: str) -> None:
    with pytest.raises(BertkitError, match=message):
        read_beir(beir(tmp_path, qrels, corpus))


def test_a_missing_file_or_bad_json_is_named(tmp_path: Path) -> None:
    folder = beir(tmp_path)
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "a"}\n{"_id": \n', encoding="utf-8")
    with pytest.raises(BertkitError, match=r"queries\.jsonl line 2: invalid JSON"):
        read_beir(folder)
    (folder / "queries.jsonl").unlink()
    with pytest.raises(BertkitError, match=r"queries\.jsonl: no such file"):
        read_beir(folder)
    with pytest.raises(BertkitError, match=r"qrels/dev\.tsv: no such file"):
        read_beir(beir(tmp_path / "b"), split="dev")


def test_blockwise_search_equals_a_full_sort() -> None:
    rng = np.random.default_rng(0)
    vectors = {f"t{i}": rng.normal(size=8).astype(np.float32) for i in range(300)}
    corpus = {f"d{i}": f"t{i}" for i in range(250)}
    queries = {f"q{i}": f"t{i + 250}" for i in range(50)}
    embed = lambda texts: np.stack([vectors[t] for t in texts])  # noqa: E731
    run = dense_search(embed, queries, corpus, top_k_docs=30, block=7)
    unit = {t: v / np.linalg.norm(v) for t, v in vectors.items()}
    for q, text in queries.items():
        scores = {d: float(unit[text] @ unit[t]) for d, t in corpus.items()}
        expected = sorted(scores, key=scores.get, reverse=True)[:30]  # type: ignore[arg-type]
        assert list(run[q]) == expected
        assert list(run[q].values()) == pytest.approx([scores[d] for d in expected], abs=1e-6)
    best, cols = top_k(np.array([[0.1, 0.9, 0.5]]), 5)  # k past the columns: all of them
    assert cols.tolist() == [[1, 2, 0]] and best.tolist() == [[0.9, 0.5, 0.1]]


def test_minilm_finds_each_paraphrases_document_as_semantic_search_does(shared_data: Path, tmp_path: Path) -> None:
    from sentence_transformers.util import semantic_search

    from bertkit.embed import Embedder

    found = read_beir(beir(tmp_path))
    embedder = Embedder(shared_data / "models" / "all-MiniLM-L6-v2", normalize=True)
    run = dense_search(embedder, found.queries, found.corpus, top_k_docs=3, block=2)
    assert mean_scores(rank_scores(run, found.qrels))["ndcg@10"] == 100.0
    import torch

    doc_ids, query_ids = list(found.corpus), list(found.queries)
    hits = semantic_search(torch.from_numpy(embedder([found.queries[q] for q in query_ids])),
                           torch.from_numpy(embedder([found.corpus[d] for d in doc_ids])), top_k=3)
    for q, ranked_hits in zip(query_ids, hits, strict=True):
        assert list(run[q]) == [doc_ids[h["corpus_id"]] for h in ranked_hits]
        assert list(run[q].values()) == pytest.approx([h["score"] for h in ranked_hits], abs=1e-5)


def test_bertkit_evaluate_on_a_beir_folder_dense_and_reranked(shared_data: Path, task_models: dict[str, Path],
                                                              tmp_path: Path, capsys) -> None:
    from bertkit.cli import main
    from bertkit.embed import Embedder
    from bertkit.predict import pipeline
    from bertkit.retrieval import cross_encoder, evaluate_retrieval

    minilm, folder = shared_data / "models" / "all-MiniLM-L6-v2", beir(tmp_path / "beir")
    assert main(["evaluate", "--model", str(minilm), "--data", str(folder), "--per-query", str(tmp_path / "q.jsonl")]) == 0
    dense = json.loads(capsys.readouterr().out)
    assert (dense["queries"], dense["documents"], dense["reranked"]) == (5, 5, None)  # q6 has no judgment
    assert dense["ndcg@10"] == dense["mrr@10"] == dense["recall@1"] == 100.0
    lines = [json.loads(line) for line in (tmp_path / "q.jsonl").read_text().splitlines()]
    assert [r["query"] for r in lines] == ["q1", "q2", "q3", "q4", "q5"] and lines[0]["ndcg@10"] == 100.0

    # a (random, tiny) pair model reranks MiniLM's top 3: what evaluate_retrieval gives with the same parts
    assert main(["evaluate", "--model", str(task_models["pair"]), "--data", str(folder), "--first-stage", str(minilm),
                 "--top-k", "3"]) == 0
    reranked = json.loads(capsys.readouterr().out)
    means, _ = evaluate_retrieval(read_beir(folder), Embedder(minilm), 3, cross_encoder(pipeline(task_models["pair"])))
    assert reranked["reranked"] == 3 and {k: reranked[k] for k in means} == means
    assert reranked["recall@10"] == 100.0  # reranking 3 keeps what the first stage found

    assert main(["evaluate", "--model", str(task_models["ner"]), "--data", str(folder), "--first-stage", str(minilm)]) == 2
    assert "a ner model does not score (query, passage) pairs" in capsys.readouterr().err
