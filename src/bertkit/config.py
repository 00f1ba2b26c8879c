"""BertConfig: the paper's model hyperparameters, presets, and Hugging Face `config.json` in and out."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import BertkitError

# Keys that Hugging Face writes into config.json for its own bookkeeping; they carry no model meaning here.
_HF_BOOKKEEPING = {
    "_name_or_path", "architectures", "model_type", "transformers_version", "torch_dtype", "dtype",
    "gradient_checkpointing", "use_cache", "output_past", "bos_token_id", "eos_token_id",
    "tie_word_embeddings", "chunk_size_feed_forward", "output_attentions", "output_hidden_states",
    "return_dict", "directionality", "pooler_fc_size", "pooler_num_attention_heads", "pooler_num_fc_layers",
    "pooler_size_per_head", "pooler_type", "add_cross_attention", "is_decoder", "is_encoder_decoder",
    "position_embedding_type", "tokenizer_class", "layer_norm_epsilon",
}
# Values of bookkeeping keys that would change the model: refuse them rather than silently ignore them.
_UNSUPPORTED = {
    "position_embedding_type": ("absolute",),
    "is_decoder": (False,),
    "add_cross_attention": (False,),
}
IGNORE = -100  # the label of a position that carries no loss (PyTorch's ignore_index, as in transformers)
# hidden_act -> its GELU approximation ("none": the exact erf form, as in Google's code), or None for ReLU
ACTIVATIONS: dict[str, str | None] = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "relu": None}

PRESETS: dict[str, tuple[int, int, int]] = {
    # name: (layers, hidden, heads); intermediate = 4 x hidden
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}


@dataclass(frozen=True)
class BertConfig:
    """BERT's hyperparameters, named as in Google's `bert_config.json` and Hugging Face's `config.json`.

    Task models also carry their labels (`id2label`) and, for classification, `problem_type`
    ("single_label_classification", "multi_label_classification" or "regression").
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    classifier_dropout: float | None = None
    id2label: dict[int, str] = field(default_factory=lambda: {0: "LABEL_0", 1: "LABEL_1"})
    problem_type: str | None = None
    crf: bool = False  # token classification: a CRF over the word tags (bertkit only; transformers ignores it)

    def __post_init__(self) -> None:
        positive = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size", "max_position_embeddings", "type_vocab_size")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise BertkitError(f"config field {name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise BertkitError(
                f"config: hidden_size {self.hidden_size} is not a multiple of "
                f"num_attention_heads {self.num_attention_heads}"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise BertkitError(f"config field hidden_act must be one of {list(ACTIVATIONS)}, got {self.hidden_act!r}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise BertkitError(f"config field {name} must be in [0, 1), got {getattr(self, name)!r}")
        if not self.id2label:
            raise BertkitError("config field id2label must name at least one label")
        # JSON object keys are strings: normalise to int keys, in order.
        object.__setattr__(self, "id2label", {int(k): str(v) for k, v in sorted(self.id2label.items(), key=lambda kv: int(kv[0]))})
        if list(self.id2label) != list(range(len(self.id2label))):
            raise BertkitError(f"config field id2label must be numbered 0..{len(self.id2label) - 1}, got {list(self.id2label)}")
        if self.problem_type not in (None, "single_label_classification", "multi_label_classification", "regression"):
            raise BertkitError(f"config field problem_type {self.problem_type!r} is not supported")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def num_labels(self) -> int:
        return len(self.id2label)

    @property
    def label2id(self) -> dict[str, int]:
        return {label: i for i, label in self.id2label.items()}

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> BertConfig:
        """Gives the named size (tiny, mini, small, medium, base, large), with any field overridden."""
        if name not in PRESETS:
            raise BertkitError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        layers, hidden, heads = PRESETS[name]
        fields = dict(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                      intermediate_size=4 * hidden)
        return cls(**{**fields, **overrides})

    def replace(self, **changes: Any) -> BertConfig:
        return dataclasses.replace(self, **changes)

    def with_labels(self, labels: list[str], problem_type: str | None = None) -> BertConfig:
        """Gives this config with the task's labels (a single label named e.g. "score" for regression)."""
        return self.replace(id2label=dict(enumerate(labels)), problem_type=problem_type)

    # ---- Hugging Face config.json -------------------------------------------------------------------
    def to_dict(self, architecture: str | None = None) -> dict[str, Any]:
        """Gives the Hugging Face `config.json` contents."""
        d: dict[str, Any] = dataclasses.asdict(self)
        d["id2label"] = {str(i): label for i, label in self.id2label.items()}
        d["label2id"] = self.label2id
        if d["classifier_dropout"] is None:
            del d["classifier_dropout"]
        if d["problem_type"] is None:
            del d["problem_type"]
        if not d["crf"]:
            del d["crf"]
        d.update(model_type="bert", position_embedding_type="absolute", tie_word_embeddings=True)
        if architecture:
            d["architectures"] = [architecture]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "config") -> BertConfig:
        """Reads a Hugging Face or Google `bert_config.json` dict; unknown keys are an error naming `source`."""
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in d.items():
            if key in known:
                kwargs[key] = value
            elif key in _UNSUPPORTED and value not in _UNSUPPORTED[key]:
                raise BertkitError(f"{source}: {key}={value!r} is not supported by bertkit (only {_UNSUPPORTED[key]})")
            elif key == "num_labels":
                if "id2label" not in d:
                    kwargs["id2label"] = {i: f"LABEL_{i}" for i in range(int(value))}
            elif key in _HF_BOOKKEEPING or key == "label2id":
                continue
            else:
                raise BertkitError(f"{source}: unknown key {key!r}")
        if kwargs.get("pad_token_id") is None:
            kwargs.pop("pad_token_id", None)
        try:
            return cls(**kwargs)
        except BertkitError as e:
            raise BertkitError(f"{source}: {e}") from None
        except TypeError as e:  # wrong value types that dataclass init cannot take
            raise BertkitError(f"{source}: {e}") from None

    def save(self, directory: str | Path, architecture: str | None = None) -> None:
        from .fileio import atomic_write_text

        path = Path(directory) / "config.json"
        atomic_write_text(path, json.dumps(self.to_dict(architecture), indent=2, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, directory: str | Path) -> BertConfig:
        path = Path(directory) / "config.json"
        if not path.is_file():
            raise BertkitError(f"{directory}: no config.json (is this a model folder?)")
        from .fileio import read_json

        return cls.from_dict(read_json(path), source=str(path))
