"""The BERT encoder: embeddings, self-attention (SDPA), feed-forward, post-LN layers, pooler.

The encoder runs on packed tokens: padding is removed before the embeddings and put back only
around attention, so no matrix multiply is spent on [PAD] (as in MosaicBERT's unpadded BERT).
With no padding in the batch, nothing is gathered or scattered at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .checkpoint import Pretrained
from .config import BertConfig


@dataclass(frozen=True)
class Packing:
    """Where the real tokens of a padded (B, T) batch sit once flattened to (B*T,).

    indices: (N,) positions of the non-pad tokens in the flattened batch, N <= B*T.
    key_mask: (B, 1, 1, T) bool, True where a key may be attended to.
    """

    batch_size: int
    seq_len: int
    indices: torch.Tensor
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
        return x.flatten(0, 1).index_select(0, self.indices)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """(N, ...) -> (B, T, ...), zeros at the padding."""
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

    def forward(self, x: torch.Tensor, packing: Packing | None) -> torch.Tensor:
        qkv = self.qkv(x)  # (N, 3H) packed, or (B, T, 3H)
        if packing is not None:
            qkv = packing.pad(qkv)  # (B, T, 3H)
        B, T, _ = qkv.shape
        qkv = qkv.view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (3, B, nh, T, hd)
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
class BertOutput:
    last_hidden_state: torch.Tensor  # (B, T, H); zeros at padding
    pooler_output: torch.Tensor | None  # (B, H)


class BertModel(Pretrained):
    """The BERT encoder: embeddings, the stack of layers and (optionally) the pooler.

    It runs on packed (unpadded) tokens inside; `last_hidden_state` is zero at padded positions.
    """

    hf_architecture = "BertModel"
    encoder_prefix = ""

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True, init: bool = True):
        super().__init__()
        self.config = config
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
        if packed_indices is not None and attention_mask is not None:
            packing = Packing(B, T, packed_indices, attention_mask.bool()[:, None, None, :])
        elif attention_mask is not None:
            packing = Packing.from_attention_mask(attention_mask)
        if packing is not None:
            input_ids, token_type_ids, position_ids = (packing.unpad(t) for t in (input_ids, token_type_ids, position_ids))
        x = self.embeddings(input_ids, token_type_ids, position_ids)  # (N, H) or (B, T, H)
        for layer in self.layers:
            x = layer(x, packing)
        hidden = x if packing is None else packing.pad(x)  # (B, T, H)
        pooled = self.pooler(hidden) if self.pooler is not None else None
        return BertOutput(last_hidden_state=hidden, pooler_output=pooled)


def activation(name: str) -> nn.Module:
    """BERT's activations by their config names ("gelu" is the exact erf form, as in Google's code)."""
    return {
        "gelu": nn.GELU(),
        "gelu_new": nn.GELU(approximate="tanh"),
        "gelu_pytorch_tanh": nn.GELU(approximate="tanh"),
        "relu": nn.ReLU(),
    }[name]


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


INITS = ("bert", "local")


@torch.no_grad()
def local_attention_init(model: BertModel) -> None:
    """Starts every attention head looking at a neighbour: head h of each layer at offset +1, -1, +2, -2, ...

    BERT's own initialization starts attention uniform, and a small BERT pre-trained on a CPU budget stays
    a bag of words for thousands of steps (docs/pretraining.md). This gives the position embeddings
    sinusoids at random frequencies in (0, pi), on the first `d` dimensions (d = min(head size, hidden/2)),
    scaled to the word embeddings' norm, and sets each head's query and key projections on those
    dimensions so that q_i . k_j = a * sum_f cos(w_f (i + offset - j)), which peaks at j = i + offset
    (a gives a peak logit of about 8: half the attention on the neighbour for the tiny preset).
    The architecture is BERT's own and every weight stays trainable; only the starting point moves,
    in the spirit of mimetic (Trockman & Kolter, 2023) and convolutional (Cordonnier et al., 2020) views
    of attention. Call it after BERT's initialization.
    """
    cfg = model.config
    H, nh, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
    d = min(hd, H // 2) // 2 * 2
    omega = torch.rand(d // 2) * torch.pi
    angles = torch.arange(cfg.max_position_embeddings, dtype=torch.float32)[:, None] * omega  # (P, d/2)
    table = model.embeddings.position_embeddings.weight
    word_norm = model.embeddings.word_embeddings.weight.norm(dim=1).median()
    pe = torch.zeros_like(table)
    pe[:, 0:d:2], pe[:, 1:d:2] = torch.sin(angles), torch.cos(angles)
    table.copy_(pe * word_norm / (d / 2) ** 0.5)
    table[0].zero_()  # [CLS]'s position: no offset to match, so its queries spread over the whole sequence
    a = 16 * hd**0.5 / H
    f = torch.arange(d // 2)
    for layer in model.layers:
        w = layer.attention.qkv.weight  # (3H, H): queries, keys, values
        for h in range(nh):
            offset = (h // 2 + 1) * (1 if h % 2 == 0 else -1)
            cos, sin = torch.cos(offset * omega), torch.sin(offset * omega)
            q, k = w[h * hd:h * hd + d], w[H + h * hd:H + h * hd + d]  # views: the head's first d rows
            q.zero_()
            k.zero_()
            # q rotates each (sin, cos) pair forward by offset * w_f, so q_i matches the key of position i + offset
            q[2 * f, 2 * f], q[2 * f, 2 * f + 1] = a * cos, a * sin
            q[2 * f + 1, 2 * f], q[2 * f + 1, 2 * f + 1] = -a * sin, a * cos
            k[2 * f, 2 * f], k[2 * f + 1, 2 * f + 1] = 1.0, 1.0
