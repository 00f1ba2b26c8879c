"""Checkpoints in Hugging Face's layout: `config.json` + `model.safetensors` (or `pytorch_model.bin`).

bertkit's modules use their own short names and one fused QKV projection; this file converts
between those and the parameter names every BERT checkpoint in the wild uses, so that models move
both ways between bertkit and transformers.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from .config import BertConfig
from .errors import BertkitError
from .fileio import atomic_write

log = logging.getLogger("bertkit")

WEIGHTS_NAME = "model.safetensors"
HEAD_PREFIXES = ("mlm.", "nsp.", "classifier.", "qa_outputs.")  # bertkit names of every task head

# (Hugging Face name, bertkit name) for every parameter but the fused QKV; names are within the encoder
# ("bert." is added or stripped separately) or, for heads, within the whole model.
_RENAMES: list[tuple[str, str]] = [
    (r"embeddings\.LayerNorm\.", "embeddings.norm."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"layers.\1.attention.out."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", r"layers.\1.attention_norm."),
    (r"encoder\.layer\.(\d+)\.intermediate\.dense\.", r"layers.\1.ffn.up."),
    (r"encoder\.layer\.(\d+)\.output\.dense\.", r"layers.\1.ffn.down."),
    (r"encoder\.layer\.(\d+)\.output\.LayerNorm\.", r"layers.\1.ffn_norm."),
    (r"cls\.predictions\.transform\.dense\.", "mlm.dense."),
    (r"cls\.predictions\.transform\.LayerNorm\.", "mlm.norm."),
    (r"cls\.predictions\.bias$", "mlm.bias"),
    (r"cls\.seq_relationship\.", "nsp."),
    (r"classifier\.", "classifier.linear."),
]
_QKV = re.compile(r"(.*)encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.(weight|bias)$")
# Keys that need no weights here: buffers transformers keeps, and the decoder tied to the embeddings.
_IGNORED = re.compile(r"(^|\.)(position_ids|token_type_ids)$|cls\.predictions\.decoder\.(weight|bias)$")


def _hf_suffix_names(key: str) -> str:
    """Old TensorFlow conversions name LayerNorm parameters gamma/beta."""
    return re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key))


def from_hf(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Hugging Face names -> bertkit names (query/key/value fused into one qkv)."""
    out: dict[str, torch.Tensor] = {}
    qkv: dict[tuple[str, str, str], dict[str, torch.Tensor]] = {}
    for key, value in state.items():
        key = _hf_suffix_names(key)
        if _IGNORED.search(key):
            continue
        if m := _QKV.match(key):
            prefix, layer, part, kind = m.groups()
            qkv.setdefault((prefix, layer, kind), {})[part] = value
            continue
        for pattern, repl in _RENAMES:
            key = re.sub(pattern, repl, key)
        out[key] = value
    for (prefix, layer, kind), parts in qkv.items():
        name = f"{prefix}layers.{layer}.attention.qkv.{kind}"
        if len(parts) != 3:
            missing = sorted({"query", "key", "value"} - set(parts))
            raise BertkitError(f"checkpoint has no {', '.join(missing)} {kind} for layer {layer}")
        out[name] = torch.cat([parts["query"], parts["key"], parts["value"]], dim=0)
    return out


_TO_HF: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"embeddings\.norm\."), "embeddings.LayerNorm."),
    (re.compile(r"layers\.(\d+)\.attention\.out\."), r"encoder.layer.\1.attention.output.dense."),
    (re.compile(r"layers\.(\d+)\.attention_norm\."), r"encoder.layer.\1.attention.output.LayerNorm."),
    (re.compile(r"layers\.(\d+)\.ffn\.up\."), r"encoder.layer.\1.intermediate.dense."),
    (re.compile(r"layers\.(\d+)\.ffn\.down\."), r"encoder.layer.\1.output.dense."),
    (re.compile(r"layers\.(\d+)\.ffn_norm\."), r"encoder.layer.\1.output.LayerNorm."),
    (re.compile(r"^mlm\.dense\."), "cls.predictions.transform.dense."),
    (re.compile(r"^mlm\.norm\."), "cls.predictions.transform.LayerNorm."),
    (re.compile(r"^mlm\.bias$"), "cls.predictions.bias"),
    (re.compile(r"^nsp\."), "cls.seq_relationship."),
    (re.compile(r"^classifier\.linear\."), "classifier."),
]
_OUR_QKV = re.compile(r"(.*)layers\.(\d+)\.attention\.qkv\.(weight|bias)$")


def to_hf(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """bertkit names -> Hugging Face names (qkv split into query/key/value); tensors made contiguous copies."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if m := _OUR_QKV.match(key):
            prefix, layer, kind = m.groups()
            for part, chunk in zip(("query", "key", "value"), value.chunk(3, dim=0), strict=True):
                out[f"{prefix}encoder.layer.{layer}.attention.self.{part}.{kind}"] = chunk.contiguous()
            continue
        for pattern, repl in _TO_HF:
            key = pattern.sub(repl, key)
        out[key] = value.detach().contiguous()
    return out


def check_model_folder(directory: str | Path) -> Path:
    """Gives `directory` as a Path if it is a folder; else a BertkitError saying what it is instead."""
    directory = Path(directory)
    if directory.is_file():
        raise BertkitError(f"{directory}: is a file, not a model folder")
    if not directory.is_dir():
        raise BertkitError(f"{directory}: no such model folder")
    return directory


def read_weights(directory: str | Path) -> dict[str, torch.Tensor]:
    """Gives the tensors of `model.safetensors` (also sharded) or `pytorch_model.bin` in `directory`."""
    directory = check_model_folder(directory)
    single, index, legacy = directory / WEIGHTS_NAME, directory / f"{WEIGHTS_NAME}.index.json", directory / "pytorch_model.bin"
    try:
        if single.is_file():
            return load_file(single)
        if index.is_file():
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            return {k: v for shard in shards for k, v in load_file(directory / shard).items()}
        if legacy.is_file():
            state = torch.load(legacy, map_location="cpu", weights_only=True)
            if not isinstance(state, dict):
                raise BertkitError(f"{legacy}: not a state dict")
            return state
    except (SafetensorError, OSError, RuntimeError, KeyError, json.JSONDecodeError) as e:
        raise BertkitError(f"{directory}: cannot read the weights ({str(e).splitlines()[0]})") from None
    raise BertkitError(f"{directory}: no {WEIGHTS_NAME} or pytorch_model.bin (is this a model folder?)")


@dataclass
class LoadReport:
    """What from_pretrained did with the weights it found."""

    newly_initialized: list[str] = field(default_factory=list)  # model weights the checkpoint lacked
    unused: list[str] = field(default_factory=list)  # checkpoint weights this model has no place for


M = TypeVar("M", bound="Pretrained")


class Pretrained(nn.Module):
    """Base of every public model: BERT's initialization, from_pretrained and save_pretrained.

    `encoder_prefix` is where the BERT encoder sits inside the model ("" for BertModel itself,
    "bert." for models with a head); checkpoints with and without the prefix both load.
    """

    hf_architecture: ClassVar[str]
    encoder_prefix: ClassVar[str] = "bert."
    # Parts that a checkpoint may lack: they are initialized fresh and reported. Missing encoder weights are an error.
    head_prefixes: ClassVar[tuple[str, ...]] = ()

    config: BertConfig
    load_report: LoadReport

    def init_weights(self) -> None:
        from .model import init_weights

        if not next(self.parameters()).is_meta:  # from_pretrained builds on "meta", then loads
            init_weights(self, self.config.initializer_range)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @classmethod
    def from_pretrained(cls: type[M], directory: str | Path, **config_overrides: Any) -> M:
        """Gives the model in `directory`, reporting by name each weight that was missing, extra or mis-shaped.

        `config_overrides` change config fields, e.g. `id2label` for a new classification head or dropout rates.
        """
        directory = check_model_folder(directory)
        config = BertConfig.load(directory)
        if config_overrides:
            config = config.replace(**config_overrides)
        _check_vocab_fits(directory, config)
        state = read_weights(directory)
        with torch.device("meta"):  # no memory and no random init for weights about to be overwritten
            model = cls._build(config, state)
        if {name for name, _ in model.named_buffers()} - set(model.state_dict()):
            model = cls._build(config, state)  # buffers computed at construction (a CRF's allowed transitions): build for real
        else:
            model.to_empty(device="cpu")
        model.load_report = model.load_hf_state(state, source=str(directory))
        return model

    @classmethod
    def _build(cls: type[M], config: BertConfig, state: dict[str, torch.Tensor]) -> M:
        """The model to load `state` (Hugging Face names) into; a model with optional parts sees whether it has them."""
        return cls(config)

    def load_hf_state(self, hf_state: dict[str, torch.Tensor], source: str = "checkpoint") -> LoadReport:
        """Copies a Hugging Face-named state dict into this model; gives what was new and what was unused."""
        theirs = from_hf(hf_state)
        ours = self.state_dict()
        prefix = self.encoder_prefix
        # Move the checkpoint's encoder weights under this model's prefix, whichever way it was saved.
        has_prefix = any(k.startswith("bert.") for k in theirs)
        if prefix and not has_prefix:
            theirs = {(k if k.startswith(HEAD_PREFIXES) else prefix + k): v for k, v in theirs.items()}
        elif not prefix and has_prefix:
            theirs = {k.removeprefix("bert."): v for k, v in theirs.items()}
        bad = [f"{k}: checkpoint {tuple(v.shape)}, model {tuple(ours[k].shape)}"
               for k, v in theirs.items() if k in ours and v.shape != ours[k].shape]
        if bad:
            raise BertkitError(f"{source}: weights of the wrong shape: " + "; ".join(bad))
        missing = [k for k in ours if k not in theirs]
        unused = sorted(k for k in theirs if k not in ours)
        fresh = [k for k in missing if self._is_fresh_part(k)]
        lost = [k for k in missing if k not in fresh]
        if lost:
            shown = ", ".join(lost[:8]) + (f" and {len(lost) - 8} more" if len(lost) > 8 else "")
            raise BertkitError(f"{source}: the checkpoint lacks encoder weights: {shown}")
        with torch.no_grad():
            for k, v in theirs.items():
                if k in ours:
                    ours[k].copy_(v)
        self._init_fresh(fresh)
        report = LoadReport(newly_initialized=fresh, unused=unused)
        if fresh:
            log.warning("%s: newly initialized (train them before use): %s", source, ", ".join(fresh))
        if unused:
            log.info("%s: weights not used by %s: %s", source, type(self).__name__, ", ".join(unused))
        return report

    def _init_fresh(self, names: list[str]) -> None:
        """BERT-initializes the parameters a checkpoint did not have."""
        from .model import init_weights

        for name in names:
            owner, _, attr = name.rpartition(".")
            module = self.get_submodule(owner)
            if isinstance(module, (nn.Linear, nn.Embedding, nn.LayerNorm)):
                init_weights(module, self.config.initializer_range)
            else:  # a bare parameter such as the MLM output bias
                with torch.no_grad():
                    getattr(module, attr).zero_()

    def _is_fresh_part(self, key: str) -> bool:
        return key.startswith(self.head_prefixes) or key.startswith(f"{self.encoder_prefix}pooler.")

    def save_pretrained(self, directory: str | Path) -> None:
        """Writes `config.json` and `model.safetensors` in Hugging Face's layout, each file atomically."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = to_hf({k: v.detach().cpu() for k, v in self.state_dict().items()})
        atomic_write(directory / WEIGHTS_NAME, lambda tmp: save_file(tensors, tmp, metadata={"format": "pt"}))
        self.config.save(directory, architecture=self.hf_architecture)


def architecture_of(directory: str | Path) -> str | None:
    """Gives the model class named in a folder's config.json ("BertForPreTraining", ...), if any."""
    path = check_model_folder(directory) / "config.json"
    if not path.is_file():
        raise BertkitError(f"{directory}: no config.json (is this a model folder?)")
    try:
        names = json.loads(path.read_text(encoding="utf-8")).get("architectures") or [None]
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as e:
        raise BertkitError(f"{path}: not a valid config ({e})") from None
    return names[0]


def _check_vocab_fits(directory: Path, config: BertConfig) -> None:
    vocab = directory / "vocab.txt"
    if vocab.is_file():
        with open(vocab, "rb") as f:
            n = sum(1 for _ in f)
        if n > config.vocab_size:
            raise BertkitError(
                f"{directory}: vocab.txt has {n} tokens but config.json vocab_size is {config.vocab_size}; "
                "ids past the embedding table would crash the model"
            )
