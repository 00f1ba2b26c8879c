"""Reading prepared data: instances by index from memory-mapped shards, masked as training reads them.

Dynamic masking (the default, as in RoBERTa): instances are stored unmasked and `example()` draws
the masks when training reads them, anew for each epoch, as a pure function of (seed, epoch,
index): a resumed run sees the same masks. The selection rule is Google's (num_to_predict =
min(max_predictions_per_seq, max(1, round(len * masked_lm_prob))), [CLS] and [SEP] never chosen,
whole words skipped when they do not fit, 80/10/10 per token); only the random numbers come from a
counter-based hash instead of `random.Random`. A whole word never spans [SEP] (Google's loop joins
a "##" piece that follows [SEP] to the word before it). Static masks, drawn by `prepare`, are read
as they are.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import IGNORE
from ..errors import BertkitError
from ..tokenizer import Tokenizer
from .instances import vocab_sha256
from .shards import read_meta

if TYPE_CHECKING:
    import torch


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


def instance_key(seed: int, epoch: int, index: int) -> int:
    """Gives the 64-bit key all of an instance's mask draws come from: a hash of (seed, epoch, index)."""
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


@dataclass(frozen=True)
class DynamicMasking:
    """Google's masking rule, its random numbers from a hash: what training draws for an instance in an epoch.

    `bertkit mask` shows one input through this same code (bertkit.views.masking).
    """

    masked_lm_prob: float
    max_predictions: int
    vocab_size: int
    mask_id: int

    def apply(self, ids: np.ndarray, len_a: int, key: int, word_starts: np.ndarray | None = None) -> np.ndarray:
        """Masks `ids` ([CLS] A [SEP] B [SEP], int64) in place; gives the MLM labels (the original id where a token
        is predicted, -100 elsewhere). `word_starts` (bool per token), for whole-word masking."""
        n = len(ids)
        k = min(self.max_predictions, max(1, round(n * self.masked_lm_prob)))
        h = _position_hashes(key, np.arange(n, dtype=np.uint64) * np.uint64(_GOLDEN))  # (n,)
        specials = [0, len_a - 1, n - 1]
        if word_starts is not None:
            chosen = _whole_word_choice(h, np.asarray(word_starts), specials, k)
        else:
            h[specials] = _MAX  # [CLS] and [SEP] are never chosen
            chosen = np.argpartition(h, k - 1)[:k]
        bits = h[chosen]  # (k,) the selection followed the high bits; the low 52 are still uniform
        labels = np.full(n, IGNORE, dtype=np.int64)
        labels[chosen] = ids[chosen]
        # One 20-bit uniform per token decides Google's 80% [MASK] / 10% keep / 10% random token.
        u = bits & _LOW20
        ids[chosen[u < _P80]] = self.mask_id
        replaced = u >= _P90
        random_ids = (((bits >> _S20) & _LOW32) * np.uint64(self.vocab_size)) >> _S32  # uniform in [0, V)
        ids[chosen[replaced]] = random_ids[replaced]
        return labels


# ---- reading prepared data --------------------------------------------------------------------------------


class PretrainingData:
    """One split ("train" or "eval") of a prepared folder, memory-mapped: instances by index."""

    def __init__(self, data_dir: str | Path, split: str = "train") -> None:
        self.data_dir = Path(data_dir)
        self.split = split
        self.meta = read_meta(self.data_dir)
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
        self.masking = DynamicMasking(float(masking["masked_lm_prob"]), int(masking["max_predictions_per_seq"]),
                                      self.vocab_size, self.mask_id)
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
            labels[labels == 0] = IGNORE
        else:
            word_starts = None
            if self.whole_word:  # jieba's words, stored; or WordPiece's: a word starts where no "##" piece is
                word_starts = (np.array(arrays["word_starts"][offset : offset + n]) if self._continuation is None
                               else ~self._continuation[ids])  # fmt: skip
            labels = self.masking.apply(ids, len_a, instance_key(seed, epoch, index), word_starts)
        return {"input_ids": ids, "token_type_ids": token_type_ids, "mlm_labels": labels,
                "nsp_label": np.int64(random_next)}  # fmt: skip


def collate(examples: list[dict[str, np.ndarray]], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """Gives a batch padded to its longest example: input_ids, token_type_ids, attention_mask,
    mlm_labels (-100 at padding) and nsp_labels, all torch.long."""
    import torch

    lengths = [len(e["input_ids"]) for e in examples]
    batch, width = len(examples), max(lengths, default=0)
    input_ids = np.full((batch, width), pad_token_id, dtype=np.int64)
    token_type_ids = np.zeros((batch, width), dtype=np.int64)
    attention_mask = np.zeros((batch, width), dtype=np.int64)
    mlm_labels = np.full((batch, width), IGNORE, dtype=np.int64)
    for row, (e, n) in enumerate(zip(examples, lengths, strict=True)):
        input_ids[row, :n] = e["input_ids"]
        token_type_ids[row, :n] = e["token_type_ids"]
        attention_mask[row, :n] = 1
        mlm_labels[row, :n] = e["mlm_labels"]
    nsp_labels = np.array([int(e["nsp_label"]) for e in examples], dtype=np.int64)
    return {
        "input_ids": torch.from_numpy(input_ids), "token_type_ids": torch.from_numpy(token_type_ids),
        "attention_mask": torch.from_numpy(attention_mask), "mlm_labels": torch.from_numpy(mlm_labels),
        "nsp_labels": torch.from_numpy(nsp_labels),
    }  # fmt: skip
