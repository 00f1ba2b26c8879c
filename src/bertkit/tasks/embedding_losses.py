"""The losses that train sentence embedders, as plain functions of the vectors, and the two ways to make their
batches larger than memory or than one process: GradCache and a gather across processes with gradients.

- `mnrl_loss`: in-batch negatives (Henderson et al. 2017; sentence-transformers' MultipleNegativesRankingLoss):
  each anchor against every positive and hard negative of the batch, cross-entropy on its own positive;
  `symmetric` adds each positive against every anchor (its MultipleNegativesSymmetricRankingLoss).
- `cosent_loss`: CoSENT (Su 2022): every pair of pairs whose gold scores are ordered should have its cosines
  ordered the same way: log(1 + sum over (i, j) with y_i < y_j of exp(s * (cos_i - cos_j))).
- `matryoshka`: a loss summed over leading slices of the vectors (Kusupati et al. 2022).
- `cached_backward`: GradCache (Gao et al. 2021): vectors computed without a graph in chunks, the loss's
  gradient taken with respect to them, then each chunk recomputed with its graph (same dropout) and given
  its share: the loss and gradients of the whole batch in the memory of one chunk.
- `gather`: under torchrun, every process's vectors, with gradients flowing back to their own process.

    loss = mnrl_loss(anchors, [positives, negatives], scale=20.0)                  # (B, H), [(B, H), (B, H)]
    loss = matryoshka(lambda *v: cosent_loss(*v, scores), (a, b), dims=(256, 64))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor


def cosine_matrix(a: Tensor, b: Tensor) -> Tensor:
    """Gives every row of `a` against every row of `b` by cosine: (A, H), (B, H) -> (A, B)."""
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T


def gather(x: Tensor) -> tuple[Tensor, int]:
    """Gives every process's rows (this process's own at their place, with gradients back to each process) and
    where this process's rows start; outside torchrun, `x` and 0."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return x, 0
    from torch.distributed.nn.functional import all_gather

    return torch.cat(all_gather(x), dim=0), torch.distributed.get_rank() * x.shape[0]


def mnrl_loss(anchors: Tensor, candidates: Sequence[Tensor], scale: float = 20.0, symmetric: bool = False,
              gathered: bool = False) -> Tensor:
    """Gives the in-batch negatives loss of (B, H) anchors whose positives are `candidates[0]` (B, H), with the
    batch's other candidates (hard negatives, (B, H) each) as further negatives. `gathered`: the candidates and
    anchors of every process (torchrun) take part, each process scoring its own anchors."""
    batch = anchors.shape[0]
    offset = 0
    if gathered:
        everyone, offset = gather(anchors)
        candidates = [gather(c)[0] for c in candidates]
    own = torch.arange(offset, offset + batch, device=anchors.device)
    scores = cosine_matrix(anchors, torch.cat(list(candidates))) * scale  # (B, W * B * len(candidates))
    loss = F.cross_entropy(scores, own)
    if not symmetric:
        return loss
    queries = everyone if gathered else anchors
    backward = cosine_matrix(candidates[0][own], queries) * scale  # each own positive against every anchor
    return (loss + F.cross_entropy(backward, own)) / 2


def cosent_loss(a: Tensor, b: Tensor, gold: Tensor, scale: float = 20.0) -> Tensor:
    """Gives the CoSENT loss of pairs (a_i, b_i) with gold similarity scores or labels `gold` (B,)."""
    if a.dtype in (torch.float16, torch.bfloat16):  # exp of differences of up to 2 * scale: not in half precision
        a, b = a.float(), b.float()
    cos = F.cosine_similarity(a, b, dim=-1) * scale  # (B,)
    differences = cos[:, None] - cos[None, :]  # (B, B): cos_i - cos_j
    wrong_way = differences[gold[:, None] < gold[None, :]]  # pairs whose cosines should be ordered j over i
    return torch.logsumexp(torch.cat([cos.new_zeros(1), wrong_way]), dim=0)


def matryoshka(loss: Callable[..., Tensor], vectors: Sequence[Tensor], dims: Sequence[int],
               weights: Sequence[float] | None = None) -> Tensor:
    """Gives the weighted sum of `loss` over the leading `dims` of each of `vectors` (weights 1 by default)."""
    weights = weights or [1.0] * len(dims)
    return sum((w * loss(*(v[..., :d] for v in vectors)) for d, w in zip(dims, weights, strict=True)),
               start=vectors[0].new_zeros(()))


def cached_backward(encode: Callable[[Any], Tensor], chunks: Sequence[Sequence[Any]],
                    loss_of: Callable[[list[Tensor]], Tensor]) -> Tensor:
    """Backpropagates `loss_of` (columns of vectors -> loss) as if every chunk had been encoded at once; gives the
    loss. `chunks[c]`: column c's inputs cut into pieces that `encode` takes (each piece's vectors (n, H)).
    Only one piece's graph is ever held; each piece's dropout is replayed from its saved random state."""
    states: list[list[tuple[Tensor, list[Tensor]]]] = []
    columns: list[Tensor] = []
    with torch.no_grad():
        for pieces in chunks:
            states.append([])
            vectors = []
            for piece in pieces:
                states[-1].append(_random_state())
                vectors.append(encode(piece))
            columns.append(torch.cat(vectors).requires_grad_())
    loss = loss_of(columns)
    loss.backward()
    for pieces, column, saved in zip(chunks, columns, states, strict=True):
        grads = column.grad.split([len(_first(p)) for p in pieces])  # type: ignore[union-attr]
        for piece, grad, state in zip(pieces, grads, saved, strict=True):
            with _replayed(state):
                encode(piece).backward(grad)
    return loss.detach()


def _first(piece: Any) -> Any:
    """A piece's rows: the piece itself, or its first tensor (a batch given as a dict of tensors)."""
    return next(iter(piece.values())) if isinstance(piece, dict) else piece


def _random_state() -> tuple[Tensor, list[Tensor]]:
    return torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []


class _replayed:
    """Runs a block with a saved random state (the same dropout as when it was saved), then restores the current."""

    def __init__(self, state: tuple[Tensor, list[Tensor]]):
        self.state = state

    def __enter__(self) -> None:
        self.saved = _random_state()
        torch.set_rng_state(self.state[0])
        if self.state[1]:
            torch.cuda.set_rng_state_all(self.state[1])

    def __exit__(self, *exc: object) -> None:
        torch.set_rng_state(self.saved[0])
        if self.saved[1]:
            torch.cuda.set_rng_state_all(self.saved[1])
