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
from .predict import Pipeline, pipeline
from .tokenizer import Tokenizer

__all__ = [
    "BertConfig",
    "BertForPreTraining",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertModel",
    "BertkitError",
    "Pipeline",
    "Tokenizer",
    "pipeline",
]
__version__ = "0.1.0"
