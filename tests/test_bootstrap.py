"""The paired bootstrap of a gain between two models' predictions: against normal theory, its own slow path,
and on entity F1 (not a mean over examples)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bertkit.demo import stats
from bertkit.demo.stats import paired_bootstrap
from bertkit.tasks import get_task
from bertkit.tasks.classify import ClassPrediction
from bertkit.tasks.ner import TagPrediction


def _classify(tmp_path: Path, n: int = 400):
    task = get_task("classify")
    path = tmp_path / "dev.tsv"
    path.write_text("text\tlabel\n" + "".join(f"sentence {i}\t{'ab'[i % 2]}\n" for i in range(n)), encoding="utf-8")
    data = task.read(path)

    def predict(wrong: set[int]) -> list[ClassPrediction]:
        out = []
        for i, e in enumerate(data):
            label = e.label if i not in wrong else ("b" if e.label == "a" else "a")
            out.append(ClassPrediction(e, label, {"a": 0.5, "b": 0.5}))
        return out

    return task, data, predict


def test_a_model_against_itself_gains_exactly_nothing(tmp_path: Path) -> None:
    task, data, predict = _classify(tmp_path)
    p = predict(set(range(0, 400, 3)))
    assert paired_bootstrap(task, data, p, p, "accuracy") == (0.0, 0.0)


def test_accuracy_interval_matches_normal_theory_and_the_slow_path(tmp_path: Path, monkeypatch) -> None:
    task, data, predict = _classify(tmp_path)
    # base wrong on every 4th example, other on every 8th (a subset): other is right on 50 more of 400, +12.5 points
    base, other = predict(set(range(0, 400, 4))), predict(set(range(0, 400, 8)))
    low, high = paired_bootstrap(task, data, base, other, "accuracy", resamples=4000)
    # paired, the per-example gains are 100 (p = 0.125) or 0; two independent accuracies would give 2.72, not 1.65
    se = 100 * np.sqrt(0.125 * 0.875 / 400)
    assert low == pytest.approx(12.5 - 1.96 * se, abs=0.5) and high == pytest.approx(12.5 + 1.96 * se, abs=0.5)
    # the fast path (a mean of per-example differences) gives what scoring every resample whole gives
    monkeypatch.setattr(stats, "_per_example", lambda *a: None)
    slow = paired_bootstrap(task, data, base, other, "accuracy", resamples=300, seed=3)
    monkeypatch.undo()
    assert paired_bootstrap(task, data, base, other, "accuracy", resamples=300, seed=3) == pytest.approx(slow, abs=1e-9)


def test_entity_f1_is_rescored_whole_and_misaligned_predictions_are_refused(tmp_path: Path) -> None:
    task = get_task("ner")
    path = tmp_path / "dev.txt"
    path.write_text("".join(f"Emma B-PER\nwent O\nto O\nHighbury B-LOC\nday{i} O\n\n" for i in range(60)), encoding="utf-8")
    data = task.read(path)
    right = [TagPrediction(e, list(e.tags), [], "BIO") for e in data]
    half = [TagPrediction(e, list(e.tags) if i % 2 else ["O"] * len(e.tags), [], "BIO") for i, e in enumerate(data)]
    assert stats._per_example(task, data, half, "f1") is None  # F1 over all entities is not a mean over sentences
    low, high = paired_bootstrap(task, data, half, right, "f1", resamples=200)
    whole = task.score(data, right)["f1"] - task.score(data, half)["f1"]
    assert 0 < low < whole < high
    with pytest.raises(ValueError, match="one prediction of each model per example"):
        paired_bootstrap(task, data, half[:-1], right[:-1], "f1")
