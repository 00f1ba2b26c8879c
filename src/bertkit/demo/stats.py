"""Is a gain real? The paired bootstrap that puts a 95% interval on the difference between two models.

    low, high = paired_bootstrap(task, dev, base_predictions, other_predictions, "accuracy")
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..tasks import Dataset, Task


def paired_bootstrap(task: Task, data: Dataset, base: Sequence[Any], other: Sequence[Any], metric: str,
                     resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """The 95% interval of `other`'s score minus `base`'s on `data` (percentile, paired bootstrap over the
    examples, as Koehn (2004) does for comparing two systems): both models' predictions of the same
    resampled examples are scored together, so the interval is of the difference, not of each score."""
    if not (len(base) == len(other) == len(data)) or any(p.example is not e or q.example is not e
                                                         for p, q, e in zip(base, other, data.examples, strict=True)):
        raise ValueError("paired_bootstrap needs one prediction of each model per example, in the data's order")
    rng = np.random.default_rng(seed)
    samples = [rng.integers(0, len(data), len(data)) for _ in range(resamples)]
    a, b = _per_example(task, data, base, metric), _per_example(task, data, other, metric)
    if a is not None and b is not None:  # a mean over examples (accuracy, SQuAD's F1): resample the differences
        gains = [float((b - a)[idx].mean()) for idx in samples]
    else:  # entity F1 and the like: score every resample whole
        gains = []
        for idx in samples:
            sample = replace(data, examples=[data.examples[i] for i in idx])
            gains.append(task.score(sample, [other[i] for i in idx])[metric] - task.score(sample, [base[i] for i in idx])[metric])
    lo, hi = np.percentile(gains, [2.5, 97.5])
    return float(lo), float(hi)


def _per_example(task: Task, data: Dataset, predictions: Sequence[Any], metric: str) -> np.ndarray | None:
    """Each example's own score where the metric is their mean (checked against the whole), else None."""
    with np.errstate(all="ignore"):
        one = np.array([task.score(replace(data, examples=[e]), [p])[metric] for e, p in zip(data.examples, predictions, strict=True)])
    whole = task.score(data, predictions)[metric]
    return one if np.isfinite(one).all() and abs(one.mean() - whole) <= 1e-6 * max(1.0, abs(whole)) else None
