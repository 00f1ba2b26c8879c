"""WordPiece tokenization with Google BERT's exact semantics, run by the Rust `tokenizers` library.

The reference is the pure-Python port of Google's tokenizer in transformers (`BertTokenizerLegacy`):
every id we produce must equal its id. The Rust building blocks differ from it in several places, so
bertkit composes its own pipeline: Google's BasicTokenizer (clean-up, lowercasing, accents,
punctuation and CJK splitting) as a Rust normalizer and pre-tokenizer (bertkit.basic_tokenizer),
then Rust's WordPiece. Truncation, special tokens and padding are done here in Python on whole
lists, with the reference's rules (its longest-first gives the odd token to the first sequence;
Rust's to the second; Rust raises where the reference keeps a too-short sequence).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import tokenizers
from tokenizers import AddedToken, models, trainers

from .basic_tokenizer import normalizer, pre_tokenizer
from .corpus import file_lines
from .errors import BertkitError
from .fileio import atomic_write_text, list_files
from .hub import resolve_model
from .vocab_files import (
    CLS,
    MASK,
    MAX_CHARS_PER_WORD,
    PAD,
    SEP,
    SPECIAL_TOKENS,
    UNK,
    read_tokenizer_folder,
    read_vocab_txt,
)

Truncation = bool | Literal["longest_first", "only_first", "only_second", "do_not_truncate"]
Padding = bool | Literal["longest", "max_length", "do_not_pad"]


@dataclass(frozen=True)
class Encoding:
    """One encoded sequence or pair; offsets index the original text its token came from."""

    ids: list[int]
    token_type_ids: list[int]
    attention_mask: list[int]
    tokens: list[str]
    offsets: list[tuple[int, int]]  # (0, 0) for [CLS], [SEP] and padding
    sequence_ids: list[int | None]  # None for [CLS], [SEP] and padding
    word_ids: list[int | None]


def _backend(
    vocab: dict[str, int] | None, lowercase: bool, strip_accents: bool, tokenize_chinese_chars: bool
) -> tokenizers.Tokenizer:
    """Gives a Rust tokenizer that produces word pieces only; specials and truncation are ours."""
    model = models.WordPiece(vocab or {}, unk_token=UNK, max_input_chars_per_word=MAX_CHARS_PER_WORD)
    backend = tokenizers.Tokenizer(model)
    backend.normalizer = normalizer(lowercase, strip_accents)
    backend.pre_tokenizer = pre_tokenizer(tokenize_chinese_chars)
    # Special tokens written in the text are matched in the raw text, before clean-up, as the
    # reference's trie does: "[MASK]" is one token, "[mask]" is three.
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return backend


# ---------------------------------------------------------------------------------------------
# Truncation and padding rules of transformers' Python tokenizers (prepare_for_model, pad).

_TRUNCATIONS = {"longest_first", "only_first", "only_second"}


def _check_texts(texts: list[str], pairs: Sequence[str] | None) -> None:
    """Refuses pairs of another count than the texts, and anything but str among either."""
    if pairs is not None and len(pairs) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(pairs)} pairs")
    if not all(isinstance(t, str) for t in itertools.chain(texts, pairs or ())):
        raise TypeError("texts and pairs must be str")


def _truncation_strategy(truncation: Truncation) -> str | None:
    if truncation is True:
        return "longest_first"
    if truncation is False or truncation == "do_not_truncate":
        return None
    if truncation not in _TRUNCATIONS:
        raise ValueError(f"truncation={truncation!r}: use True, False, or one of {sorted(_TRUNCATIONS)}")
    return truncation


def _padding_strategy(padding: Padding) -> str | None:
    if padding is True:
        return "longest"
    if padding is False or padding == "do_not_pad":
        return None
    if padding not in ("longest", "max_length"):
        raise ValueError(f"padding={padding!r}: use True, False, 'longest' or 'max_length'")
    return padding


def _kept_lengths(
    len_a: int, len_b: int | None, n_special: int, max_length: int | None, strategy: str | None
) -> tuple[int, int]:
    """Gives how many tokens of each sequence survive truncation, by transformers' rules.

    Longest-first removes from the longer sequence until both are equal, then alternates starting
    with the second, so an odd remainder favours the first. A sequence shorter than what must go
    is emptied, and the result may stay over max_length. max_length=0 means no limit there.
    """
    b = len_b or 0
    excess = len_a + b + n_special - (max_length or 0)
    if strategy is None or not max_length or excess <= 0:
        return len_a, b
    if strategy == "only_first" or (strategy == "longest_first" and len_b is None):
        return max(len_a - excess, 0), b
    if strategy == "only_second":
        return (len_a, max(b - excess, 0)) if b else (len_a, b)
    first = min(abs(b - len_a), excess)  # evens out the longer sequence
    second = excess - first  # then taken from both, the second giving the odd one
    if len_a > b:
        return max(len_a - first - second // 2, 0), max(b - (second - second // 2), 0)
    return max(len_a - second // 2, 0), max(b - first - (second - second // 2), 0)


def _clean_up_tokenization(text: str) -> str:
    """Gives transformers' clean_up_tokenization (Rust's decoder also rewrites " do not")."""
    for old, new in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                     (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(old, new)
    return text


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pauses the cyclic garbage collector while a batch's lists are built.

    A batch makes ~10^5 small lists; each 700 allocations start a collection, and the full ones
    scan the whole heap (torch, transformers): that doubled the time of a 10k-sentence batch.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# ---------------------------------------------------------------------------------------------


class Tokenizer:
    """BERT's WordPiece tokenizer: Google's semantics, Rust's speed, transformers' call conventions."""

    def __init__(
        self,
        vocab: dict[str, int],
        *,
        do_lower_case: bool = True,
        strip_accents: bool | None = None,
        tokenize_chinese_chars: bool = True,
        model_max_length: int | None = None,
    ) -> None:
        """Builds a tokenizer on `vocab` (token -> id, ids 0..n-1) holding the five BERT specials."""
        missing = [t for t in (UNK, CLS, SEP, MASK, PAD) if t not in vocab]
        if missing:
            raise BertkitError(f"vocabulary lacks the special token(s) {' '.join(missing)}")
        if sorted(vocab.values()) != list(range(len(vocab))):
            raise ValueError("vocabulary ids must be 0..n-1, each once")
        self._vocab = dict(vocab)
        self._id_to_token = sorted(self._vocab, key=self._vocab.__getitem__)
        self.do_lower_case = do_lower_case
        self.strip_accents = strip_accents
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.model_max_length = model_max_length
        strip = do_lower_case if strip_accents is None else strip_accents
        self._backend = _backend(self._vocab, do_lower_case, strip, tokenize_chinese_chars)
        self.pad_token_id, self.unk_token_id = self._vocab[PAD], self._vocab[UNK]
        self.cls_token_id, self.sep_token_id = self._vocab[CLS], self._vocab[SEP]
        self.mask_token_id = self._vocab[MASK]

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, do_lower_case={self.do_lower_case})"

    # --- loading, saving, training ---------------------------------------------------------

    @classmethod
    def from_vocab_file(
        cls,
        path: str | Path,
        do_lower_case: bool = True,
        strip_accents: bool | None = None,
        tokenize_chinese_chars: bool = True,
        model_max_length: int | None = None,
    ) -> Tokenizer:
        """Gives a tokenizer on a Google vocab.txt (one token a line, id = line number - 1)."""
        vocab = read_vocab_txt(Path(path))
        return cls(vocab, do_lower_case=do_lower_case, strip_accents=strip_accents,
                   tokenize_chinese_chars=tokenize_chinese_chars, model_max_length=model_max_length)

    @classmethod
    def from_pretrained(cls, folder: str | Path, *, revision: str | None = None) -> Tokenizer:
        """Gives the tokenizer in a folder holding vocab.txt or a BERT tokenizer.json, and optionally
        tokenizer_config.json (or of a Hugging Face model name, at `revision`)."""
        vocab, options = read_tokenizer_folder(resolve_model(folder, revision))
        return cls(vocab, **options)

    def save_pretrained(self, folder: str | Path) -> None:
        """Writes vocab.txt and a transformers-style tokenizer_config.json into `folder`, atomically."""
        folder = Path(folder)
        atomic_write_text(folder / "vocab.txt", "".join(t + "\n" for t in self._id_to_token))
        config: dict[str, Any] = {
            "clean_up_tokenization_spaces": True,
            "cls_token": CLS,
            "do_basic_tokenize": True,
            "do_lower_case": self.do_lower_case,
            "mask_token": MASK,
            "never_split": None,
            "pad_token": PAD,
            "sep_token": SEP,
            "strip_accents": self.strip_accents,
            "tokenize_chinese_chars": self.tokenize_chinese_chars,
            "tokenizer_class": "BertTokenizer",
            "unk_token": UNK,
        }
        if self.model_max_length is not None:
            config["model_max_length"] = self.model_max_length
        atomic_write_text(folder / "tokenizer_config.json", json.dumps(config, indent=2, sort_keys=True) + "\n")

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        vocab_size: int,
        *,
        min_frequency: int = 2,
        lowercase: bool = True,
        special_tokens: Sequence[str] = SPECIAL_TOKENS,
        limit_alphabet: int | None = None,
        show_progress: bool = False,
        strip_accents: bool | None = None,
        tokenize_chinese_chars: bool = True,
    ) -> Tokenizer:
        """Gives a tokenizer whose WordPiece vocabulary is learnt from `texts` (specials first, in order).

        The text is normalized and split exactly as when encoding, so every CJK ideograph is a word
        and the vocabulary of a cased tokenizer keeps case. `texts` is read twice (an iterator is
        first kept in a list): tokenizers' trainer numbers the "##" characters in hash order and
        breaks ties between equally frequent merges by those numbers, so the same text could give
        different pieces from run to run (huggingface/tokenizers#1794). A first pass collects the
        "##" characters; the second passes them sorted after the specials, which fixes their ids,
        so the same text and settings give the same vocabulary, id for id.
        """
        if vocab_size <= len(special_tokens):
            raise BertkitError(f"vocab_size={vocab_size} leaves no room beyond {len(special_tokens)} special tokens")
        if iter(texts) is texts:
            texts = list(texts)
        strip = lowercase if strip_accents is None else strip_accents

        def learn(size: int, specials: list[str]) -> dict[str, int]:
            backend = _backend(None, lowercase, strip, tokenize_chinese_chars)
            options: dict[str, Any] = {"limit_alphabet": limit_alphabet} if limit_alphabet is not None else {}
            trainer = trainers.WordPieceTrainer(
                vocab_size=size, min_frequency=min_frequency, show_progress=show_progress,
                special_tokens=specials, continuing_subword_prefix="##", **options,
            )
            backend.train_from_iterator(texts, trainer=trainer)
            return backend.get_vocab()

        alphabet = learn(len(special_tokens) + 1, list(special_tokens))  # no merges: the characters only
        continuing = sorted(piece for piece in alphabet if piece.startswith("##") and piece not in special_tokens)
        vocab = learn(vocab_size, [*special_tokens, *continuing])
        return cls(vocab, do_lower_case=lowercase, strip_accents=strip_accents,
                   tokenize_chinese_chars=tokenize_chinese_chars)

    @classmethod
    def train_from_files(cls, paths: Sequence[str | Path], vocab_size: int, on_error: str = "stop",
                         skipped: list[str] | None = None, **options: Any) -> Tokenizer:
        """Gives `train` on the lines of UTF-8 text files (.gz too); folders give all their files, as to `prepare`.

        A line that is not UTF-8 stops training with an error naming file and line, or with
        on_error="skip" is left out and named in `skipped` (when given)."""
        if on_error not in ("stop", "skip"):
            raise BertkitError(f"on_error must be 'stop' or 'skip', got {on_error!r}")
        bad = skipped if skipped is not None else []
        files = list_files(paths)

        class Lines:  # readable twice, as `train` reads it
            def __iter__(self) -> Iterator[str]:
                for f in files:
                    yield from file_lines(f, bad if on_error == "skip" else None)

        tok = cls.train(Lines(), vocab_size, **options)
        bad[:] = dict.fromkeys(bad)  # each skipped line once, though read twice
        return tok

    # --- vocabulary -------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    @property
    def vocab(self) -> dict[str, int]:
        """Gives a copy of token -> id."""
        return dict(self._vocab)

    @property
    def all_special_ids(self) -> list[int]:
        """Gives the special ids in transformers' order: [UNK], [SEP], [PAD], [CLS], [MASK]."""
        return [self.unk_token_id, self.sep_token_id, self.pad_token_id, self.cls_token_id, self.mask_token_id]

    def convert_tokens_to_ids(self, tokens: str | Iterable[str]) -> int | list[int]:
        """Gives the id of each token; unknown tokens give the [UNK] id."""
        if isinstance(tokens, str):
            return self._vocab.get(tokens, self.unk_token_id)
        return [self._vocab.get(t, self.unk_token_id) for t in tokens]

    def convert_ids_to_tokens(self, ids: int | Iterable[int]) -> str | list[str]:
        """Gives the token of each id; ids outside the vocabulary give "[UNK]" (as transformers does)."""
        if isinstance(ids, int):
            return self._token(ids)
        return [self._token(int(i)) for i in ids]

    def _token(self, i: int) -> str:
        return self._id_to_token[i] if 0 <= i < len(self._id_to_token) else UNK

    # --- encoding ---------------------------------------------------------------------------

    def words(self, text: str) -> list[str]:
        """Gives `text` split into words as BERT's basic tokenizer splits it, normalized as WordPiece reads them
        (lower-cased and without accents for an uncased vocabulary)."""
        normalizer = self._backend.normalizer
        normalized = normalizer.normalize_str(text) if normalizer is not None else text
        return [word for word, _ in self._backend.pre_tokenizer.pre_tokenize_str(normalized)]

    def tokenize(self, text: str) -> list[str]:
        """Gives the word pieces of `text`, without [CLS]/[SEP]."""
        return self._backend.encode(text, add_special_tokens=False).tokens

    def encode(
        self,
        text: str,
        pair: str | None = None,
        *,
        add_special_tokens: bool = True,
        max_length: int | None = None,
        truncation: Truncation = False,
    ) -> Encoding:
        """Gives the encoding of one text or text pair: [CLS] text [SEP] (pair [SEP])."""
        pairs = None if pair is None else [pair]
        (encoding,) = self.encode_batch([text], pairs, add_special_tokens=add_special_tokens,
                                        max_length=max_length, truncation=truncation)
        return encoding

    def encode_batch(
        self,
        texts: Sequence[str],
        pairs: Sequence[str] | None = None,
        *,
        add_special_tokens: bool = True,
        max_length: int | None = None,
        truncation: Truncation = False,
        padding: Padding = False,
    ) -> list[Encoding]:
        """Gives the encoding of each text (or text pair), tokenized in parallel by Rust."""
        with _gc_paused():
            columns = self._columns(texts, pairs, add_special_tokens, max_length, truncation, padding, _ENCODING_FIELDS)
            return [Encoding(*row) for row in zip(*columns.values(), strict=True)]

    def __call__(
        self,
        texts: str | Sequence[str],
        pairs: str | Sequence[str] | None = None,
        *,
        add_special_tokens: bool = True,
        max_length: int | None = None,
        truncation: Truncation = False,
        padding: Padding = False,
        return_tensors: Literal["pt", "np"] | None = None,
        return_offsets_mapping: bool = False,
        return_special_tokens_mask: bool = False,
    ) -> dict[str, Any]:
        """Gives model inputs as transformers does: input_ids, token_type_ids, attention_mask, ...

        Lists of lists for a batch, lists for a single str; with return_tensors a (batch, length)
        int64 tensor or array per key, a batch of one for a single str. max_length without
        truncation neither truncates nor warns.
        """
        if return_tensors not in (None, "pt", "np"):
            raise ValueError(f"return_tensors={return_tensors!r}: use 'pt', 'np' or None")
        single = isinstance(texts, str)
        if pairs is not None and isinstance(pairs, str) != single:
            raise TypeError("texts and pairs must both be a str or both a sequence of str")
        fields = ["input_ids", "token_type_ids", "attention_mask"]
        fields += ["offset_mapping"] * return_offsets_mapping + ["special_tokens_mask"] * return_special_tokens_mask
        with _gc_paused():
            columns = self._columns([texts] if single else texts, [pairs] if isinstance(pairs, str) else pairs,
                                    add_special_tokens, max_length, truncation, padding, fields)
        if return_tensors is not None:
            return {k: _as_tensor(k, rows, return_tensors) for k, rows in columns.items()}
        return {k: rows[0] for k, rows in columns.items()} if single else columns

    def count(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> list[int]:
        """Gives the tokens each text (or text pair) encodes to, specials included, untruncated: the lengths of
        `encode_batch`'s ids at a fraction of its cost (no offsets, no rows laid out)."""
        texts = list(texts)
        _check_texts(texts, pairs)
        with _gc_paused():
            pieces = [len(e.ids) for e in self._encode_pieces(texts + list(pairs or ()), offsets=False)]
        if pairs is None:
            return [n + 2 for n in pieces]
        return [a + b + 3 for a, b in zip(pieces[: len(texts)], pieces[len(texts) :], strict=True)]

    def ids_for_pretraining(self, texts: Sequence[str]) -> list[list[int]]:
        """Gives each text's word-piece ids, without specials or truncation (Rust, in parallel)."""
        with _gc_paused():
            return [e.ids for e in self._encode_pieces(list(texts), offsets=False)]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Gives the text of `ids` as BertTokenizerLegacy.decode does: ## pieces joined, spaces cleaned."""
        skip = set(self.all_special_ids) if skip_special_tokens else set()
        tokens = [self._token(i) for i in map(int, ids) if i not in skip]
        return _clean_up_tokenization(" ".join(tokens).replace(" ##", "").strip())

    def _encode_pieces(self, texts: list[str], offsets: bool) -> list[tokenizers.Encoding]:
        """Gives Rust's word pieces of each text, no specials; without offsets it does less work."""
        if offsets:
            return self._backend.encode_batch(texts, add_special_tokens=False)
        fast = getattr(self._backend, "encode_batch_fast", self._backend.encode_batch)  # tokenizers >= 0.20
        return fast(texts, add_special_tokens=False)

    def _columns(
        self,
        texts: Sequence[str],
        pairs: Sequence[str] | None,
        add_special_tokens: bool,
        max_length: int | None,
        truncation: Truncation,
        padding: Padding,
        fields: Sequence[str],
    ) -> dict[str, list[list[Any]]]:
        """Gives each of `fields` as a list with a row per text: Rust tokenizes, then we lay out and pad."""
        texts = list(texts)
        _check_texts(texts, pairs)
        strategy, pad = _truncation_strategy(truncation), _padding_strategy(padding)
        if max_length is None and (strategy or pad == "max_length"):
            max_length = self.model_max_length

        pieces = self._encode_pieces(texts + list(pairs or ()), offsets="offset_mapping" in fields)
        seconds = pieces[len(texts) :] if pairs is not None else [None] * len(texts)
        n_special = (2 if pairs is None else 3) if add_special_tokens else 0
        rows = []
        for a, b in zip(pieces[: len(texts)], seconds, strict=True):
            len_b = None if b is None else len(b.ids)
            n1, n2 = _kept_lengths(len(a.ids), len_b, n_special, max_length, strategy)
            rows.append(self._row(a, b, n1, n2, add_special_tokens, fields))

        longest = max((len(row["input_ids"]) for row in rows), default=0)
        target = longest if pad == "longest" else (max_length or 0) if pad == "max_length" else 0
        for row in rows:
            self._pad(row, target)
        return {f: [row[f] for row in rows] for f in fields}

    def _row(
        self, a: tokenizers.Encoding, b: tokenizers.Encoding | None, n1: int, n2: int, specials: bool,
        fields: Sequence[str],
    ) -> dict[str, list[Any]]:
        """Gives the fields of one sample: a's first n1 pieces (and b's first n2) with [CLS]/[SEP]."""

        def lay_out(first: list[Any], second: list[Any] | None, cls: Any, sep: Any) -> list[Any]:
            if not specials:
                return first[:n1] if second is None else first[:n1] + second[:n2]
            if second is None:
                return [cls, *first[:n1], sep]
            return [cls, *first[:n1], sep, *second[:n2], sep]

        pair = b is not None
        row = {"input_ids": lay_out(a.ids, b.ids if pair else None, self.cls_token_id, self.sep_token_id)}
        if specials and pair:
            row["token_type_ids"] = [0] * (n1 + 2) + [1] * (n2 + 1)
        else:  # transformers gives zeros to a pair encoded without specials
            row["token_type_ids"] = [0] * len(row["input_ids"])
        row["attention_mask"] = [1] * len(row["input_ids"])
        if "tokens" in fields:
            row["tokens"] = lay_out(a.tokens, b.tokens if pair else None, CLS, SEP)
        if "offset_mapping" in fields:
            row["offset_mapping"] = lay_out(a.offsets, b.offsets if pair else None, (0, 0), (0, 0))
        if "sequence_ids" in fields:
            row["sequence_ids"] = lay_out([0] * n1, [1] * n2 if pair else None, None, None)
        if "word_ids" in fields:
            row["word_ids"] = lay_out(a.word_ids, b.word_ids if pair else None, None, None)
        if "special_tokens_mask" in fields:
            row["special_tokens_mask"] = lay_out([0] * n1, [0] * n2 if pair else None, 1, 1)
        return row

    def _pad(self, row: dict[str, list[Any]], length: int) -> None:
        """Extends every field of the row to `length` with its padding value (as transformers pads)."""
        missing = length - len(row["input_ids"])
        if missing <= 0:
            return
        values = {"input_ids": self.pad_token_id, "token_type_ids": 0, "attention_mask": 0, "tokens": PAD,
                  "offset_mapping": (0, 0), "sequence_ids": None, "word_ids": None, "special_tokens_mask": 1}
        for field, column in row.items():
            column.extend([values[field]] * missing)


# Encoding's fields, in its order, under their transformers names.
_ENCODING_FIELDS = ("input_ids", "token_type_ids", "attention_mask", "tokens", "offset_mapping", "sequence_ids",
                    "word_ids")


def _as_tensor(field: str, rows: list[list[Any]], kind: str) -> Any:
    """Gives rows as one int64 array or tensor; ragged rows are an error, as in transformers."""
    import numpy as np

    if len({len(r) for r in rows}) > 1:
        raise ValueError(f"{field}: rows have different lengths; pass padding=True to return tensors")
    array = np.asarray(rows, dtype=np.int64)
    if field == "offset_mapping" and array.size == 0:
        array = array.reshape(len(rows), 0, 2)
    if kind == "np":
        return array
    import torch

    return torch.from_numpy(array)
