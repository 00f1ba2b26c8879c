"""Google's `create_pretraining_data.py` on token ids: documents -> NSP sentence pairs -> (static) masks.

Instances are made exactly as Google's script makes them, with the same `random.Random` call
sequence: a target length per document (max_seq_length - 3, or with probability short_seq_prob a
random one in [2, max_seq_length - 3]), chunks of whole sentences up to it, a random split point
`a_end`, 50% the actual next sentences and 50% sentences from a random other document (the unused
sentences are put back), `truncate_seq_pair` removing a token at a time from the front or the back
of the longer segment, then (static masking) 15% of the non-special tokens, each replaced by [MASK]
80%, kept 10%, a random vocabulary token 10% of the time. As in Google's script, a chunk of a single
sentence always gets a random next segment, so somewhat more than half of the pairs are random (54%
on Brown with short_seq_prob 0.1; meta.json counts them).

Documents are sentences of ids laid end to end (`TokenizedDocuments`) and instances are spans into
them (`Instances`), so that nothing is copied until `assemble` lays the instances out for the shards.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..errors import BertkitError

if TYPE_CHECKING:
    from ..tokenizer import Tokenizer


# ---- settings ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InstanceSettings:
    """How sentence pairs and masks are made (Google's flags, plus dynamic masking and jieba words)."""

    max_seq_length: int = 128
    short_seq_prob: float = 0.1
    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    whole_word_masking: bool = False
    static_masking: bool = False
    dupe_factor: int = 1

    def __post_init__(self) -> None:
        if self.max_seq_length < 5:  # Google draws a target length from [2, max_seq_length - 3]
            raise BertkitError(f"max_seq_length must be at least 5, got {self.max_seq_length}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise BertkitError(f"short_seq_prob must be in [0, 1], got {self.short_seq_prob}")
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise BertkitError(f"masked_lm_prob must be in (0, 1), got {self.masked_lm_prob}")
        if self.max_predictions_per_seq < 1:
            raise BertkitError(f"max_predictions_per_seq must be positive, got {self.max_predictions_per_seq}")
        if self.dupe_factor < 1:
            raise BertkitError(f"dupe_factor must be positive, got {self.dupe_factor}")

    def num_to_predict(self, length: int) -> int:
        """Gives Google's number of masked tokens for a sequence of `length` tokens (specials included)."""
        return min(self.max_predictions_per_seq, max(1, round(length * self.masked_lm_prob)))


@dataclass(frozen=True)
class Vocab:
    """What instance making needs to know of the vocabulary."""

    size: int
    cls_id: int
    sep_id: int
    mask_id: int
    pad_id: int
    continuation: np.ndarray  # (size,) bool: the token is a "##" piece

    @classmethod
    def of(cls, tok: Tokenizer) -> Vocab:
        cont = np.zeros(tok.vocab_size, dtype=bool)
        for token, i in tok.vocab.items():
            cont[i] = token.startswith("##")
        return cls(tok.vocab_size, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id, tok.pad_token_id, cont)

    @property
    def dtype(self) -> type:
        return np.uint16 if self.size <= 65535 else np.uint32


def vocab_sha256(tok: Tokenizer) -> str:
    """Gives the sha256 of the vocabulary as vocab.txt holds it: each token and "\\n", in id order."""
    tokens = sorted(tok.vocab.items(), key=lambda kv: kv[1])
    return hashlib.sha256("".join(t + "\n" for t, _ in tokens).encode("utf-8")).hexdigest()


def default_max_predictions(max_seq_length: int, masked_lm_prob: float) -> int:
    """Gives ceil(max_seq_length * masked_lm_prob): Google's 20 for 128; never binds below round()."""
    return max(1, math.ceil(max_seq_length * masked_lm_prob - 1e-9))


# ---- tokenized documents --------------------------------------------------------------------------------


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Gives the concatenation of arange(s, s + n) for each (s, n), vectorized."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(lengths)
    offsets = np.repeat(starts - (ends - lengths), lengths)  # (total,)
    return offsets + np.arange(total)


def _offsets(lengths: Iterable[int] | np.ndarray) -> np.ndarray:
    """Gives [0, l0, l0 + l1, ...]: where each of the pieces of the given lengths starts, and the end."""
    return np.concatenate([[0], np.cumsum(np.asarray(lengths, dtype=np.int64))]).astype(np.int64)


@dataclass
class TokenizedDocuments:
    """Documents as sentences of token ids, laid end to end in one flat array."""

    ids: np.ndarray  # (T,) int32
    sentence_starts: np.ndarray  # (S + 1,) int64: sentence s is ids[sentence_starts[s] : sentence_starts[s + 1]]
    doc_starts: np.ndarray  # (D + 1,) int64: document d is sentences doc_starts[d] : doc_starts[d + 1]
    word_starts: np.ndarray | None = None  # (T,) uint8: 1 where a jieba word begins (Chinese whole words)

    @property
    def num_documents(self) -> int:
        return len(self.doc_starts) - 1

    @classmethod
    def from_lists(cls, docs: Sequence[Sequence[Sequence[int]]]) -> TokenizedDocuments:
        """Gives the flat form of documents given as lists of sentences of ids."""
        sentences = [s for d in docs for s in d]
        lengths = [len(s) for s in sentences]
        ids = np.fromiter(itertools.chain.from_iterable(sentences), dtype=np.int32, count=sum(lengths))
        return cls(ids, _offsets(lengths), _offsets([len(d) for d in docs]))

    @staticmethod
    def concat(parts: Sequence[TokenizedDocuments]) -> TokenizedDocuments:
        """Gives the documents of all parts, in order."""
        ws = [p.word_starts for p in parts]
        return TokenizedDocuments(
            ids=np.concatenate([p.ids for p in parts]),
            sentence_starts=_offsets(np.concatenate([np.diff(p.sentence_starts) for p in parts])),
            doc_starts=_offsets(np.concatenate([np.diff(p.doc_starts) for p in parts])),
            word_starts=None if any(w is None for w in ws) else np.concatenate(ws),  # type: ignore[arg-type]
        )

    def spans(self) -> list[list[tuple[int, int]]]:
        """Gives each document as a list of its sentences' (start, end) in `ids`."""
        starts = self.sentence_starts.tolist()
        bounds = self.doc_starts.tolist()
        return [[(starts[s], starts[s + 1]) for s in range(bounds[d], bounds[d + 1])] for d in range(len(bounds) - 1)]

    def subset(self, docs: Sequence[int]) -> TokenizedDocuments:
        """Gives the listed documents, in the given order (a copy)."""
        picked = np.asarray(docs, dtype=np.int64)
        s0, s1 = self.doc_starts[picked], self.doc_starts[picked + 1]  # (n,) sentence ranges
        t0, t1 = self.sentence_starts[s0], self.sentence_starts[s1]  # (n,) token ranges
        tokens = _ranges(t0, t1 - t0)
        sentences = _ranges(s0, s1 - s0)
        return TokenizedDocuments(
            ids=self.ids[tokens],
            sentence_starts=_offsets(np.diff(self.sentence_starts)[sentences]),
            doc_starts=_offsets(s1 - s0),
            word_starts=None if self.word_starts is None else self.word_starts[tokens],
        )


# ---- Google's algorithm ---------------------------------------------------------------------------------


@dataclass
class Instances:
    """Instances as spans into TokenizedDocuments.ids, in creation order, plus static masks if any."""

    a0: array = field(default_factory=lambda: array("q"))
    a1: array = field(default_factory=lambda: array("q"))
    b0: array = field(default_factory=lambda: array("q"))
    b1: array = field(default_factory=lambda: array("q"))
    random_next: array = field(default_factory=lambda: array("b"))
    # static masking: for mask m, instance mask_of[m] gets token mask_ids[m] at position mask_pos[m]
    mask_of: array = field(default_factory=lambda: array("q"))
    mask_pos: array = field(default_factory=lambda: array("q"))
    mask_ids: array = field(default_factory=lambda: array("q"))

    def __len__(self) -> int:
        return len(self.a0)


def truncate_pair(a0: int, a1: int, b0: int, b1: int, max_num_tokens: int, rng: random.Random) -> tuple[int, ...]:
    """Google's truncate_seq_pair on spans: one token at a time off the longer segment, front or back."""
    while (a1 - a0) + (b1 - b0) > max_num_tokens:
        if a1 - a0 > b1 - b0:
            if rng.random() < 0.5:
                a0 += 1
            else:
                a1 -= 1
        elif rng.random() < 0.5:
            b0 += 1
        else:
            b1 -= 1
    return a0, a1, b0, b1


def _google_masks(
    tokens: list[int], continuation: list[bool] | None, settings: InstanceSettings, vocab: Vocab, rng: random.Random
) -> tuple[list[int], list[int]]:
    """Google's create_masked_lm_predictions on ids: gives (positions, new ids) of the masked tokens.

    `continuation[i]` (whole-word masking) says token i continues the word before it.
    """
    cand: list[list[int]] = []
    for i, t in enumerate(tokens):
        if t == vocab.cls_id or t == vocab.sep_id:
            continue
        if continuation is not None and cand and continuation[i]:
            cand[-1].append(i)
        else:
            cand.append([i])
    rng.shuffle(cand)
    num_to_predict = settings.num_to_predict(len(tokens))
    positions: list[int] = []
    new_ids: list[int] = []
    for group in cand:
        if len(positions) >= num_to_predict:
            break
        if len(positions) + len(group) > num_to_predict:  # a whole word that does not fit is skipped
            continue
        for i in group:
            if rng.random() < 0.8:
                new = vocab.mask_id
            elif rng.random() < 0.5:
                new = tokens[i]
            else:
                new = rng.randint(0, vocab.size - 1)
            positions.append(i)
            new_ids.append(new)
    return positions, new_ids


def _instances_from_document(
    docs: list[list[tuple[int, int]]],
    d: int,
    flat: TokenizedDocuments,
    settings: InstanceSettings,
    vocab: Vocab,
    rng: random.Random,
    out: Instances,
) -> None:
    """Google's create_instances_from_document on sentence spans; appends to `out`."""
    doc = docs[d]
    max_num_tokens = settings.max_seq_length - 3  # [CLS] A [SEP] B [SEP]
    target = max_num_tokens
    if rng.random() < settings.short_seq_prob:
        target = rng.randint(2, max_num_tokens)
    chunk_start, length, i = 0, 0, 0
    while i < len(doc):
        length += doc[i][1] - doc[i][0]
        if i == len(doc) - 1 or length >= target:
            n_chunk = i - chunk_start + 1
            a_end = rng.randint(1, n_chunk - 1) if n_chunk >= 2 else 1
            a0, a1 = doc[chunk_start][0], doc[chunk_start + a_end - 1][1]
            if n_chunk == 1 or rng.random() < 0.5:
                is_random = 1
                target_b = target - (a1 - a0)
                for _ in range(10):
                    r = rng.randint(0, len(docs) - 1)
                    if r != d:
                        break
                other = docs[r]
                start = rng.randint(0, len(other) - 1)
                b0 = other[start][0]
                for j in range(start, len(other)):
                    b1 = other[j][1]
                    if b1 - b0 >= target_b:
                        break
                i -= n_chunk - a_end  # put the unused sentences back
            else:
                is_random = 0
                b0, b1 = doc[chunk_start + a_end][0], doc[i][1]
            a0, a1, b0, b1 = truncate_pair(a0, a1, b0, b1, max_num_tokens, rng)
            if settings.static_masking:
                _static_masks(flat, (a0, a1, b0, b1), settings, vocab, rng, len(out), out)
            out.a0.append(a0)
            out.a1.append(a1)
            out.b0.append(b0)
            out.b1.append(b1)
            out.random_next.append(is_random)
            chunk_start, length = i + 1, 0
        i += 1


def _static_masks(
    flat: TokenizedDocuments, span: tuple[int, int, int, int], settings: InstanceSettings, vocab: Vocab,
    rng: random.Random, instance: int, out: Instances,
) -> None:  # fmt: skip
    a0, a1, b0, b1 = span
    tokens = [vocab.cls_id, *flat.ids[a0:a1].tolist(), vocab.sep_id, *flat.ids[b0:b1].tolist(), vocab.sep_id]
    continuation = None
    if settings.whole_word_masking:
        if flat.word_starts is not None:
            starts = np.concatenate([[1], flat.word_starts[a0:a1], [1], flat.word_starts[b0:b1], [1]])
            continuation = (starts == 0).tolist()
        else:
            continuation = vocab.continuation[tokens].tolist()
    positions, new_ids = _google_masks(tokens, continuation, settings, vocab, rng)
    out.mask_of.extend([instance] * len(positions))
    out.mask_pos.extend(positions)
    out.mask_ids.extend(new_ids)


def create_instances(
    flat: TokenizedDocuments, settings: InstanceSettings, vocab: Vocab, rng: random.Random
) -> tuple[Instances, list[int]]:
    """Google's create_training_instances on tokenized documents: gives the instances in creation
    order and the shuffled order Google's final `rng.shuffle(instances)` puts them in."""
    docs = flat.spans()
    rng.shuffle(docs)
    out = Instances()
    for _ in range(settings.dupe_factor):
        for d in range(len(docs)):
            _instances_from_document(docs, d, flat, settings, vocab, rng, out)
    order = list(range(len(out)))
    rng.shuffle(order)  # the same draws as shuffling the instances themselves
    return out, order


# ---- instances -> arrays ------------------------------------------------------------------------------


@dataclass
class SplitArrays:
    """One split's instances as they go to disk: flat ids, index rows, static labels, word starts."""

    ids: np.ndarray  # (T,) uint16/uint32
    index: np.ndarray  # (N, 4) int64: offset, length, len_a, is_random_next
    labels: np.ndarray | None = None  # (T,) like ids, static masking
    word_starts: np.ndarray | None = None  # (T,) uint8, Chinese whole-word masking

    def __len__(self) -> int:
        return len(self.index)

    def slice(self, lo: int, hi: int) -> SplitArrays:
        """Gives instances lo:hi, their offsets made relative to the slice."""
        index = self.index[lo:hi].copy()
        t0, t1 = (int(index[0, 0]), int(index[-1, 0] + index[-1, 1])) if len(index) else (0, 0)
        index[:, 0] -= t0

        def cut(values: np.ndarray | None) -> np.ndarray | None:
            return None if values is None else values[t0:t1]

        return SplitArrays(self.ids[t0:t1], index, cut(self.labels), cut(self.word_starts))


def assemble(
    flat: TokenizedDocuments, inst: Instances, order: Sequence[int], vocab: Vocab, static: bool
) -> SplitArrays:
    """Gives the instances, in `order`, as flat `[CLS] A [SEP] B [SEP]` ids with an index (vectorized)."""
    perm = np.asarray(order, dtype=np.int64)
    a0, a1 = np.asarray(inst.a0)[perm], np.asarray(inst.a1)[perm]
    b0, b1 = np.asarray(inst.b0)[perm], np.asarray(inst.b1)[perm]
    la, lb = a1 - a0, b1 - b0
    length = la + lb + 3
    offset = _offsets(length)[:-1]
    total = int(length.sum())
    ids = np.empty(total, dtype=vocab.dtype)
    pos_a, pos_b = _ranges(offset + 1, la), _ranges(offset + la + 2, lb)
    src_a, src_b = _ranges(a0, la), _ranges(b0, lb)
    ids[pos_a] = flat.ids[src_a]
    ids[pos_b] = flat.ids[src_b]
    ids[offset] = vocab.cls_id
    ids[offset + la + 1] = vocab.sep_id
    ids[offset + length - 1] = vocab.sep_id
    index = np.stack([offset, length, la + 2, np.asarray(inst.random_next, dtype=np.int64)[perm]], axis=1)
    word_starts = None
    if flat.word_starts is not None:
        word_starts = np.ones(total, dtype=np.uint8)
        word_starts[pos_a] = flat.word_starts[src_a]
        word_starts[pos_b] = flat.word_starts[src_b]
    labels = None
    if static:
        where = np.empty(len(perm), dtype=np.int64)
        where[perm] = np.arange(len(perm))  # creation index -> output position
        at = offset[where[np.asarray(inst.mask_of, dtype=np.int64)]] + np.asarray(inst.mask_pos, dtype=np.int64)
        labels = np.zeros(total, dtype=vocab.dtype)
        labels[at] = ids[at]
        ids[at] = np.asarray(inst.mask_ids, dtype=np.int64)
    return SplitArrays(ids, index, labels, word_starts)
