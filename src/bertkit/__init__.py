"""bertkit: BERT (Devlin et al., 2018) as fast, tested PyTorch software."""

from .config import BertConfig
from .errors import BertkitError

__all__ = ["BertConfig", "BertkitError"]
__version__ = "0.1.0"
