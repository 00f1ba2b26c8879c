"""The two classification families, classify and pair: a task single-label (bertkit.tasks.classify: classes, or
with `regression` a score) or, with `multi_label`, multi-label (bertkit.tasks.multilabel).
"""

from __future__ import annotations

import functools
from typing import Any

from ..errors import BertkitError
from .base import Family
from .classify import ClassifyTask
from .multilabel import MultiLabelTask


def classification(name: str, *, multi_label: bool = False, **options: Any) -> ClassifyTask | MultiLabelTask:
    """The classify or pair task: single-label (a class or, with `regression`, a score), or multi-label."""
    if multi_label:
        if options.pop("regression", False):
            raise BertkitError("--multi-label is for classify and pair (not with --regression)")
        return MultiLabelTask(name=name, **options)
    if "threshold" in options or "tune_thresholds" in options:
        raise BertkitError("--threshold and --tune-thresholds are for --multi-label")
    return ClassifyTask(name=name, **options)


_PAIRS = frozenset({"regression", "multi_label", "threshold", "tune_thresholds", "class_weights"})
CLASSIFY = Family("classify", functools.partial(classification, "classify"), _PAIRS | {"long", "stride"},
                  "single-sentence classification", "text-classification")
PAIR = Family("pair", functools.partial(classification, "pair"), _PAIRS, "sentence-pair classification",
              "text-classification")
