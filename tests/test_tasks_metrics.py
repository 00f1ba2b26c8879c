"""Metrics against hand-computed values, against sklearn / scipy / seqeval (the dev extra installs them: a
missing reference fails here rather than skipping), and the tag-scheme conversions on the real CoNLL-2003
and MSRA tags."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from seqeval import metrics as seqeval
from seqeval.scheme import IOBES
from sklearn import metrics as sklearn_metrics

from bertkit.schemes import (
    allowed_transitions,
    convert,
    detect_scheme,
    entities,
    strict_entities,
    tag_set,
    to_tags,
)
from bertkit.tasks import metrics as M
from bertkit.tasks import read_conll

# ---------------------------------------------------------------------------------------------------
# Classification and regression


def test_classification_metrics_by_hand():
    gold = ["1", "1", "0", "0", "1", "0"]
    pred = ["1", "0", "0", "1", "1", "0"]
    assert M.accuracy(gold, pred) == pytest.approx(100 * 4 / 6)
    # positive "1": tp 2, fp 1, fn 1 -> F1 = 2*2 / (2*2 + 1 + 1)
    assert M.f1_binary(gold, pred, "1") == pytest.approx(100 * 4 / 6)
    # MCC = (tp*tn - fp*fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)) = (4 - 1) / 9
    assert M.matthews(gold, pred) == pytest.approx(100 / 3)
    assert M.matthews(["a", "a"], ["a", "a"]) == 0.0  # undefined: 0, as sklearn
    assert M.positive_label(["entailment", "not_entailment"]) == "not_entailment"
    assert M.positive_label(["negative", "positive"]) == "positive"
    assert M.pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(100)
    assert M.spearman([1, 2, 3, 4], [10, 20, 20, 40]) == pytest.approx(100 * 0.9486832980505138)
    assert list(M.ranks([3, 1, 3, 2])) == [3.5, 1, 3.5, 2]


def test_classification_metrics_match_sklearn_and_scipy():
    rng = np.random.default_rng(0)
    for k in (2, 3, 5):
        gold = [str(x) for x in rng.integers(0, k, 500)]
        pred = [g if rng.random() < 0.6 else str(rng.integers(0, k)) for g in gold]
        assert M.accuracy(gold, pred) == pytest.approx(100 * sklearn_metrics.accuracy_score(gold, pred))
        assert M.matthews(gold, pred) == pytest.approx(100 * sklearn_metrics.matthews_corrcoef(gold, pred))
        labels = sorted(set(gold))
        assert M.f1_macro(gold, pred, labels) == pytest.approx(
            100 * sklearn_metrics.f1_score(gold, pred, average="macro", labels=labels))
        assert M.f1_binary(gold, pred, "1") == pytest.approx(
            100 * sklearn_metrics.f1_score(gold, pred, labels=["1"], average="macro"))
    x = rng.normal(size=300)
    y = x + rng.normal(size=300)
    y[:50] = np.round(y[:50])  # ties
    assert M.pearson(x, y) == pytest.approx(100 * stats.pearsonr(x, y).statistic)
    assert M.spearman(np.round(x, 1), y) == pytest.approx(100 * stats.spearmanr(np.round(x, 1), y).statistic)


# ---------------------------------------------------------------------------------------------------
# QA


def test_squad_metrics_by_hand():
    assert M.squad_normalize("The  Denver Broncos!") == "denver broncos"
    assert M.squad_f1("Denver Broncos team", "the Denver Broncos") == pytest.approx(0.8)
    scores = M.squad_scores([["Denver Broncos", "Broncos"], ["Carolina"]], ["the broncos", "Panthers"])
    assert scores == {"exact_match": 50.0, "f1": 50.0}
    v2 = M.squad_scores([[], ["Paris"]], ["", ""], v2=True)
    assert v2["exact_match"] == 50.0 and v2["no_ans_exact_match"] == 100.0 and v2["has_ans_f1"] == 0.0
    assert M.squad_scores([["Paris"]], [""])["f1"] == 0.0


def test_cmrc_metrics_by_hand():
    # the official segmentation: one segment per Chinese character, other runs as words, punctuation dropped
    assert M.cmrc_segments("光荣和ω-force", drop_punct=True) == ["光", "荣", "和", "ωforce"]
    assert M.cmrc_segments("《战国无双3》", drop_punct=False) == ["《", "战", "国", "无", "双", "3", "》"]
    assert M.cmrc_f1("光荣和ω", "光荣和ω-force") == pytest.approx(0.75)  # LCS 3 of 4 and 4
    assert M.cmrc_f1("1998年", "1998年3月") == pytest.approx(2 * (2 / 2) * (2 / 4) / (1 + 2 / 4))
    # longest common *substring*, not subsequence: "abcd" vs "abxcd" share "ab" or "cd"
    assert M.longest_common_substring(list("甲乙丙丁"), list("甲乙戊丙丁")) == 2
    scores = M.cmrc_scores([["《战国无双3》"], ["光荣"], ["北京"]], ["战国无双3", "光荣和", None])
    assert scores["exact_match"] == pytest.approx(100 / 3)  # punctuation ignored for EM; a missing one counts 0
    assert scores["f1"] == pytest.approx(100 * (1 + 0.8) / 3)
    assert scores["average"] == pytest.approx((scores["f1"] + scores["exact_match"]) / 2)


# ---------------------------------------------------------------------------------------------------
# NER


@pytest.fixture(scope="module")
def conll_tags(shared_data: Path) -> list[list[str]]:
    return [list(e.tags) for e in read_conll(shared_data / "conll2003" / "eng.testa")][:1500]  # seqeval is slow


@pytest.fixture(scope="module")
def msra_tags(shared_data: Path) -> list[list[str]]:
    return [list(e.tags) for e in read_conll(shared_data / "msra_ner" / "test.bio.txt")][:1500]


def _corrupt(seqs: list[list[str]], labels: list[str], rate: float, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(labels) if rng.random() < rate else t for t in s] for s in seqs]


def test_scheme_round_trips_on_conll(shared_data: Path):
    train = [list(e.tags) for e in read_conll(shared_data / "conll2003" / "eng.train")]
    assert detect_scheme(train) == "IOB1"
    bio = [convert(t, "BIO", "IOB1") for t in train]
    bioes = [convert(t, "BIOES", "BIO") for t in bio]
    assert detect_scheme(bio) == "BIO" and detect_scheme(bioes) == "BIOES"
    assert [convert(t, "BIO", "BIOES") for t in bioes] == bio
    assert [convert(t, "IOB1", "BIO") for t in bio] == train
    assert all(entities(a) == entities(b) for a, b in zip(train, bioes, strict=True))
    # every converted sequence is well formed: strict reading finds every chunk
    assert all(strict_entities(t, "BIOES") == entities(t) for t in bioes)
    assert all(strict_entities(t, "BIO") == entities(t) for t in bio)


def test_scheme_conversions_by_hand():
    iob1 = ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"]
    assert convert(iob1, "BIO") == ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG"]
    assert convert(iob1, "BIOES") == ["B-PER", "E-PER", "S-PER", "O", "S-LOC", "S-ORG"]
    assert to_tags([("PER", 0, 2), ("PER", 2, 3)], 3, "IOB1") == iob1[:3]
    assert strict_entities(["B-PER", "I-PER", "O", "I-LOC", "S-ORG"], "BIOES") == [("ORG", 4, 5)]
    assert strict_entities(["I-PER", "B-LOC", "I-LOC"], "BIO") == [("LOC", 1, 3)]


def test_allowed_transitions_admit_every_gold_sequence(msra_tags: list[list[str]]):
    for scheme in ("BIO", "BIOES"):
        labels = tag_set(["LOC", "ORG", "PER"], scheme)
        start, follow, end = allowed_transitions(labels, scheme)
        index = {t: i for i, t in enumerate(labels)}
        for tags in msra_tags[:500]:
            ids = [index[t] for t in convert(tags, scheme)]
            assert start[ids[0]] and end[ids[-1]]
            assert all(follow[a, b] for a, b in itertools.pairwise(ids))
        assert not follow[index["O"], index["I-PER"]]
        assert not follow[index["B-PER"], index["I-LOC"]]
    assert not allowed_transitions(tag_set(["PER"], "BIOES"), "BIOES")[2][1]  # no sentence ends on B-


def test_entity_f1_by_hand():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "O"], ["B-ORG", "B-ORG"]]
    report = M.entity_report(gold, pred)
    assert report["overall"]["precision"] == pytest.approx(200 / 3)
    assert report["overall"]["recall"] == pytest.approx(200 / 3)
    assert report["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1.0}
    assert M.entity_scores(gold, pred)["f1/PER"] == 100.0


@pytest.mark.parametrize("scheme", ["IOB1", "BIO", "BIOES"])
def test_entity_scores_equal_seqeval_on_corrupted_conll(conll_tags: list[list[str]], scheme: str):
    gold = [convert(t, scheme, "IOB1") for t in conll_tags]
    labels = tag_set(["LOC", "MISC", "ORG", "PER"], scheme)
    for seed, rate in ((0, 0.05), (1, 0.3)):
        pred = _corrupt(gold, labels, rate, seed)
        ours = M.entity_report(gold, pred)
        assert ours["overall"]["f1"] == pytest.approx(100 * seqeval.f1_score(gold, pred))
        assert ours["overall"]["precision"] == pytest.approx(100 * seqeval.precision_score(gold, pred))
        assert ours["overall"]["recall"] == pytest.approx(100 * seqeval.recall_score(gold, pred))
        theirs = seqeval.classification_report(gold, pred, output_dict=True)
        for kind in ("LOC", "MISC", "ORG", "PER"):
            assert ours[kind]["f1"] == pytest.approx(100 * theirs[kind]["f1-score"])
            assert ours[kind]["support"] == theirs[kind]["support"]


def test_entity_scores_equal_seqeval_strict_bioes_on_msra(msra_tags: list[list[str]]):
    gold = [convert(t, "BIOES", "BIO") for t in msra_tags]
    labels = tag_set(["LOC", "ORG", "PER"], "BIOES")
    pred = _corrupt(gold, labels, 0.05, seed=2)
    ours = M.entity_report(gold, pred, strict_scheme="BIOES")
    theirs = seqeval.f1_score(gold, pred, mode="strict", scheme=IOBES)
    assert ours["overall"]["f1"] == pytest.approx(100 * theirs)
    lenient = M.entity_report(gold, pred)["overall"]["f1"]
    assert lenient == pytest.approx(100 * seqeval.f1_score(gold, pred)) and lenient != ours["overall"]["f1"]
    per_type = seqeval.classification_report(gold, pred, mode="strict", scheme=IOBES, output_dict=True)
    for kind in ("LOC", "ORG", "PER"):
        assert ours[kind]["precision"] == pytest.approx(100 * per_type[kind]["precision"])
        assert ours[kind]["recall"] == pytest.approx(100 * per_type[kind]["recall"])
