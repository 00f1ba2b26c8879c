"""bertkit: BERT (Devlin et al., 2018) as fast, tested PyTorch software.

The public names load on first use, so that `import bertkit` is quick and using an exported model
(bertkit.runtime) does not import torch. `bertkit.distill(bertkit.DistillSettings(...))` distills a fine-tuned
teacher (bertkit.distillation).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import BertConfig
    from .errors import BertkitError
    from .heads import (
        BertForPreTraining,
        BertForQuestionAnswering,
        BertForSequenceClassification,
        BertForTokenClassification,
    )
    from .model import BertModel
    from .predict import Pipeline, pipeline
    from .tokenizer import Tokenizer

_HOME = {
    "BertConfig": "config",
    "BertForPreTraining": "heads",
    "BertForQuestionAnswering": "heads",
    "BertForSequenceClassification": "heads",
    "BertForTokenClassification": "heads",
    "BertModel": "model",
    "BertkitError": "errors",
    "DistillSettings": "distillation",
    "Pipeline": "predict",
    "Tokenizer": "tokenizer",
    "distill": "distillation",
    "pipeline": "predict",
}
__all__ = [
    "BertConfig",
    "BertForPreTraining",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertModel",
    "BertkitError",
    "DistillSettings",
    "Pipeline",
    "Tokenizer",
    "distill",
    "pipeline",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'bertkit' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])
