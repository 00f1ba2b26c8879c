"""An optional linear-chain CRF over word-level tag scores, for NER on top of the token classifier.

BERT's paper tags each word from its first sub-token alone; a CRF adds tag-to-tag transition scores
and decodes the best whole sequence (Viterbi). Transitions that the tag scheme forbids (BIO's I-X
after O, BIOES's O after B-X, ...) can be ruled out with a large penalty, in training and decoding.

Use: `crf = CRF.for_labels(labels)`; words = `pack_words(logits, labels)` keeps the first sub-token
positions (labels != -100) left-aligned; loss = `-crf(*words).mean()`; tags = `crf.decode(em, mask)`.
Decoding is the numpy Viterbi of bertkit.schemes.TagScores, which exported models use without torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .config import IGNORE
from .schemes import FORBIDDEN, TagScores, allowed_transitions, scheme_of_labels


class CRF(nn.Module):
    """Linear-chain CRF: `forward` gives each sequence's log-likelihood, `decode` the Viterbi path.

    `transitions[i, j]` scores tag i followed by tag j; `start` and `end` score the first and last tag.
    Masks must be left-aligned (True for a prefix of each row).
    """

    def __init__(self, num_tags: int, allowed: tuple[Sequence[bool], Sequence[Sequence[bool]], Sequence[bool]] | None = None):
        super().__init__()
        self.num_tags = num_tags
        self.start = nn.Parameter(torch.empty(num_tags).uniform_(-0.1, 0.1))
        self.end = nn.Parameter(torch.empty(num_tags).uniform_(-0.1, 0.1))
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags).uniform_(-0.1, 0.1))
        start_ok, follow_ok, end_ok = allowed or ([True] * num_tags, [[True] * num_tags] * num_tags, [True] * num_tags)
        penalty = lambda ok: (~torch.as_tensor(ok, dtype=torch.bool)).float() * FORBIDDEN  # noqa: E731
        self.register_buffer("start_penalty", penalty(start_ok), persistent=False)
        self.register_buffer("transition_penalty", penalty(follow_ok), persistent=False)
        self.register_buffer("end_penalty", penalty(end_ok), persistent=False)

    @classmethod
    def for_labels(cls, labels: Sequence[str], scheme: str | None = None) -> CRF:
        """Gives a CRF over `labels` that rules out the transitions their scheme (BIO or BIOES) forbids."""
        return cls(len(labels), allowed_transitions(labels, scheme or scheme_of_labels(labels)))

    def _scores(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (self.start + self.start_penalty, self.transitions + self.transition_penalty,
                self.end + self.end_penalty)

    @torch.no_grad()
    def tag_scores(self) -> TagScores:
        """Gives the scores decoding needs (learned, plus the scheme's penalties) as numpy arrays."""
        return TagScores(*(s.float().cpu().numpy() for s in self._scores()))

    def forward(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Gives log p(tags | emissions) per sequence, (B,); emissions (B, T, C), tags and mask (B, T).

        A row with an all-False mask gives 0 (it carries no words).
        """
        em = emissions.float()
        B, T, _ = em.shape
        mask = torch.ones(B, T, dtype=torch.bool, device=em.device) if mask is None else mask.bool()
        tags = tags.masked_fill(~mask, 0)
        start, trans, end = self._scores()
        rows = torch.arange(B, device=em.device)
        # score of the given path
        gold = start[tags[:, 0]] + em[rows, 0, tags[:, 0]]
        for t in range(1, T):
            step = trans[tags[:, t - 1], tags[:, t]] + em[rows, t, tags[:, t]]
            gold = gold + step * mask[:, t]
        last = tags[rows, (mask.sum(1) - 1).clamp(min=0)]
        gold = gold + end[last]
        # log partition function (forward algorithm)
        alpha = start + em[:, 0]  # (B, C)
        for t in range(1, T):
            nxt = torch.logsumexp(alpha[:, :, None] + trans[None] + em[:, t, None, :], dim=1)  # (B, C)
            alpha = torch.where(mask[:, t, None], nxt, alpha)
        log_z = torch.logsumexp(alpha + end, dim=1)
        return torch.where(mask[:, 0], gold - log_z, torch.zeros_like(log_z))

    def decode(self, emissions: torch.Tensor, mask: torch.Tensor | None = None) -> list[list[int]]:
        """Gives the best tag sequence of each row (Viterbi), as long as the row's mask (a prefix of the row)."""
        lengths = [emissions.shape[1]] * emissions.shape[0] if mask is None else mask.sum(1).tolist()
        return self.tag_scores().viterbi(emissions.detach().float().cpu().numpy(), lengths)


def pack_words(emissions: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gives the positions that carry a label (first sub-tokens), moved left: emissions (B, W, C), tags, mask (B, W).

    `labels` is the token-level label tensor of a batch, -100 where no word starts.
    """
    keep = labels != IGNORE  # (B, T)
    W = max(int(keep.sum(1).max()), 1)
    order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)[:, :W]  # kept positions first, in order
    mask = torch.gather(keep, 1, order)
    tags = torch.gather(labels, 1, order).masked_fill(~mask, 0)
    em = torch.gather(emissions, 1, order[:, :, None].expand(-1, -1, emissions.shape[-1]))
    return em, tags, mask
