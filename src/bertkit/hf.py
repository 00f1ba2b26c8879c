"""Hugging Face's checkpoint layout: parameter names, weight files and model folders. No model code here.

bertkit's modules use their own short names and one fused QKV projection; this file converts
between those and the parameter names every BERT checkpoint in the wild uses (`from_hf`, `to_hf`),
reads the weights of a folder (`model.safetensors`, sharded or not, or `pytorch_model.bin`) and
the model class its `config.json` names, so that models move both ways between bertkit and
transformers. `bertkit.model.Pretrained` builds on it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from .config import BertConfig
from .errors import BertkitError
from .folders import check_model_folder
from .vocab_files import vocab_size_of

WEIGHTS_NAME = "model.safetensors"

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


def weight_names(directory: str | Path) -> set[str]:
    """Gives the names of the weights in `directory` (Hugging Face's), reading no tensor where the format allows."""
    directory = check_model_folder(directory)
    single, index = directory / WEIGHTS_NAME, directory / f"{WEIGHTS_NAME}.index.json"
    try:
        if single.is_file():
            with safe_open(single, framework="numpy") as f:
                return set(f.keys())
        if index.is_file():
            return set(json.loads(index.read_text())["weight_map"])
    except (SafetensorError, OSError, KeyError, json.JSONDecodeError) as e:
        raise BertkitError(f"{directory}: cannot read the weights ({str(e).splitlines()[0]})") from None
    return set(read_weights(directory))


def check_vocab_fits(directory: Path, config: BertConfig) -> None:
    found = vocab_size_of(directory)
    if found is not None:
        name, n = found
        if n > config.vocab_size:
            raise BertkitError(
                f"{directory}: {name} has {n} tokens but config.json vocab_size is {config.vocab_size}; "
                "ids past the embedding table would crash the model"
            )
