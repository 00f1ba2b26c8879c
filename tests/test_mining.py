"""Hard-negative mining on a tiny corpus with a known answer: an embedder whose cosines are set by hand ranks the
passages, the anchor's own positives are left out, the range is a slice of what remains, the reranker drops a
candidate within the margin of the positive, an anchor with too few negatives is dropped; the groups file reads
back; MiniLM mines sensible negatives from real sentences."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from bertkit.errors import BertkitError
from bertkit.mining import mine, write_groups

# each text at an angle: an anchor at 0 degrees ranks passages by their angle's nearness to 0
ANGLES = {"anchor a": 0, "pos a": 5, "p10": 10, "p20": 20, "p30": 30, "p40": 40, "p50": 50, "p60": 60,
          "anchor b": 180, "pos b": 175, "pos b2": 170}


def embed(texts: list[str]) -> np.ndarray:
    return np.array([[math.cos(math.radians(ANGLES[t])), math.sin(math.radians(ANGLES[t]))] for t in texts])


PAIRS = [("anchor a", "pos a"), ("anchor b", "pos b"), ("anchor b", "pos b2")]
CORPUS = ["p10", "p20", "p30", "p40", "p50", "p60"]


def test_the_range_is_a_slice_of_the_ranking_without_the_anchors_positives() -> None:
    found = mine(embed, PAIRS, negatives=2, ranks=(1, 4), corpus=CORPUS)
    # anchor a ranks: p10 p20 p30 p40 p50 p60 ... (pos a left out); 1:4 -> p20 p30 p40
    assert found.groups[0] == ("anchor a", "pos a", ["p20", "p30"])
    # anchor b ranks pos b, pos b2 (both its own: left out), then p60 p50 p40 ...; 1:4 -> p50 p40 p30
    assert found.groups[1:] == [("anchor b", "pos b", ["p50", "p40"]), ("anchor b", "pos b2", ["p50", "p40"])]
    assert (found.dropped, found.reranked_out) == (0, 0)


def test_the_reranker_drops_a_candidate_within_the_margin_of_the_positive() -> None:
    def rerank(pairs: list[tuple[str, str]]) -> np.ndarray:  # p20 is, in truth, as relevant to anchor a as pos a
        return np.array([0.9 if p in ("pos a", "p20") else 0.75 if p == "p30" else 0.1 for _, p in pairs])

    found = mine(embed, PAIRS[:1], negatives=2, ranks=(1, 4), corpus=CORPUS, rerank=rerank, margin=0.1)
    assert found.groups == [("anchor a", "pos a", ["p30", "p40"])]  # p30 at 0.75 < 0.9 - 0.1 stays
    assert found.reranked_out == 1
    found = mine(embed, PAIRS[:1], negatives=2, ranks=(1, 4), corpus=CORPUS, rerank=rerank, margin=0.2)
    assert found.groups == [] and found.dropped == 1 and found.reranked_out == 2  # p30 too, then only p40 left


def test_the_groups_file_reads_back(tmp_path: Path) -> None:
    groups = mine(embed, PAIRS, negatives=2, ranks=(0, 3), corpus=CORPUS).groups
    write_groups(tmp_path / "g.tsv", groups)
    rows = list(csv.reader((tmp_path / "g.tsv").open(encoding="utf-8"), delimiter="\t"))
    assert rows[0] == ["anchor", "positive", "negative_1", "negative_2"]
    assert rows[1] == ["anchor a", "pos a", "p10", "p20"]
    write_groups(tmp_path / "g.jsonl", groups)
    first = json.loads((tmp_path / "g.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert first == {"anchor": "anchor a", "positive": "pos a", "negative_1": "p10", "negative_2": "p20"}
    with pytest.raises(BertkitError, match=r"g2\.tsv: the text 'a\\tb'.* holds a tab"):
        write_groups(tmp_path / "g2.tsv", [("a\tb", "c", ["d"])])
    with pytest.raises(BertkitError, match="need 0 <= start < end"):
        mine(embed, PAIRS, ranks=(5, 5))


def test_minilm_mines_negatives_that_are_near_but_not_the_positive(shared_data: Path) -> None:
    from bertkit.embed import Embedder

    pairs = [("How do I bake bread?", "Mix flour, water and yeast, let it rise, then bake it for forty minutes."),
             ("Who won the football match?", "The home team won the match two goals to one."),
             ("What is the capital of France?", "Paris is the capital and largest city of France.")]
    corpus = ["Sourdough bread needs a starter and a long rise before baking.", "Berlin is the capital of Germany.",
              "The away side lost the football game after a late penalty.", "Cats sleep for most of the day.",
              "Preheat the oven before you bake a cake.", "Madrid is the capital of Spain."]
    found = mine(Embedder(shared_data / "models" / "all-MiniLM-L6-v2"), pairs, negatives=1, ranks=(0, 3), corpus=corpus)
    mined = [negs[0] for _, _, negs in found.groups]
    assert mined[:2] == ["Sourdough bread needs a starter and a long rise before baking.",
                         "The away side lost the football game after a late penalty."]
    assert mined[2] in ("Berlin is the capital of Germany.", "Madrid is the capital of Spain.")
