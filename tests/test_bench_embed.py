"""bench/embed.py's own code: its data sets, its one scoring function and its table (the runs themselves take
most of an hour and live in bench/, not in the test suite)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench import embed


class OneHot:
    """A stand-in SentenceTransformer: a text's vector is the one-hot of its key (texts with one key match)."""

    def __init__(self, key):
        self.key = key

    def encode(self, texts, **_):
        keys = sorted({self.key(t) for t in texts})
        return np.stack([np.eye(len(keys))[keys.index(self.key(t))] for t in texts])


def test_score_model_retrieves_and_correlates_as_the_embed_task() -> None:
    groups = [embed.Example(f"q{i}", f"d{i}", (f"d{(i + 1) % 3}",)) for i in range(3)]
    assert embed.score_model(OneHot(lambda t: t[1:]), "mnrl", groups)["ndcg@10"] == 100.0
    pairs = [embed.Example("a", "a", score=1.0), embed.Example("b", "c", score=0.0), embed.Example("d", "d", score=1.0)]
    assert embed.score_model(OneHot(lambda t: t), "cosent", pairs)["spearman"] == 100.0


def test_jsonl_round_trip(tmp_path: Path) -> None:
    rows = [embed.Example("a", "b", ("c", "d")), embed.Example("e", "f", ("g", "h"))]
    scored = [embed.Example("x\ty", "z", score=1.0)]
    for i, examples in enumerate((rows, scored)):
        embed.write_jsonl(tmp_path / f"{i}.jsonl", examples)
        assert embed.read_jsonl(tmp_path / f"{i}.jsonl") == examples


def test_splits_are_disjoint_and_groups_well_formed(shared_data: Path) -> None:
    squad = embed.squad(42)
    assert squad.about["train_articles"] == 38 and not {e.positive for e in squad.train} & {e.positive for e in squad.dev_eval}
    ocnli = embed.ocnli(42)
    assert len(ocnli.train) == 2071 and all(len(e.negatives) == 1 for e in ocnli.train + ocnli.dev_file)
    assert all(e.positive not in e.negatives for e in ocnli.dev_eval)
    mrpc = embed.mrpc(42)
    assert (len(mrpc.train), len(mrpc.dev_eval)) == (4076, 1725) and {e.score for e in mrpc.train} == {0.0, 1.0}


def test_table_and_targets() -> None:
    side = {"dev": {"ndcg@10": 80.0}, "train_s": 100.0, "process_s": 110.0}
    task = {"title": "T", "metric": "ndcg@10", "train_examples": 10, "untrained": {"ndcg@10": 75.0},
            "bertkit": side, "sentence_transformers": {**side, "dev": {"ndcg@10": 80.25}, "train_s": 250.0},
            "difference": -0.25, "time_ratio": 0.4, "process_ratio": 110 / 260}
    result = {"tasks": {"squad": task}}
    assert embed.markdown(result).splitlines()[2] == (
        "| squad: T | 10 | ndcg@10 | 75.00 | 80.00 | 80.25 | -0.25 | 100 s | 250 s | 0.40x | 0.42x |")
    assert all(v["met"] for v in embed.targets(result).values())
