"""Documents -> sentences of token ids, in buffers: what instance making starts from.

Documents are read in buffers (`buffer_mb` of text, at most `buffer_documents` documents): the pool
that a random next segment is drawn from (Google loads the whole corpus and draws from all of it;
a buffer bounds the memory). Documents of one sentence are dropped and counted (Google's script
always pairs them with a random next segment, which skews NSP further towards "random"), and so are
literal "[CLS]", "[SEP]", "[MASK]" or "[PAD]" in the text (which our tokenizer, like transformers',
turns into special ids, where Google's splits them into pieces). For Chinese whole-word masking a
token also gets whether it begins a jieba word (Chinese-BERT-wwm used LTP).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..corpus import Document
from ..errors import BertkitError
from ..text import cjk_share, has_cjk
from .instances import TokenizedDocuments, Vocab

if TYPE_CHECKING:
    from ..tokenizer import Tokenizer

_TOKENIZE_BATCH = 20_000  # sentences tokenized at once: bounds the Python lists Rust hands back


def jieba_module() -> Any:
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
    for _, start, _ in jieba_module().tokenize(sentence):
        inside[start] = 0
    return [0 if inside[start] else 1 for start, _ in offsets]


def tokenize_sentences(
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
    ids, lengths, ws = tokenize_sentences(sentences, tok, vocab, use_jieba)
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


def buffers(docs: Iterable[Document], max_bytes: float, max_docs: int) -> Iterator[tuple[list[Document], int]]:
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


def resolve_lang(lang: str, docs: list[Document]) -> str:
    """Gives "zh" when at least 30% of a sample of the first buffer's characters are CJK, else "en"."""
    if lang != "auto":
        return lang
    sample = "".join(p for doc in docs[:2000] for p in doc.paragraphs[:20])[:500_000]
    return "zh" if cjk_share(sample) >= 0.3 else "en"
