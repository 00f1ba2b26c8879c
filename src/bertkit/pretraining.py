"""Documents -> NSP sentence pairs -> MLM masks -> memory-mapped shards: BERT's pre-training data.

Instances are made exactly as Google's `create_pretraining_data.py` makes them, with the same
`random.Random` call sequence: a target length per document (max_seq_length - 3, or with
probability short_seq_prob a random one in [2, max_seq_length - 3]), chunks of whole sentences up
to it, a random split point `a_end`, 50% the actual next sentences and 50% sentences from a random
other document (the unused sentences are put back), `truncate_seq_pair` removing a token at a time
from the front or the back of the longer segment, then (static masking) 15% of the non-special
tokens, each replaced by [MASK] 80%, kept 10%, a random vocabulary token 10% of the time. As in
Google's script, a chunk of a single sentence always gets a random next segment, so somewhat more
than half of the pairs are random (54% on Brown with short_seq_prob 0.1; meta.json counts them).

Deviations from Google's script, each for a reason:

* Bounded memory: Google loads the whole corpus and samples the random-next document from all
  of it. Here documents are read in buffers (`buffer_mb` of text, default 8 MB, at most
  `buffer_documents` documents) and the random document comes from the same buffer. Each buffer
  is one call of Google's `create_training_instances` (shuffle the documents, `dupe_factor`
  passes, shuffle the instances) with its own `random.Random`; the first buffer's training part
  uses `random.Random(seed)` itself, so a corpus that fits one buffer (with eval_fraction=0) gives
  Google's output exactly.
* Documents of one sentence are skipped and counted: Google's script always pairs them with a
  random next segment, which skews NSP further towards "random".
* Dynamic masking (the default, as in RoBERTa): instances are stored unmasked and `example()`
  draws the masks when training reads them, anew for each epoch, as a pure function of
  (seed, epoch, index): a resumed run sees the same masks. The selection rule is Google's
  (num_to_predict = min(max_predictions_per_seq, max(1, round(len * masked_lm_prob))), [CLS] and
  [SEP] never chosen, whole words skipped when they do not fit, 80/10/10 per token); only the
  random numbers come from a counter-based hash instead of `random.Random`. A whole word never
  spans [SEP] (Google's loop joins a "##" piece that follows [SEP] to the word before it).
* Chinese whole-word masking takes its words from jieba (Chinese-BERT-wwm used LTP): the
  characters of one jieba word are masked together; tokens stay single characters.
* The held-out evaluation split is a share of each buffer's documents; its instances are made
  once (no `dupe_factor`).
* Literal "[CLS]", "[SEP]", "[MASK]" or "[PAD]" in the text (which our tokenizer, like
  transformers', turns into special ids, where Google's splits them into pieces) are dropped and
  counted.

How the work is spread: the main process reads documents into buffers; a process pool tokenizes
each buffer in chunks, then makes the buffer's instances; the main process streams them into
shards in buffer order. Every random choice depends on the seed and the buffer's number only, so
the output is the same for any number of workers. Memory is bounded by a buffer or two, whatever
the corpus size.

On disk (`out_dir`): `meta.json` (settings, counts, shards, timings; written last), and per shard
`{split}-{k:05d}.ids.npy` (uint16 when the vocabulary fits, else uint32; `[CLS] A [SEP] B [SEP]`
of every instance end to end), `.index.npy` (int64 rows: offset, length, len_a counting [CLS] and
the first [SEP], is_random_next), with static masking `.labels.npy` (the original id where a token
is masked, 0 elsewhere; the ids then hold the masked input), with Chinese whole-word masking
`.word_starts.npy` (uint8, 1 where a token begins a word); with dynamic whole-word masking on
WordPiece words `continuation.npy` (bool per vocabulary id: a "##" piece). Every file is written
to a temporary name and renamed when complete.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import hashlib
import itertools
import json
import math
import multiprocessing
import os
import random
import re
import struct
import sys
import time
from array import array
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .corpus import ReadReport, has_cjk, iter_documents, list_files
from .errors import BertkitError
from .fileio import atomic_path, atomic_write_text

if TYPE_CHECKING:
    import torch

    from .corpus import Document
    from .tokenizer import Tokenizer

FORMAT_VERSION = 1
LANGS = ("auto", "en", "zh")
BUFFER_MB = 8.0  # text per buffer (~1.4M English words): the pool random-next documents come from
BUFFER_DOCUMENTS = 50_000
SHARD_INSTANCES = 100_000
MIN_EVAL_DOCUMENTS = 10  # the evaluation split of a small corpus still gets this many (at most 5%)
_OUTPUT_NAME = re.compile(r"(train|eval)-\d{5}\.(ids|index|labels|word_starts)\.npy|continuation\.npy")
_TOKENIZE_BATCH = 20_000  # sentences tokenized at once: bounds the Python lists Rust hands back


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


def _truncate_pair(a0: int, a1: int, b0: int, b1: int, max_num_tokens: int, rng: random.Random) -> tuple[int, ...]:
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
            a0, a1, b0, b1 = _truncate_pair(a0, a1, b0, b1, max_num_tokens, rng)
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


# ---- the work of the pool: tokenize chunks of documents, make a buffer's instances -----------------------


@dataclass(frozen=True)
class JobConfig:
    """What every task of one prepare shares."""

    vocab_dir: str
    settings: InstanceSettings
    seed: int
    eval_fraction: float
    jieba: bool  # Chinese whole-word masking: word starts from jieba


_TOKENIZERS: dict[str, tuple[Tokenizer, Vocab]] = {}  # per process: vocab_dir -> loaded tokenizer


def _tokenizer(vocab_dir: str) -> tuple[Tokenizer, Vocab]:
    if vocab_dir not in _TOKENIZERS:
        from .tokenizer import Tokenizer

        tok = Tokenizer.from_pretrained(vocab_dir)
        _TOKENIZERS[vocab_dir] = (tok, Vocab.of(tok))
    return _TOKENIZERS[vocab_dir]


def _jieba() -> Any:
    try:
        import jieba
    except ImportError:
        raise BertkitError("Chinese whole-word masking needs the jieba segmenter: pip install jieba") from None
    import logging

    jieba.setLogLevel(logging.WARNING)
    return jieba


def _jieba_word_starts(sentence: str, offsets: list[tuple[int, int]]) -> list[int]:
    """Gives 1 for each token that begins a jieba word, 0 for one that starts inside a word
    (a later character of a Chinese word, or a "##" piece of an English one)."""
    inside = bytearray(b"\x01") * (len(sentence) + 1)
    for _, start, _ in _jieba().tokenize(sentence):
        inside[start] = 0
    return [0 if inside[start] else 1 for start, _ in offsets]


def _tokenize_sentences(
    sentences: list[str], tok: Tokenizer, vocab: Vocab, use_jieba: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Gives (flat ids, per-sentence lengths, flat word starts or None), tokenized in batches."""
    ids_parts, len_parts, ws_parts = [], [], []
    for lo in range(0, len(sentences), _TOKENIZE_BATCH):
        batch = sentences[lo : lo + _TOKENIZE_BATCH]
        if use_jieba:  # offsets align jieba's words with the tokens; the ids are the same
            enc = tok(batch, add_special_tokens=False, return_offsets_mapping=True)
            rows = enc["input_ids"]
            ws: list[int] = []
            for text, row, offsets in zip(batch, rows, enc["offset_mapping"], strict=True):
                if has_cjk(text):
                    ws += _jieba_word_starts(text, offsets)
                elif row:
                    ws += (~vocab.continuation[row]).astype(np.uint8).tolist()
            ws_parts.append(np.array(ws, dtype=np.uint8))
        else:
            rows = tok.ids_for_pretraining(batch)
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        ids_parts.append(np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int32, count=int(lengths.sum())))
        len_parts.append(lengths)
    ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, np.int32)
    lengths = np.concatenate(len_parts) if len_parts else np.zeros(0, np.int64)
    if not use_jieba:
        return ids, lengths, None
    return ids, lengths, np.concatenate(ws_parts) if ws_parts else np.zeros(0, np.uint8)


def tokenize_documents(
    docs: Sequence[Document], tok: Tokenizer, vocab: Vocab, use_jieba: bool, max_seq_length: int
) -> tuple[TokenizedDocuments, Counter[str]]:
    """Gives the documents' sentences as ids, without empty sentences, special ids and documents of
    fewer than two sentences; and counts of what was kept and dropped."""
    sentences: list[str] = []
    n_sentences = np.zeros(len(docs), dtype=np.int64)
    for d, doc in enumerate(docs):
        s = doc.sentences()
        sentences += s
        n_sentences[d] = len(s)
    ids, lengths, ws = _tokenize_sentences(sentences, tok, vocab, use_jieba)
    sentence_of = np.repeat(np.arange(len(lengths)), lengths)  # (T,)
    special = np.isin(ids, [vocab.cls_id, vocab.sep_id, vocab.mask_id, vocab.pad_id])
    n_special = int(special.sum())
    if n_special:  # literal "[SEP]" etc. in the text
        ids, sentence_of = ids[~special], sentence_of[~special]
        ws = None if ws is None else ws[~special]
        lengths = np.bincount(sentence_of, minlength=len(lengths)).astype(np.int64)
    doc_of = np.repeat(np.arange(len(docs)), n_sentences)  # (S,)
    kept_per_doc = np.bincount(doc_of[lengths > 0], minlength=len(docs))
    keep_doc = kept_per_doc >= 2
    keep_sentence = (lengths > 0) & keep_doc[doc_of]
    keep_token = keep_sentence[sentence_of]
    kept_lengths = lengths[keep_sentence]
    flat = TokenizedDocuments(
        ids=ids[keep_token],
        sentence_starts=np.concatenate([[0], np.cumsum(kept_lengths)]).astype(np.int64),
        doc_starts=np.concatenate([[0], np.cumsum(kept_per_doc[keep_doc])]).astype(np.int64),
        word_starts=None if ws is None else ws[keep_token],
    )
    counts = Counter({
        "documents": int(keep_doc.sum()),
        "sentences": int(keep_sentence.sum()),
        "tokens": int(kept_lengths.sum()),
        "skipped_documents_one_sentence": int((kept_per_doc == 1).sum()),
        "skipped_documents_without_tokens": int((kept_per_doc == 0).sum()),
        "skipped_sentences_without_tokens": int((lengths == 0).sum()),
        "skipped_special_tokens_in_text": n_special,
        "sentences_longer_than_max_seq_length": int((kept_lengths > max_seq_length - 3).sum()),
    })  # fmt: skip
    return flat, counts


def _tokenize_task(config: JobConfig, docs: list[Document]) -> tuple[TokenizedDocuments, Counter[str]]:
    tok, vocab = _tokenizer(config.vocab_dir)
    return tokenize_documents(docs, tok, vocab, config.jieba, config.settings.max_seq_length)


def _derive_seed(seed: int, *parts: object) -> int:
    return int.from_bytes(hashlib.sha256(repr((seed, *parts)).encode()).digest()[:8], "little")


def _eval_documents(n: int, fraction: float, first: bool, rng: random.Random) -> list[int]:
    """Gives which of a buffer's n documents are held out: none, or at least 2 (NSP needs two)."""
    if fraction <= 0 or n < 20:
        return []
    k = max(2, round(fraction * n))
    if first:
        k = max(k, min(MIN_EVAL_DOCUMENTS, n // 20))
    return sorted(rng.sample(range(n), k))


def _pool_instances(flat: TokenizedDocuments, settings: InstanceSettings, vocab: Vocab,
                    rng: random.Random) -> SplitArrays | None:  # fmt: skip
    if flat.num_documents < 2:  # no other document to draw a random next segment from
        return None
    inst, order = create_instances(flat, settings, vocab, rng)
    return assemble(flat, inst, order, vocab, settings.static_masking)


def buffer_instances(
    config: JobConfig, index: int, flat: TokenizedDocuments
) -> tuple[SplitArrays | None, SplitArrays | None, Counter[str]]:
    """Gives buffer `index`'s train and eval instances: hold out documents, then Google's algorithm."""
    _, vocab = _tokenizer(config.vocab_dir)
    rng = random.Random(_derive_seed(config.seed, "eval-documents", index))
    held = _eval_documents(flat.num_documents, config.eval_fraction, index == 0, rng)
    held_set = set(held)
    train_flat = flat.subset([d for d in range(flat.num_documents) if d not in held_set]) if held else flat
    # The first buffer draws from random.Random(seed) itself, as Google's script does.
    train_rng = random.Random(config.seed if index == 0 else _derive_seed(config.seed, "train", index))
    train = _pool_instances(train_flat, config.settings, vocab, train_rng)
    evals = None
    if held:  # evaluation instances are made once: no dupe_factor
        eval_settings = dataclasses.replace(config.settings, dupe_factor=1)
        evals = _pool_instances(flat.subset(held), eval_settings, vocab,
                                random.Random(_derive_seed(config.seed, "eval", index)))  # fmt: skip
    counts = Counter({"documents_eval": len(held)})
    if train is None:
        counts["skipped_documents_alone_in_buffer"] = train_flat.num_documents
    return train, evals, counts


class _InlinePool:
    """The Pool calls prepare uses, run in this process (workers <= 1)."""

    class _Done:
        def __init__(self, value: Any) -> None:
            self.value = value

        def ready(self) -> bool:
            return True

        def get(self) -> Any:
            return self.value

    def apply_async(self, fn: Any, args: tuple[Any, ...]) -> _InlinePool._Done:
        return self._Done(fn(*args))

    def terminate(self) -> None:
        pass

    def join(self) -> None:
        pass


def _pool(n: int) -> Any:
    """Gives a process pool: forked where the platform can (fast, and the caller's script needs no
    `__main__` guard), spawned elsewhere; or the in-process stand-in for n <= 1."""
    if n <= 1:
        return _InlinePool()
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn").Pool(n, initializer=_worker_init)


def _worker_init() -> None:
    # One worker per core: Rust's own thread pool would only oversubscribe (and warns after a fork).
    os.environ["TOKENIZERS_PARALLELISM"] = "false"


@dataclass
class _BufferJob:
    """A buffer on its way through the pool: tokenizing chunks, then making instances."""

    index: int
    nbytes: int
    chunks: list[Any]  # AsyncResults of _tokenize_task
    instances: Any = None  # AsyncResult of buffer_instances, once the chunks are done
    counts: Counter[str] = field(default_factory=Counter)

    def promote(self, pool: Any, config: JobConfig) -> None:
        """Joins the tokenized chunks and hands the buffer to instance making."""
        parts = [c.get() for c in self.chunks]
        self.chunks = []
        for _, counts in parts:
            self.counts.update(counts)
        flat = TokenizedDocuments.concat([flat for flat, _ in parts])
        self.instances = pool.apply_async(buffer_instances, (config, self.index, flat))


def _chunks(docs: list[Document], size: int) -> Iterator[list[Document]]:
    chunk: list[Document] = []
    n = 0
    for doc in docs:
        chunk.append(doc)
        n += doc.nbytes
        if n >= size:
            yield chunk
            chunk, n = [], 0
    if chunk:
        yield chunk


# ---- writing shards -------------------------------------------------------------------------------------


def _save(path: Path, array: np.ndarray) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, array, allow_pickle=False)


_NPY_HEADER_BYTES = 128  # reserved, so the header can be written last, once the shape is known


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """Gives a .npy (version 1.0) header of exactly _NPY_HEADER_BYTES bytes."""
    text = repr({"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape})
    body = text.encode("latin1")
    pad = _NPY_HEADER_BYTES - 10 - len(body) - 1
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", _NPY_HEADER_BYTES - 10) + body + b" " * pad + b"\n"


class _NpyAppender:
    """A .npy file written a block of rows at a time: a temporary file, renamed into place by close()."""

    def __init__(self, path: Path, dtype: np.dtype, row_shape: tuple[int, ...] = ()) -> None:
        self.dtype, self.row_shape, self.rows = np.dtype(dtype), row_shape, 0
        self._stack = contextlib.ExitStack()
        tmp = self._stack.enter_context(atomic_path(path))
        self._file = self._stack.enter_context(open(tmp, "wb"))  # noqa: SIM115 - closed by close()
        self._file.write(_npy_header(self.dtype, (0, *row_shape)))

    def append(self, values: np.ndarray) -> None:
        self._file.write(np.ascontiguousarray(values, dtype=self.dtype).tobytes())
        self.rows += len(values)

    def close(self) -> None:
        self._file.seek(0)
        self._file.write(_npy_header(self.dtype, (self.rows, *self.row_shape)))
        self._stack.close()  # closes the file, then fsyncs and renames it over the final name

    def discard(self) -> None:
        self._stack.__exit__(BertkitError, BertkitError("discarded"), None)  # removes the temporary file


class ShardWriter:
    """Streams one split's instances into shards of `shard_instances`: only the arriving block is in
    memory; each shard's files appear (atomically) when the shard is complete."""

    def __init__(self, out_dir: Path, split: str, shard_instances: int, dtype: np.dtype) -> None:
        self.out_dir, self.split, self.shard_instances, self.dtype = out_dir, split, shard_instances, dtype
        self.shards: list[dict[str, Any]] = []
        self._files: dict[str, _NpyAppender] = {}
        self._count = self._tokens = self._random_next = 0

    @property
    def instances(self) -> int:
        return self._count + sum(s["instances"] for s in self.shards)

    def add(self, arrays: SplitArrays | None) -> None:
        done = 0
        while arrays is not None and done < len(arrays):
            if not self._files:
                self._open(arrays)
            take = min(self.shard_instances - self._count, len(arrays) - done)
            part = arrays.slice(done, done + take)
            index = part.index.copy()
            index[:, 0] += self._tokens  # offsets within the shard
            self._files["ids"].append(part.ids)
            self._files["index"].append(index)
            if part.labels is not None:
                self._files["labels"].append(part.labels)
            if part.word_starts is not None:
                self._files["word_starts"].append(part.word_starts)
            self._count += take
            self._tokens += len(part.ids)
            self._random_next += int(part.index[:, 3].sum())
            done += take
            if self._count == self.shard_instances:
                self._close_shard()

    def close(self) -> list[dict[str, Any]]:
        if self._files:
            self._close_shard()
        return self.shards

    def discard(self) -> None:
        for f in self._files.values():
            f.discard()
        self._files = {}

    def _open(self, arrays: SplitArrays) -> None:
        name = f"{self.split}-{len(self.shards):05d}"
        kinds = {"ids": (self.dtype, ()), "index": (np.dtype(np.int64), (4,))}
        if arrays.labels is not None:
            kinds["labels"] = (self.dtype, ())
        if arrays.word_starts is not None:
            kinds["word_starts"] = (np.dtype(np.uint8), ())
        self._files = {k: _NpyAppender(self.out_dir / f"{name}.{k}.npy", dt, shape) for k, (dt, shape) in kinds.items()}

    def _close_shard(self) -> None:
        for f in self._files.values():
            f.close()
        self.shards.append({
            "name": f"{self.split}-{len(self.shards):05d}", "split": self.split, "instances": self._count,
            "tokens": self._tokens, "random_next": self._random_next,
        })  # fmt: skip
        self._files = {}
        self._count = self._tokens = self._random_next = 0


def _clear(out_dir: Path) -> None:
    """Removes what an earlier prepare left in `out_dir` (meta.json first: no meta, no data)."""
    (out_dir / "meta.json").unlink(missing_ok=True)
    for p in out_dir.iterdir():
        if _OUTPUT_NAME.fullmatch(p.name) or (p.name.startswith(".") and p.name.endswith(".tmp")):
            p.unlink(missing_ok=True)


# ---- prepare ----------------------------------------------------------------------------------------------


def _buffers(docs: Iterable[Document], max_bytes: float, max_docs: int) -> Iterator[tuple[list[Document], int]]:
    """Groups documents into buffers of (documents, bytes); a small last buffer joins the one before."""
    held: tuple[list[Document], int] | None = None
    current: list[Document] = []
    size = 0
    for doc in docs:
        current.append(doc)
        size += doc.nbytes
        if size >= max_bytes or len(current) >= max_docs:
            if held is not None:
                yield held
            held, current, size = (current, size), [], 0
    if current:
        if held is not None and size < 0.25 * max_bytes and len(current) < 0.25 * max_docs:
            held = (held[0] + current, held[1] + size)
        else:
            if held is not None:
                yield held
            held = (current, size)
    if held is not None:
        yield held


def _resolve_lang(lang: str, docs: list[Document]) -> str:
    """Gives "zh" when at least 30% of a sample of the first buffer's characters are CJK, else "en"."""
    if lang != "auto":
        return lang
    sample = "".join(p for doc in docs[:2000] for p in doc.paragraphs[:20])[:500_000]
    letters = sum(1 for c in sample if not c.isspace())
    cjk = sum(1 for c in sample if "\u3400" <= c <= "\u9fff" or "\uf900" <= c <= "\ufaff")
    return "zh" if letters and cjk / letters >= 0.3 else "en"


def _peak_rss_mb() -> dict[str, float]:
    """Gives the peak resident memory of this process and of its largest finished child, in MB."""
    import resource

    kib = 1024 if sys.platform != "darwin" else 1024 * 1024
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / kib
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / kib
    return {"main": round(own, 1), "largest_worker": round(child, 1)}


@dataclass
class _Run:
    """One prepare's moving parts: the pool, the buffers in flight, the shard writers, the counts."""

    config: JobConfig | None
    pool: Any
    writers: dict[str, ShardWriter]
    bar: Any
    max_in_flight: int
    chunk_bytes: int
    counts: Counter[str] = field(default_factory=Counter)
    jobs: deque[_BufferJob] = field(default_factory=deque)

    def submit(self, index: int, docs: list[Document], nbytes: int) -> None:
        assert self.config is not None
        chunks = [self.pool.apply_async(_tokenize_task, (self.config, c)) for c in _chunks(docs, self.chunk_bytes)]
        self.jobs.append(_BufferJob(index, nbytes, chunks))
        self.advance(self.max_in_flight)

    def advance(self, limit: int) -> None:
        """Moves finished tokenization on to instance making; writes the oldest buffers (in order)
        until no more than `limit` are in flight."""
        assert self.config is not None
        for job in self.jobs:
            if job.instances is None and all(c.ready() for c in job.chunks):
                job.promote(self.pool, self.config)
        while len(self.jobs) > limit:
            job = self.jobs[0]
            if job.instances is None:
                job.promote(self.pool, self.config)
            train, evals, counts = job.instances.get()
            self.jobs.popleft()
            self.writers["train"].add(train)
            self.writers["eval"].add(evals)
            self.counts.update(job.counts)
            self.counts.update(counts)
            self.bar.update(job.nbytes)
            self.bar.set_postfix(instances=self.writers["train"].instances + self.writers["eval"].instances)


def prepare(
    inputs: Sequence[str | Path],
    vocab_dir: str | Path,
    out_dir: str | Path,
    *,
    max_seq_length: int = 128,
    short_seq_prob: float = 0.1,
    masked_lm_prob: float = 0.15,
    max_predictions_per_seq: int | None = None,
    whole_word_masking: bool = False,
    static_masking: bool = False,
    dupe_factor: int | None = None,
    eval_fraction: float = 0.01,
    seed: int = 12345,
    input_format: str = "auto",
    text_field: str = "text",
    lang: str = "auto",
    on_error: str = "skip",
    workers: int | None = None,
    shard_instances: int = SHARD_INSTANCES,
    buffer_mb: float = BUFFER_MB,
    buffer_documents: int = BUFFER_DOCUMENTS,
    progress: bool = True,
) -> dict[str, Any]:
    """Gives the meta of the pre-training data it writes to `out_dir`: instances made from raw text.

    Args:
        inputs: text files (.txt, .gz, .jsonl) and folders (read recursively, sorted).
        vocab_dir: a folder with vocab.txt (and tokenizer_config.json): the tokenizer.
        out_dir: where the shards and meta.json go; an earlier prepare's files there are replaced.
        max_seq_length, short_seq_prob, masked_lm_prob: Google's flags, same defaults.
        max_predictions_per_seq: default ceil(max_seq_length * masked_lm_prob), Google's 20 for 128.
        whole_word_masking: mask whole words: "##" pieces with their word; for Chinese, jieba words.
        static_masking: draw the masks now, `dupe_factor` times (default 10, as Google);
            otherwise (default) `PretrainingData.example` draws them anew each epoch.
        dupe_factor: passes over the data (default 10 static, 1 dynamic).
        eval_fraction: share of documents held out as the "eval" split (0 for none).
        seed: seeds everything; the output does not depend on `workers`.
        input_format: "auto" (per file), "google", "paragraphs", "lines" or "jsonl" (see corpus.py).
        text_field: the text's field in JSON lines records.
        lang: "en", "zh" or "auto" (from the text); "zh" with whole-word masking uses jieba.
        on_error: "skip" (count and report) or "stop" (BertkitError) at bad files and lines.
        workers: processes that tokenize and make instances (default: the CPU count); <= 1: in-process.
        shard_instances: instances per shard file.
        buffer_mb, buffer_documents: the buffer a random-next document is drawn from.
        progress: show a progress bar (MB/s) and print a summary on stderr.
    """
    t_start = time.perf_counter()
    inputs = [Path(p) for p in inputs]
    out_dir = Path(out_dir)
    if lang not in LANGS:
        raise BertkitError(f"lang {lang!r} is not one of {', '.join(LANGS)}")
    if not 0.0 <= eval_fraction < 1.0:
        raise BertkitError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
    if shard_instances < 1 or buffer_mb <= 0 or buffer_documents < 2:
        raise BertkitError("shard_instances and buffer_mb must be positive, buffer_documents at least 2")
    settings = InstanceSettings(
        max_seq_length=max_seq_length, short_seq_prob=short_seq_prob, masked_lm_prob=masked_lm_prob,
        max_predictions_per_seq=max_predictions_per_seq or default_max_predictions(max_seq_length, masked_lm_prob),
        whole_word_masking=whole_word_masking, static_masking=static_masking,
        dupe_factor=dupe_factor if dupe_factor is not None else (10 if static_masking else 1),
    )  # fmt: skip
    tok, vocab = _tokenizer(str(Path(vocab_dir)))
    if static_masking and 0 not in tok.all_special_ids:
        raise BertkitError(f"{vocab_dir}: static masking stores label 0 for 'no prediction', but id 0 is not a special token")
    files = list_files(inputs)  # a missing input fails here, before anything is removed
    out_dir.mkdir(parents=True, exist_ok=True)
    _clear(out_dir)

    from tqdm import tqdm

    report = ReadReport()
    docs = iter_documents(files, input_format=input_format, text_field=text_field, on_error=on_error, report=report)
    n_workers = (os.cpu_count() or 1) if workers is None else workers
    total = None if any(f.suffix == ".gz" for f in files) else sum(f.stat().st_size for f in files)
    run = _Run(
        config=None, pool=_pool(n_workers),
        writers={split: ShardWriter(out_dir, split, shard_instances, np.dtype(vocab.dtype)) for split in ("train", "eval")},
        bar=tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1000, desc="prepare", disable=not progress),
        max_in_flight=1, chunk_bytes=max(2**16, int(buffer_mb * 1e6 / max(4 * n_workers, 1))),
    )  # fmt: skip
    resolved_lang = lang
    try:
        for k, (buffer, nbytes) in enumerate(_buffers(docs, buffer_mb * 1e6, buffer_documents)):
            if run.config is None:
                resolved_lang = _resolve_lang(lang, buffer)
                use_jieba = whole_word_masking and resolved_lang == "zh"
                if use_jieba:
                    _jieba()
                run.config = JobConfig(str(Path(vocab_dir)), settings, seed, eval_fraction, use_jieba)
            run.submit(k, buffer, nbytes)
        if run.config is not None:
            run.advance(0)
        run.bar.update(max(0, report.bytes - run.bar.n))  # buffers count text; the bar ends at the bytes read
    except BaseException:
        for writer in run.writers.values():  # no half-written shard: remove the temporary files
            writer.discard()
        raise
    finally:
        run.pool.terminate()
        run.pool.join()
        run.bar.close()

    shards = run.writers["train"].close() + run.writers["eval"].close()
    if not any(s["split"] == "train" for s in shards):
        _clear(out_dir)
        first = f"; first problem: {report.messages[0]}" if report.messages else ""
        raise BertkitError(
            f"{', '.join(map(str, inputs))}: no training instances: NSP needs at least two documents of two or "
            f"more sentences ({run.counts['documents']} found, {run.counts['skipped_documents_one_sentence']} "
            f"of one sentence); {report.summary()}{first}"
        )
    jieba = run.config is not None and run.config.jieba
    if whole_word_masking and not static_masking and not jieba:
        _save(out_dir / "continuation.npy", vocab.continuation)  # the "##" pieces: dynamic masking's words
    elapsed = time.perf_counter() - t_start
    meta = {
        "format_version": FORMAT_VERSION,
        "vocab_sha256": vocab_sha256(tok),
        "vocab_size": vocab.size,
        "do_lower_case": tok.do_lower_case,
        "special_ids": {"pad": vocab.pad_id, "cls": vocab.cls_id, "sep": vocab.sep_id, "mask": vocab.mask_id},
        "dtype": np.dtype(vocab.dtype).name,
        "max_seq_length": settings.max_seq_length,
        "short_seq_prob": settings.short_seq_prob,
        "masking": _masking_meta(settings, jieba),
        "lang": resolved_lang,
        "seed": seed,
        "eval_fraction": eval_fraction,
        "input_format": input_format,
        "buffer": {"mb": buffer_mb, "documents": buffer_documents},
        "inputs": [str(p) for p in inputs],
        "files": len(files),
        "counts": _counts_meta(run.counts, shards),
        "read": report.to_dict(),
        "shards": shards,
        "timings": {"seconds": round(elapsed, 3), "mb_per_s": round(report.bytes / 1e6 / max(elapsed, 1e-9), 3),
                    "workers": n_workers, "peak_rss_mb": _peak_rss_mb()},
    }
    atomic_write_text(out_dir / "meta.json", json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    if progress:
        n = meta["counts"]["instances"]
        dropped = ", ".join(f"{v} {k.removeprefix('skipped_').replace('_', ' ')}" for k, v in sorted(run.counts.items())
                            if k.startswith("skipped_") and v)  # fmt: skip
        print(f"bertkit prepare: {report.summary()}{f'; skipped {dropped}' if dropped else ''}; {n['train']} train + "
              f"{n['eval']} eval instances in {elapsed:.1f}s ({meta['timings']['mb_per_s']:.2f} MB/s) -> {out_dir}",
              file=sys.stderr)  # fmt: skip
    return meta


def _masking_meta(settings: InstanceSettings, jieba: bool) -> dict[str, Any]:
    return {
        "mode": "static" if settings.static_masking else "dynamic",
        "masked_lm_prob": settings.masked_lm_prob,
        "max_predictions_per_seq": settings.max_predictions_per_seq,
        "whole_word_masking": settings.whole_word_masking,
        "words": ("jieba" if jieba else "wordpiece") if settings.whole_word_masking else None,
        "dupe_factor": settings.dupe_factor,
        "random_token": "uniform over the whole vocabulary, as Google",
    }


def _counts_meta(counts: Counter[str], shards: list[dict[str, Any]]) -> dict[str, Any]:
    per_split = {split: [s for s in shards if s["split"] == split] for split in ("train", "eval")}
    return {
        **{k: counts[k] for k in sorted(counts)},
        "instances": {split: sum(s["instances"] for s in v) for split, v in per_split.items()},
        "instance_tokens": {split: sum(s["tokens"] for s in v) for split, v in per_split.items()},
        "random_next": {split: sum(s["random_next"] for s in v) for split, v in per_split.items()},
    }


# ---- dynamic masks: a counter-based hash of (seed, epoch, index, position) ---------------------------------

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_C1, _C2 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)
_S33, _S20, _S32 = np.uint64(33), np.uint64(20), np.uint64(32)
_LOW20, _LOW32 = np.uint64(0xFFFFF), np.uint64(0xFFFFFFFF)
_P80, _P90 = np.uint64(round(0.8 * 2**20)), np.uint64(round(0.9 * 2**20))  # P(20 random bits < _P80) = 0.8
_MAX = np.uint64(_M64)


def _splitmix(x: int) -> int:
    x = (x + _GOLDEN) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _instance_key(seed: int, epoch: int, index: int) -> int:
    return _splitmix(_splitmix(_splitmix(seed & _M64) ^ (epoch & _M64)) ^ (index & _M64))


def _position_hashes(key: int, golden: np.ndarray) -> np.ndarray:
    """Gives 64 random bits per position: murmur3's fmix64 of key + position * golden ratio."""
    h = golden + np.uint64(key)  # (n,) uint64, wraps
    h ^= h >> _S33
    h *= _C1
    h ^= h >> _S33
    h *= _C2
    h ^= h >> _S33
    return h


def _whole_word_choice(h: np.ndarray, starts: np.ndarray, specials: list[int], k: int) -> np.ndarray:
    """Gives the positions of Google's whole-word selection: words in a random order, each taken
    when it still fits in k (a word that does not fit is skipped), until k tokens are chosen."""
    n = len(h)
    starts = starts.astype(bool)
    starts[specials] = True
    after = [p + 1 for p in specials if p + 1 < n]
    starts[after] = True  # a word never spans [CLS]/[SEP]
    first = np.flatnonzero(starts)  # (G,)
    sizes = np.diff(np.append(first, n))  # (G,)
    keys = h[first]
    group = np.cumsum(starts) - 1  # (n,) word of each position
    keys[group[specials]] = _MAX
    order = np.argsort(keys)
    cum = np.cumsum(sizes[order])
    p = int(np.searchsorted(cum, k, side="right"))
    chosen = np.zeros(len(first), dtype=bool)
    chosen[order[:p]] = True
    count = int(cum[p - 1]) if p else 0
    if count < k:
        for g, size in zip(order[p:].tolist(), sizes[order[p:]].tolist(), strict=True):
            if keys[g] == _MAX:  # only [CLS]/[SEP] are left
                break
            if count + size <= k:
                chosen[g] = True
                count += size
                if count == k:
                    break
    return np.flatnonzero(chosen[group])


# ---- reading prepared data ---------------------------------------------------------------------------------


def _read_meta(data_dir: Path) -> dict[str, Any]:
    path = data_dir / "meta.json"
    if not data_dir.is_dir():
        raise BertkitError(f"{data_dir}: no such folder (make one with `bertkit prepare`)")
    if not path.is_file():
        raise BertkitError(f"{data_dir}: no meta.json: not a prepared data folder, or its prepare did not finish")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BertkitError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION:
        version = meta.get("format_version") if isinstance(meta, dict) else None
        raise BertkitError(f"{path}: format_version {version!r}, expected {FORMAT_VERSION} (prepare the data again)")
    for key in ("vocab_sha256", "vocab_size", "max_seq_length", "masking", "shards", "special_ids"):
        if key not in meta:
            raise BertkitError(f"{path}: field '{key}' is missing")
    return meta


class PretrainingData:
    """One split ("train" or "eval") of a prepared folder, memory-mapped: instances by index."""

    def __init__(self, data_dir: str | Path, split: str = "train") -> None:
        self.data_dir = Path(data_dir)
        self.split = split
        self.meta = _read_meta(self.data_dir)
        if split not in ("train", "eval"):
            raise BertkitError(f"split {split!r} is not 'train' or 'eval'")
        try:
            self._configure()
        except (KeyError, TypeError, ValueError) as e:
            raise BertkitError(f"{self.data_dir / 'meta.json'}: malformed ({type(e).__name__}: {e})") from None

    def _configure(self) -> None:
        split = self.split
        self._shards = [s for s in self.meta["shards"] if s["split"] == split]
        masking = self.meta["masking"]
        self.static = masking["mode"] == "static"
        self.whole_word = bool(masking["whole_word_masking"]) and not self.static
        self._kinds = ["ids", "index"] + (["labels"] if self.static else [])
        if self.whole_word and masking.get("words") == "jieba":
            self._kinds.append("word_starts")
        for shard in self._shards:
            for kind in self._kinds:
                path = self.data_dir / f"{shard['name']}.{kind}.npy"
                if not path.is_file():
                    raise BertkitError(f"{path}: missing (the data folder is incomplete: prepare it again)")
        self._starts = list(itertools.accumulate([s["instances"] for s in self._shards], initial=0))
        self._arrays: list[dict[str, np.ndarray] | None] = [None] * len(self._shards)
        special = self.meta["special_ids"]
        self.pad_id, self.cls_id, self.sep_id, self.mask_id = special["pad"], special["cls"], special["sep"], special["mask"]
        self.vocab_size = int(self.meta["vocab_size"])
        self.masked_lm_prob = float(masking["masked_lm_prob"])
        self.max_predictions = int(masking["max_predictions_per_seq"])
        length = int(self.meta["max_seq_length"])
        self._golden = np.arange(length, dtype=np.uint64) * np.uint64(_GOLDEN)  # (L,) wraps
        self._continuation: np.ndarray | None = None
        if self.whole_word and "word_starts" not in self._kinds:
            self._continuation = self._load_continuation()

    def _load_continuation(self) -> np.ndarray:
        path = self.data_dir / "continuation.npy"
        if not path.is_file():
            raise BertkitError(f"{path}: missing (the data folder is incomplete: prepare it again)")
        return np.load(path)

    def __len__(self) -> int:
        return self._starts[-1]

    def __getstate__(self) -> dict[str, Any]:  # data-loader workers reopen the memory maps
        state = dict(self.__dict__)
        state["_arrays"] = [None] * len(self._shards)
        return state

    def _shard(self, s: int) -> dict[str, np.ndarray]:
        arrays = self._arrays[s]
        if arrays is None:
            shard = self._shards[s]
            arrays = {}
            for kind in self._kinds:
                path = self.data_dir / f"{shard['name']}.{kind}.npy"
                try:
                    # a plain ndarray view of the map: indexing a np.memmap costs more
                    arrays[kind] = np.load(path, mmap_mode="r").view(np.ndarray)
                except (ValueError, OSError) as e:
                    raise BertkitError(f"{path}: unreadable ({e}): prepare the data again") from None
            if arrays["index"].shape != (shard["instances"], 4) or len(arrays["ids"]) != shard["tokens"]:
                raise BertkitError(f"{self.data_dir / shard['name']}.*.npy: sizes differ from meta.json: prepare the data again")
            self._arrays[s] = arrays
        return arrays

    def token_counts(self) -> np.ndarray:
        """How often each vocabulary id occurs in this split's text, special tokens included: (vocab_size,) int64."""
        counts = np.zeros(self.vocab_size, dtype=np.int64)
        for s in range(len(self._shards)):
            counts += np.bincount(self._shard(s)["ids"], minlength=self.vocab_size)[: self.vocab_size]
        return counts

    def check_compatible(self, vocab_dir_or_tokenizer: str | Path | Tokenizer, max_position_embeddings: int) -> None:
        """Raises BertkitError when this data was prepared for another vocabulary or a longer sequence."""
        tok = vocab_dir_or_tokenizer
        if isinstance(tok, (str, Path)):
            from .tokenizer import Tokenizer

            tok = Tokenizer.from_pretrained(tok)
        digest = vocab_sha256(tok)
        if digest != self.meta["vocab_sha256"]:
            raise BertkitError(
                f"{self.data_dir}: prepared with another vocabulary (vocab_size {self.meta['vocab_size']}, "
                f"sha256 {self.meta['vocab_sha256'][:12]}) than the model's (vocab_size {tok.vocab_size}, "
                f"sha256 {digest[:12]}): prepare the data with this vocabulary"
            )
        if "do_lower_case" in self.meta and bool(self.meta["do_lower_case"]) != bool(tok.do_lower_case):
            raise BertkitError(f"{self.data_dir}: prepared with do_lower_case={self.meta['do_lower_case']}, "
                               f"the tokenizer has do_lower_case={tok.do_lower_case}")  # fmt: skip
        if self.meta["max_seq_length"] > max_position_embeddings:
            raise BertkitError(f"{self.data_dir}: max_seq_length {self.meta['max_seq_length']} exceeds the model's "
                               f"max_position_embeddings {max_position_embeddings}")  # fmt: skip

    def example(self, index: int, epoch: int, seed: int) -> dict[str, np.ndarray]:
        """Gives instance `index`: input_ids, token_type_ids, mlm_labels (-100 where nothing is
        predicted) and nsp_label (0 = IsNext, 1 = random). Dynamic masks are a function of
        (seed, epoch, index); static ones were drawn by prepare."""
        if not 0 <= index < len(self):
            raise IndexError(f"instance {index} out of range for {len(self)} {self.split} instances")
        s = bisect.bisect_right(self._starts, index) - 1
        arrays = self._shard(s)
        offset, n, len_a, random_next = arrays["index"][index - self._starts[s]].tolist()
        ids = np.array(arrays["ids"][offset : offset + n], dtype=np.int64)  # (n,)
        token_type_ids = np.zeros(n, dtype=np.int64)
        token_type_ids[len_a:] = 1
        if self.static:
            labels = np.array(arrays["labels"][offset : offset + n], dtype=np.int64)
            labels[labels == 0] = -100
        else:
            labels = self._mask(ids, len_a, arrays, offset, _instance_key(seed, epoch, index))
        return {"input_ids": ids, "token_type_ids": token_type_ids, "mlm_labels": labels,
                "nsp_label": np.int64(random_next)}  # fmt: skip

    def _mask(self, ids: np.ndarray, len_a: int, arrays: dict[str, np.ndarray], offset: int, key: int) -> np.ndarray:
        """Masks `ids` in place (Google's rule, random bits from the hash); gives the MLM labels."""
        n = len(ids)
        k = min(self.max_predictions, max(1, round(n * self.masked_lm_prob)))
        h = _position_hashes(key, self._golden[:n])  # (n,)
        specials = [0, len_a - 1, n - 1]
        if self.whole_word:
            starts = (arrays["word_starts"][offset : offset + n] if self._continuation is None
                      else ~self._continuation[ids])  # fmt: skip
            chosen = _whole_word_choice(h, np.array(starts), specials, k)
        else:
            h[specials] = _MAX  # [CLS] and [SEP] are never chosen
            chosen = np.argpartition(h, k - 1)[:k]
        bits = h[chosen]  # (k,) the selection followed the high bits; the low 52 are still uniform
        labels = np.full(n, -100, dtype=np.int64)
        labels[chosen] = ids[chosen]
        # One 20-bit uniform per token decides Google's 80% [MASK] / 10% keep / 10% random token.
        u = bits & _LOW20
        ids[chosen[u < _P80]] = self.mask_id
        replaced = u >= _P90
        random_ids = (((bits >> _S20) & _LOW32) * np.uint64(self.vocab_size)) >> _S32  # uniform in [0, V)
        ids[chosen[replaced]] = random_ids[replaced]
        return labels


def collate(examples: list[dict[str, np.ndarray]], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """Gives a batch padded to its longest example: input_ids, token_type_ids, attention_mask,
    mlm_labels (-100 at padding) and nsp_labels, all torch.long; span_starts and span_ends where the
    examples carry span-selection answers."""
    import torch

    lengths = [len(e["input_ids"]) for e in examples]
    batch, width = len(examples), max(lengths, default=0)
    input_ids = np.full((batch, width), pad_token_id, dtype=np.int64)
    token_type_ids = np.zeros((batch, width), dtype=np.int64)
    attention_mask = np.zeros((batch, width), dtype=np.int64)
    mlm_labels = np.full((batch, width), -100, dtype=np.int64)
    for row, (e, n) in enumerate(zip(examples, lengths, strict=True)):
        input_ids[row, :n] = e["input_ids"]
        token_type_ids[row, :n] = e["token_type_ids"]
        attention_mask[row, :n] = 1
        mlm_labels[row, :n] = e["mlm_labels"]
    nsp_labels = np.array([int(e["nsp_label"]) for e in examples], dtype=np.int64)
    batch = {
        "input_ids": torch.from_numpy(input_ids), "token_type_ids": torch.from_numpy(token_type_ids),
        "attention_mask": torch.from_numpy(attention_mask), "mlm_labels": torch.from_numpy(mlm_labels),
        "nsp_labels": torch.from_numpy(nsp_labels),
    }  # fmt: skip
    if examples and "span_start" in examples[0]:  # span-selection questions (bertkit.spans)
        for key in ("span_start", "span_end"):
            batch[f"{key}s"] = torch.tensor([int(e[key]) for e in examples], dtype=torch.long)
    return batch
