"""Named starting points for a new model to pre-train: the values of `model.init`.

- `bert`: Google's initialization (truncated normal, std `initializer_range`), which every model
  gets when it is built;
- `local`: on top of it, every attention head starts on a neighbouring token, and the MLM output
  bias at the log-frequencies of the data's tokens.

`local` is for small budgets (a CPU, minutes to hours): with BERT's uniform start, a small BERT stays a
bag of words for thousands of steps (docs/pretraining.md has the diagnosis and the measurements). The
architecture and the checkpoints stay BERT's own; only the starting point moves.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from .heads import BertForPreTraining
from .model import BertModel


def bert_init(model: BertForPreTraining, token_counts: Callable[[], np.ndarray]) -> None:
    """BERT's own initialization, which the model got when it was built: nothing more to do."""


def local_init(model: BertForPreTraining, token_counts: Callable[[], np.ndarray]) -> None:
    """Every head on a neighbour (`local_attention_init`), the MLM bias on the data's unigram (`unigram_bias_init`)."""
    local_attention_init(model.bert)
    unigram_bias_init(model, token_counts())


# name -> initializer(model, token_counts); token_counts() gives how often each vocabulary id occurs in the data
INITIALIZERS: dict[str, Callable[[BertForPreTraining, Callable[[], np.ndarray]], None]] = {
    "bert": bert_init,
    "local": local_init,
}
INITS = tuple(INITIALIZERS)


def initialize(model: BertForPreTraining, name: str, token_counts: Callable[[], np.ndarray]) -> None:
    """Applies the initializer called `name` to a freshly built model."""
    INITIALIZERS[name](model, token_counts)


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


@torch.no_grad()
def unigram_bias_init(model: BertForPreTraining, counts: np.ndarray) -> None:
    """Sets the MLM output bias to the log-frequencies of the tokens (add-one smoothed), so that the model starts
    out predicting the unigram distribution instead of learning it first. Learning it from a zero bias floods
    the residual stream with one shared direction that, through the post-LN layers, washes out what the
    attention heads read from their neighbours (docs/pretraining.md)."""
    n = min(len(counts), model.config.vocab_size)
    freq = torch.ones(model.config.vocab_size, dtype=torch.float64)
    freq[:n] += torch.as_tensor(counts[:n], dtype=torch.float64)
    model.mlm.bias.copy_((freq / freq.sum()).log().to(model.mlm.bias.dtype))
