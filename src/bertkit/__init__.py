"""bertkit: BERT (Devlin et al., 2018) as fast, tested PyTorch software."""

from .config import BertConfig
from .errors import BertkitError
from .heads import (
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from .model import BertModel

__all__ = [
    "BertConfig",
    "BertForPreTraining",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertModel",
    "BertkitError",
]
__version__ = "0.1.0"
