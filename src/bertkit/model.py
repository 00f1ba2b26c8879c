"""The BERT encoder: embeddings, self-attention (SDPA), feed-forward, post-LN layers, pooler; and
`Pretrained`, the base of every public model (BERT's initialization, from_pretrained, save_pretrained).

The encoder runs on packed tokens: padding is removed before the embeddings and put back only
around attention, so no matrix multiply is spent on [PAD] (as in MosaicBERT's unpadded BERT).
With no padding in the batch, nothing is gathered or scattered at all.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn
from torch.utils.checkpoint import checkpoint

from .config import ACTIVATIONS, BertConfig
from .errors import BertkitError
from .fileio import atomic_write
from .folders import check_model_folder
from .hf import WEIGHTS_NAME, check_vocab_fits, from_hf, read_weights, to_hf

log = logging.getLogger("bertkit")


@dataclass(frozen=True)
class Packing:
    """Where the real tokens of a padded (B, T) batch sit once flattened to (B*T,).

    indices: (N,) positions of the non-pad tokens in the flattened batch, N <= B*T; None keeps the
        tokens padded, (B, T, ...), and only attention masks the padding out (`BertModel.unpad`).
    key_mask: (B, 1, 1, T) bool, True where a key may be attended to.
    """

    batch_size: int
    seq_len: int
    indices: torch.Tensor | None
    key_mask: torch.Tensor

    @classmethod
    def from_attention_mask(cls, attention_mask: torch.Tensor) -> Packing | None:
        """Gives the packing of a (B, T) 0/1 mask, or None when no token is padding."""
        mask = attention_mask.bool()
        if bool(mask.all()):
            return None
        B, T = mask.shape
        indices = mask.flatten().nonzero().squeeze(1)  # (N,)
        return cls(B, T, indices, mask[:, None, None, :])

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (N, ...)"""
        if self.indices is None:
            return x
        return x.flatten(0, 1).index_select(0, self.indices)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """(N, ...) -> (B, T, ...), zeros at the padding."""
        if self.indices is None:
            return x
        out = x.new_zeros(self.batch_size * self.seq_len, *x.shape[1:])
        return out.index_copy(0, self.indices, x).unflatten(0, (self.batch_size, self.seq_len))


class Embeddings(nn.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(position_ids)
        return self.dropout(self.norm(x))


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused QKV projection; SDPA does the softmax(QK^T)V."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.head_dim = cfg.head_dim
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout_p = cfg.attention_probs_dropout_prob

    def heads(self, x: torch.Tensor, packing: Packing | None) -> torch.Tensor:
        """Gives every head's queries, keys and values, (3, B, nh, T, hd), padded when `x` is packed."""
        qkv = self.qkv(x)  # (N, 3H) packed, or (B, T, 3H)
        if packing is not None:
            qkv = packing.pad(qkv)  # (B, T, 3H)
        B, T, _ = qkv.shape
        return qkv.view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (3, B, nh, T, hd)

    def probabilities(self, x: torch.Tensor, packing: Packing) -> torch.Tensor:
        """Gives every head's attention probabilities, (B, nh, T, T): softmax(QK^T / sqrt(hd)) over the real tokens,
        what SDPA computes inside (transformers' output_attentions)."""
        q, k, _ = self.heads(x, packing)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (B, nh, T, T)
        return scores.masked_fill(~packing.key_mask, torch.finfo(scores.dtype).min).softmax(-1)

    def forward(self, x: torch.Tensor, packing: Packing | None) -> torch.Tensor:
        qkv = self.heads(x, packing)  # (3, B, nh, T, hd)
        B, T = qkv.shape[1], qkv.shape[3]
        y = F.scaled_dot_product_attention(
            qkv[0], qkv[1], qkv[2],
            attn_mask=None if packing is None else packing.key_mask,
            dropout_p=self.dropout_p if self.training else 0.0,
        )  # (B, nh, T, hd)
        y = y.transpose(1, 2).reshape(B, T, self.num_heads * self.head_dim)  # (B, T, H)
        if packing is not None:
            y = packing.unpad(y)  # (N, H)
        return self.out(y)


class FeedForward(nn.Module):
    """Position-wise feed-forward: H -> intermediate -> H with BERT's activation."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.act = activation(cfg.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class Layer(nn.Module):
    """One post-LN Transformer layer, as in the paper: x = LN(x + Drop(Attn(x))); x = LN(x + Drop(FFN(x)))."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attention = SelfAttention(cfg)
        self.attention_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.ffn = FeedForward(cfg)
        self.ffn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, packing: Packing | None) -> torch.Tensor:
        x = self.attention_norm(x + self.dropout(self.attention(x, packing)))
        return self.ffn_norm(x + self.dropout(self.ffn(x)))


class Pooler(nn.Module):
    """dense + tanh on the first ([CLS]) token."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


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
    every_head: ClassVar[set[str]] = set()  # the head prefixes of every model class: what is not the encoder's

    config: BertConfig
    load_report: LoadReport

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Pretrained.every_head.update(cls.head_prefixes)

    def init_weights(self) -> None:
        if not next(self.parameters()).is_meta:  # from_pretrained builds on "meta", then loads
            init_weights(self, self.config.initializer_range)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @classmethod
    def from_pretrained(cls: type[M], directory: str | Path, *, revision: str | None = None, **config_overrides: Any) -> M:
        """Gives the model in `directory` (or of a Hugging Face model name, at `revision`), reporting by name
        each weight that was missing, extra or mis-shaped.

        `config_overrides` change config fields, e.g. `id2label` for a new classification head or dropout rates.
        """
        directory = check_model_folder(directory, revision)
        config = BertConfig.load(directory)
        if config_overrides:
            config = config.replace(**config_overrides)
        check_vocab_fits(directory, config)
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
            heads = tuple(Pretrained.every_head)
            theirs = {(k if k.startswith(heads) else prefix + k): v for k, v in theirs.items()}
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

    def gradient_checkpointing_enable(self) -> None:
        """Recomputes every encoder layer's activations in the backward pass instead of keeping them (as
        transformers' method of that name): memory for long inputs or large models, at about a third more compute."""
        for m in self.modules():
            if isinstance(m, BertModel):
                m.gradient_checkpointing = True

    def save_pretrained(self, directory: str | Path) -> None:
        """Writes `config.json` and `model.safetensors` in Hugging Face's layout, each file atomically."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = to_hf({k: v.detach().cpu() for k, v in self.state_dict().items()})
        atomic_write(directory / WEIGHTS_NAME, lambda tmp: save_file(tensors, tmp, metadata={"format": "pt"}))
        self.config.save(directory, architecture=self.hf_architecture)


@dataclass
class BertOutput:
    last_hidden_state: torch.Tensor  # (B, T, H); zeros at padding
    pooler_output: torch.Tensor | None  # (B, H)


class BertModel(Pretrained):
    """The BERT encoder: embeddings, the stack of layers and (optionally) the pooler.

    It runs on packed (unpadded) tokens inside; `last_hidden_state` is zero at padded positions. With
    `unpad = False` the tokens stay padded and only attention masks the padding: the same outputs, with
    no step whose shapes depend on the data, as an exported graph (ONNX) needs.
    """

    hf_architecture = "BertModel"
    encoder_prefix = ""

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True, init: bool = True):
        super().__init__()
        self.config = config
        self.unpad = True
        self.gradient_checkpointing = False  # recompute each layer in the backward pass: less memory, ~30% more time
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))
        self.pooler = Pooler(config) if add_pooling_layer else None
        if init:  # models with a head initialize everything once, themselves
            self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        packed_indices: torch.Tensor | None = None,
    ) -> BertOutput:
        """`packed_indices`, the flat positions of the real tokens (attention_mask.flatten().nonzero()),
        may come precomputed with the batch: then nothing here waits on the device (no host sync)."""
        B, T = input_ids.shape
        if self.config.max_position_embeddings < T:
            raise ValueError(f"sequence length {T} exceeds max_position_embeddings {self.config.max_position_embeddings}")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).expand(B, T)
        packing = None
        if attention_mask is not None and not self.unpad:
            packing = Packing(B, T, None, attention_mask.bool()[:, None, None, :])
        elif packed_indices is not None and attention_mask is not None:
            packing = Packing(B, T, packed_indices, attention_mask.bool()[:, None, None, :])
        elif attention_mask is not None:
            packing = Packing.from_attention_mask(attention_mask)
        if packing is not None:
            input_ids, token_type_ids, position_ids = (packing.unpad(t) for t in (input_ids, token_type_ids, position_ids))
        x = self.embeddings(input_ids, token_type_ids, position_ids)  # (N, H) or (B, T, H)
        recompute = self.gradient_checkpointing and self.training and torch.is_grad_enabled()
        for layer in self.layers:
            # the recomputation replays the layer's dropout masks (the RNG state is saved): the same gradients
            x = checkpoint(layer, x, packing, use_reentrant=False) if recompute else layer(x, packing)
        hidden = x if packing is None else packing.pad(x)  # (B, T, H)
        if packing is not None and packing.indices is None:
            hidden = hidden.masked_fill(~attention_mask.bool()[..., None], 0.0)  # as the packed path leaves it
        pooled = self.pooler(hidden) if self.pooler is not None else None
        return BertOutput(last_hidden_state=hidden, pooler_output=pooled)

    @torch.no_grad()
    def attention_maps(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       token_type_ids: torch.Tensor) -> torch.Tensor:
        """Gives every head's attention probabilities, (layers, B, heads, T, T), the layers run padded."""
        B, T = input_ids.shape
        packing = Packing(B, T, None, attention_mask.bool()[:, None, None, :])
        x = self.embeddings(input_ids, token_type_ids, torch.arange(T).expand(B, T))  # (B, T, H)
        maps = []
        for layer in self.layers:
            maps.append(layer.attention.probabilities(x, packing))
            x = layer(x, packing)
        return torch.stack(maps)


def activation(name: str) -> nn.Module:
    """BERT's activations by their config names (config.ACTIVATIONS)."""
    approximate = ACTIVATIONS[name]
    return nn.ReLU() if approximate is None else nn.GELU(approximate=approximate)


@torch.no_grad()
def init_weights(module: nn.Module, std: float) -> None:
    """BERT's initialization: normal(0, std) weights truncated at 2 std (Google's
    truncated_normal_initializer), zero biases, LayerNorm 1 and 0."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            truncated_normal_(m.weight, std)
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.zero_()
        elif isinstance(m, nn.LayerNorm):
            m.weight.fill_(1.0)
            m.bias.zero_()


def truncated_normal_(w: torch.Tensor, std: float) -> None:
    """Fills w from normal(0, std) redrawing values beyond 2 std (~5% a round); much faster than
    torch's inverse-CDF trunc_normal_ on embedding tables."""
    w.normal_(0.0, std)
    out = w.abs() > 2 * std
    while bool(out.any()):
        w[out] = torch.empty(int(out.sum()), dtype=w.dtype, device=w.device).normal_(0.0, std)
        out = w.abs() > 2 * std
