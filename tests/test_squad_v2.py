"""SQuAD 2.0: the null-score threshold searched on dev as the official evaluate-v2.0.py does, saved with the
model, overridden by --null-threshold, and HasAns / NoAns scores reported apart."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bertkit import settings
from bertkit.cli import main
from bertkit.finetune import FinetuneSettings, finetune
from bertkit.predict import pipeline
from bertkit.tasks import QAExample, QAPrediction
from bertkit.tasks.base import Dataset, ReadReport
from bertkit.tasks.metrics import squad_f1, squad_normalize
from bertkit.tasks.qa import best_null_threshold


def find_best_thresh(preds: dict, scores: dict, na_probs: dict, qid_to_has_ans: dict) -> tuple[float, float]:
    """evaluate-v2.0.py's find_best_thresh, as published with SQuAD 2.0 (the reference)."""
    num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
    cur_score = num_no_ans
    best_score = cur_score
    best_thresh = 0.0
    qid_list = sorted(na_probs, key=lambda k: na_probs[k])
    for qid in qid_list:
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            diff = scores[qid]
        elif preds[qid]:
            diff = -1
        else:
            diff = 0
        cur_score += diff
        if cur_score > best_score:
            best_score = cur_score
            best_thresh = na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def test_the_threshold_search_is_the_official_one() -> None:
    rng = random.Random(0)
    words = ["clara", "berkeley", "red", "the house", "two", "a cat"]
    examples, predictions = [], []
    for i in range(300):
        impossible = rng.random() < 0.4
        gold = () if impossible else (rng.choice(words),)
        e = QAExample(f"q{i}", "?", " ".join(words), (), gold, impossible, None)
        best = rng.choice(words) if rng.random() < 0.7 or impossible else "nothing here"
        diff = rng.gauss(1.0 if impossible else -1.0, 1.5)
        examples.append(e)
        predictions.append(QAPrediction(e, best, 0, 1, 0.0, diff, [{"text": best, "score": 0.0}]))
    data = Dataset(examples, ReadReport("<test>"), impossible=sum(e.is_impossible for e in examples))
    ours = best_null_threshold(data, predictions)
    # the official script reads each question's best non-null answer and its F1, and the null-score differences
    f1 = {e.qid: max(squad_f1(p.nbest[0]["text"], g, v2=True) for g in (e.gold_texts or ("",)))
          for e, p in zip(examples, predictions, strict=True)}
    has_ans = {e.qid: bool([g for g in e.gold_texts if squad_normalize(g)]) for e in examples}
    _, theirs = find_best_thresh({e.qid: p.nbest[0]["text"] for e, p in zip(examples, predictions, strict=True)}, f1,
                                 {e.qid: p.null_score_diff for e, p in zip(examples, predictions, strict=True)}, has_ans)
    assert ours == theirs and ours != 0.0


def squad_v2(source: Path, path: Path, questions: int, seed: int, offset: int) -> Path:
    """A SQuAD 2.0-style file from SQuAD 1.1: every third question asked of another article's paragraph,
    with no answer (is_impossible), the rest as they are."""
    articles = json.loads(source.read_text(encoding="utf-8"))["data"]
    paragraphs = [p for a in articles for p in a["paragraphs"]]
    rng = random.Random(seed)
    out, n = [], 0
    for k, para in enumerate(paragraphs[offset:]):
        qas = []
        for qa in para["qas"]:
            if n % 3 == 2:
                other = paragraphs[(offset + k + 37) % len(paragraphs)]
                out.append({"context": other["context"], "qas": [{**qa, "id": qa["id"] + "-x", "answers": [],
                                                                  "is_impossible": True}]})
            else:
                qas.append(qa)
            n += 1
        if qas:
            out.append({"context": para["context"], "qas": qas})
        if n >= questions:
            break
    rng.shuffle(out)
    path.write_text(json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": out}]}), encoding="utf-8")
    return path


@pytest.mark.slow
def test_fine_tuning_searches_the_threshold_and_saves_it(tmp_path: Path, builtin_data: Path, tiny_model: Path,
                                                         capsys) -> None:
    train = squad_v2(builtin_data / "qa/train.json", tmp_path / "train.json", 120, 0, 0)
    dev = squad_v2(builtin_data / "qa/dev.json", tmp_path / "dev.json", 60, 1, 0)
    out = tmp_path / "out"
    flags = {"task.name": "qa", "model": tiny_model, "data.train": train, "data.dev": dev, "train.epochs": 2, "optim.lr": 1e-3,
             "task.max_seq_length": 128, "train.progress": False}
    summary = finetune(settings.load(FinetuneSettings, flags={**flags, "out": out}))
    dev_at_0, tuned = summary["best"]["dev"], summary["best"]["dev_tuned"]
    threshold = summary["best"]["tuned"]["null_score_diff_threshold"]
    assert {"has_ans_f1", "no_ans_f1", "has_ans_exact_match", "no_ans_exact_match"} <= set(tuned) <= set(dev_at_0) | {"f1"}
    assert tuned["f1"] >= dev_at_0["f1"]  # the search includes what threshold 0 does
    meta = pipeline(out / "model").meta
    assert meta["task_options"]["null_score_diff_threshold"] == threshold and meta["dev_tuned"] == tuned
    # evaluate applies the saved threshold, and reports answerable and unanswerable questions apart
    assert main(["evaluate", "--model", str(out / "model"), "--data", str(dev)]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert {k: scores[k] for k in tuned} == pytest.approx(tuned)
    # a threshold given is kept as it is, not searched
    fixed = finetune(settings.load(FinetuneSettings, flags={**flags, "out": tmp_path / "fixed", "task.null_threshold": 3.5}))
    assert "tuned" not in fixed["best"]
    kept = pipeline(tmp_path / "fixed" / "model").task  # built from the saved task options, as predict builds it
    assert kept.null_score_diff_threshold == 3.5 and kept.search_null_threshold is False
