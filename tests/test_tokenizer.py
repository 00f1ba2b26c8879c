"""Tokenizer tests: id-for-id parity with transformers' pure-Python port of Google's tokenizer.

BertTokenizerLegacy is the reference (transformers' BertTokenizer is Rust-backed and shares the
discrepancies this module fixes). Real lines come from ../shared/data, sampled deterministically.
"""

from __future__ import annotations

import csv
import functools
import gzip
import itertools
import json
import pickle
import unicodedata
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import normalizers
from transformers.models.bert import BertTokenizerLegacy
from transformers.utils import logging as hf_logging

from bertkit.errors import BertkitError
from bertkit.tokenizer import Encoding, Tokenizer, _kept_lengths

hf_logging.set_verbosity_error()  # the reference warns on every longest_first pair truncation

EDGE_CASES = [
    "café naïve Ångström Zürich", "CAFÉ NAÏVE ÅNGSTRÖM ZÜRICH", "Hello World, This Is CASED Text.",
    "a\x00b\x07c\x1bd\x7fe\u200bf\u200dg\ufeffh\ufffdi", "\x00\x07\x1b\x7f\u200b\u200d\ufeff\ufffd",
    "a\tb\nc\rd\u00a0e\u2028f\u2029g\u3000h\u0085i\u000bj\u000ck", "\t\n\r\u00a0\u2028\u2029\u3000\u0085\u000b\u000c",
    "👍🏽 👨\u200d👩\u200d👧 emoji🎉ok 🥰🫠", "ＡＢＣ１２３！", "ひらがなとカタカナと漢字です。", "한국어 텍스트입니다", "مرحبا بالعالم",
    "สวัสดีครับ", "\u0301", "\u0301\u0302 a \u0300", "e\u0301 vs é", "x" * 100, "x" * 101, "é" * 100, "é" * 101,
    "!!!???...", "-_-", "«»„“”‹›", "", " ", "   \t\n ", "[MASK]", "[CLS] hi [SEP]", "the [MASK] sat", "a[MASK]b",
    "[mask] [Mask]", "[PAD][UNK][CLS]", "[[MASK]]", "[MA SK]",
    # Rust/Google differences, each fixed in bertkit.tokenizer:
    "ΟΔΟΣ ΣΑΣ aΣ. ΣΣ ΑΣ'Β ʰΣ",  # final sigma (str.lower) vs per-character lowercase
    "a\u0378b \U000e0080x \U0010fffd",  # unassigned and private-use code points are dropped
    "x\u2e5dy a\u2e55b\u2e56 c\U00010eadd \u061d",  # punctuation newer than Rust's Unicode tables
    "a\u166db",  # Po in old Unicode, So since: not punctuation
    "\U0002b820\U0002b8ff\U0002b920\U0002ceaf\U0002ceb0\U00030000\U0002f800",  # Google's CJK ranges
    "\uf900\uf901 \u212b \u2126 \u212a \u0958 \u037e",  # NFC singletons and composition exclusions
    "ŉ ǰ ΐ İstanbul I\u0307 ß ẞ ﬁ Ⅻ ǅ Ⓐ 𝐀 K ı ᏸ ꭰ",  # odd lower-casing
    "a\u1734b \u0f73 \u0344",  # Mc (changed in Unicode 14) and decomposing marks
]

MAX_LENGTHS = [1, 2, 3, 4, 5, 7, 8, 16, 33, 64, 128, 512]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _write(path: Path, tokens: list[str]) -> Path:
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return path


# --- real data, sampled deterministically --------------------------------------------------


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8-sig").replace("\r\n", "\n").split("\n") if line.strip()]


def _every(items: list, n: int) -> list:
    """Gives n items spread evenly over `items`."""
    return items[:: max(len(items) // n, 1)][:n]


def _column_sentences(path: Path, column: int, joiner: str) -> list[str]:
    """Gives the sentences of a CoNLL-style file (blank line between sentences), tokens joined."""
    sentences, current = [], []
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line.strip() or line.startswith("-DOCSTART-"):
            if current:
                sentences.append(joiner.join(current))
            current = []
        else:
            current.append(line.split()[column] if joiner else line.split("\t")[column])
    return sentences


def _squad_like(path: Path) -> tuple[list[str], list[str]]:
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    paragraphs = [p for article in data for p in article["paragraphs"]]
    questions = [q["question"] for p in paragraphs for q in p["qas"]]
    return [p["context"] for p in paragraphs], questions


@pytest.fixture(scope="module")
def english(shared_data: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """Gives ~2,000 English lines and ~450 pairs from seven data sets."""
    sst2 = [line.split("\t")[0] for line in _lines(shared_data / "sst2/train.tsv")[1:]]
    rte = [tuple(line.split("\t")[:2]) for line in _lines(shared_data / "rte/train.tsv")[1:]]
    mrpc = [tuple(line.split("\t")[3:5]) for line in _lines(shared_data / "mrpc/msr_paraphrase_train.txt")[1:]]
    conll = _column_sentences(shared_data / "conll2003/eng.train", 0, " ")
    contexts, questions = _squad_like(shared_data / "squad_v1.1/dev-v1.1.json")
    gutenberg = [
        paragraph
        for book in sorted((shared_data / "pretrain/en/gutenberg").glob("*.txt"))
        for paragraph in book.read_text(encoding="utf-8", errors="replace").split("\n\n")
        if paragraph.strip()
    ]
    brown = _lines(shared_data / "pretrain/en/brown.txt")
    singles = (_every(sst2, 400) + _every(conll, 300) + _every(questions, 250) + _every(contexts, 100)
               + _every(gutenberg, 400) + _every(brown, 300) + [s for p in _every(rte, 60) + _every(mrpc, 60) for s in p])
    pairs = _every(rte, 150) + _every(mrpc, 150) + list(zip(_every(questions, 150), _every(contexts, 150), strict=True))
    return singles, pairs


@pytest.fixture(scope="module")
def chinese(shared_data: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """Gives ~1,900 Chinese lines and ~350 pairs from six data sets."""
    pretrain = [line for f in sorted((shared_data / "pretrain/zh").glob("*.txt")) for line in _every(_lines(f), 100)]
    with open(shared_data / "waimai_10k/waimai_10k.csv", encoding="utf-8", newline="") as f:
        waimai = [row[1] for row in list(csv.reader(f))[1:]]
    ocnli = [json.loads(line) for line in _lines(shared_data / "ocnli/train.10k.json")]
    contexts, questions = _squad_like(shared_data / "cmrc2018/dev.json")
    msra = _column_sentences(shared_data / "msra_ner/train.bio.txt", 0, "")
    singles = (pretrain + _every(waimai, 400) + [r["sentence1"] for r in _every(ocnli, 300)]
               + _every(contexts, 100) + _every(questions, 200) + _every(msra, 400))
    pairs = [(r["sentence1"], r["sentence2"]) for r in _every(ocnli, 200)]
    pairs += list(zip(_every(questions, 150), _every(contexts, 150), strict=True))
    return singles, pairs


@pytest.fixture(scope="module")
def en_vocab(shared_data: Path) -> Path:
    return shared_data / "models/all-MiniLM-L6-v2/vocab.txt"


@pytest.fixture(scope="module")
def zh_vocab(shared_data: Path) -> Path:
    return shared_data / "vocab/bert-base-chinese-vocab.txt"


# --- parity with the reference ---------------------------------------------------------------


def _reference_rows(ref: BertTokenizerLegacy, texts: list[str], pairs: list[str] | None = None, **kw) -> dict:
    out = ref(texts, pairs, return_token_type_ids=True, return_attention_mask=True, **kw)
    return {k: out[k] for k in ("input_ids", "token_type_ids", "attention_mask")}


def _ours_rows(tok: Tokenizer, texts: list[str], pairs: list[str] | None = None, **kw) -> dict:
    out = tok(texts, pairs, **kw)
    return {k: out[k] for k in ("input_ids", "token_type_ids", "attention_mask")}


@pytest.mark.parametrize("language", ["english", "english-cased", "chinese"])
@pytest.mark.slow
def test_singles_match_reference_id_for_id(language, request, en_vocab, zh_vocab):
    vocab, lower = {"english": (en_vocab, True), "english-cased": (en_vocab, False), "chinese": (zh_vocab, True)}[language]
    singles, _ = request.getfixturevalue(language.removesuffix("-cased"))
    texts = singles + EDGE_CASES + [" ".join(singles[:300])]  # a very long text too
    ref, tok = BertTokenizerLegacy(str(vocab), do_lower_case=lower), Tokenizer.from_vocab_file(vocab, lower)
    expected, got = _reference_rows(ref, texts), _ours_rows(tok, texts)
    for field in expected:
        mismatches = [t for t, a, b in zip(texts, expected[field], got[field], strict=True) if a != b]
        assert not mismatches, f"{field}: {len(mismatches)} texts differ, first {mismatches[0][:200]!r}"
    assert [tok.tokenize(t) for t in EDGE_CASES] == [ref.tokenize(t) for t in EDGE_CASES]


@pytest.mark.parametrize(("lower", "strip", "chinese_chars"), [(True, False, True), (False, True, True), (True, None, False)])
def test_accent_and_chinese_options_match_reference(lower, strip, chinese_chars, english, chinese, zh_vocab):
    texts = english[0][:150] + chinese[0][:150] + EDGE_CASES
    options = {"do_lower_case": lower, "strip_accents": strip, "tokenize_chinese_chars": chinese_chars}
    ref, tok = BertTokenizerLegacy(str(zh_vocab), **options), Tokenizer.from_vocab_file(zh_vocab, **options)
    assert _ours_rows(tok, texts) == _reference_rows(ref, texts)


@pytest.mark.xfail(strict=True, reason="known residue: the reference checks for special tokens again after cleaning")
def test_special_token_hidden_by_control_characters(en_vocab):
    ref, tok = BertTokenizerLegacy(str(en_vocab)), Tokenizer.from_vocab_file(en_vocab)
    assert tok.tokenize("[MA\x00SK] [MAS\u212a]") == ref.tokenize("[MA\x00SK] [MAS\u212a]")  # [MASK] twice there


@pytest.mark.parametrize("language", ["english", "chinese"])
def test_count_is_the_length_of_the_encoding(language, request, en_vocab, zh_vocab):
    """count (the server's token budget) takes the cheap path: its lengths are encode_batch's, which the tests
    above hold to the reference id for id."""
    tok = Tokenizer.from_vocab_file(en_vocab if language == "english" else zh_vocab)
    singles, pairs = request.getfixturevalue(language)
    firsts, seconds = [p[0] for p in pairs], [p[1] for p in pairs]
    assert tok.count(singles) == [len(e.ids) for e in tok.encode_batch(singles)]
    assert tok.count(firsts, seconds) == [len(e.ids) for e in tok.encode_batch(firsts, seconds)]
    assert max(tok.count(singles)) > 512  # untruncated, as the budget counts a long context's windows
    with pytest.raises(ValueError, match="2 texts but 1 pairs"):
        tok.count(["a", "b"], ["c"])


@pytest.mark.parametrize("language", ["english", "chinese"])
@pytest.mark.slow
def test_truncated_pairs_match_reference(language, request, en_vocab, zh_vocab):
    vocab = en_vocab if language == "english" else zh_vocab
    _, pairs = request.getfixturevalue(language)
    firsts, seconds = [p[0] for p in pairs], [p[1] for p in pairs]
    ref, tok = BertTokenizerLegacy(str(vocab)), Tokenizer.from_vocab_file(vocab)
    # The reference's tokenization of each side, laid out by its own prepare_for_model for every
    # setting (re-tokenizing each time would take minutes), and its full __call__ on a subset.
    ref_a = [ref.convert_tokens_to_ids(ref.tokenize(t)) for t in firsts]
    ref_b = [ref.convert_tokens_to_ids(ref.tokenize(t)) for t in seconds]
    for strategy in ["longest_first", "only_second", "only_first"]:
        for max_length in MAX_LENGTHS:
            got = _ours_rows(tok, firsts, seconds, max_length=max_length, truncation=strategy)
            for i, (a, b) in enumerate(zip(ref_a, ref_b, strict=True)):
                expected = ref.prepare_for_model(a, b, truncation=strategy, max_length=max_length,
                                                 return_token_type_ids=True, return_attention_mask=True)
                for field in got:
                    assert got[field][i] == expected[field], (strategy, max_length, field, firsts[i][:80])
    for strategy, max_length in [(True, 24), ("only_second", 40), ("longest_first", 3)]:
        kw = {"max_length": max_length, "truncation": strategy, "padding": True}
        assert _ours_rows(tok, firsts[:60], seconds[:60], **kw) == _reference_rows(ref, firsts[:60], seconds[:60], **kw)


def test_truncation_rule_equals_reference_on_every_small_case(tmp_path):
    """Rust's longest_first gives an odd token to the second sequence and raises on too-short ones."""
    ref = BertTokenizerLegacy(str(_write(tmp_path / "vocab.txt", SPECIALS)))
    for strategy in ["longest_first", "only_first", "only_second"]:
        for len_a in range(7):
            for len_b in [None, *range(7)]:
                for max_length in range(16):
                    a, b = list(range(10, 10 + len_a)), None if len_b is None else list(range(50, 50 + len_b))
                    out = ref.prepare_for_model(a, b, truncation=strategy, max_length=max_length)["input_ids"]
                    expected = (sum(10 <= i < 50 for i in out), sum(i >= 50 for i in out))
                    kept = _kept_lengths(len_a, len_b, 2 if b is None else 3, max_length, strategy)
                    assert kept == expected, (strategy, len_a, len_b, max_length)


def test_tie_in_longest_first_keeps_the_extra_token_in_the_first_sequence(en_vocab):
    tok = Tokenizer.from_vocab_file(en_vocab)
    enc = tok.encode("a b c d e f", "g h i j k l", max_length=10, truncation=True)
    assert enc.tokens == ["[CLS]", "a", "b", "c", "d", "[SEP]", "g", "h", "i", "[SEP]"]
    # Rust would raise ("sequence too short"); the reference empties the second text and runs over.
    assert tok("a b c d e f", "g", max_length=4, truncation="only_second")["input_ids"] == tok("a b c d e f", "")["input_ids"]


@pytest.mark.parametrize("language", ["english", "chinese"])
def test_decode_matches_reference(language, request, en_vocab, zh_vocab):
    vocab = en_vocab if language == "english" else zh_vocab
    singles, _ = request.getfixturevalue(language)
    ref, tok = BertTokenizerLegacy(str(vocab)), Tokenizer.from_vocab_file(vocab)
    odd = [101, 7592, 1010, 2123, 1005, 1056, 2079, 2025, 100, 102, 0, 21127, 30521, 30522, 99999, -1]
    for ids in [*tok(singles[:300] + EDGE_CASES)["input_ids"], odd]:
        for skip in (True, False):
            assert tok.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip)
    ids = tok(singles[0])["input_ids"]
    assert tok.decode(torch.tensor(ids)) == ref.decode(ids, skip_special_tokens=True)


def test_special_tokens_mask_and_padding_match_reference(english, en_vocab):
    singles, pairs = english
    ref, tok = BertTokenizerLegacy(str(en_vocab)), Tokenizer.from_vocab_file(en_vocab)
    texts, seconds = singles[:20], [p[1] for p in pairs[:20]]
    for kw in [{"padding": True}, {"padding": "max_length", "max_length": 90, "truncation": True}, {"max_length": 5, "truncation": False}]:
        got = tok(texts, seconds, return_special_tokens_mask=True, **kw)
        expected = ref(texts, seconds, return_special_tokens_mask=True, return_token_type_ids=True, **kw)
        for field in ("input_ids", "token_type_ids", "attention_mask", "special_tokens_mask"):
            assert got[field] == expected[field], (kw, field)


# --- every character class, against the reference --------------------------------------------


@functools.cache
def _swept_code_points() -> tuple[int, ...]:
    """Gives every code point of short category runs; of long ones (ideographs, private use,
    unassigned), every 97th and the last."""
    points, run_start, previous = [], 0, None
    categories = [unicodedata.category(chr(cp)) for cp in range(0x110000)]
    for cp in range(0x110001):
        category = categories[cp] if cp < 0x110000 else None
        if category != previous:
            step = 1 if cp - run_start < 256 and previous not in ("Cn", "Cs") else 97
            points += [p for p in [*range(run_start, cp, step), cp - 1] if p >= 0 and not 0xD800 <= p <= 0xDFFF]
            run_start, previous = cp, category
    return tuple(sorted(set(points)))


@functools.cache
def _rust_normalization_residue() -> frozenset[int]:
    """Gives the code points Rust's (Unicode 10-era) normalization tables get wrong.

    They are combining marks new in Unicode 11-14, whose combining class Rust does not know (NFC
    neither reorders them nor composes across them), and U+11938, which Rust does not decompose.
    """
    nfc, nfd = normalizers.NFC(), normalizers.NFD()
    marks_or_composed = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF
                         and (unicodedata.category(chr(cp)).startswith("M") or unicodedata.decomposition(chr(cp)))]
    return frozenset(
        cp for cp in marks_or_composed
        if any(nfc.normalize_str(probe) != unicodedata.normalize("NFC", probe)
               for probe in (f"a{chr(cp)}\u0316", f"A{chr(cp)}\u0301", f"a\u0301{chr(cp)}"))
        or nfd.normalize_str(chr(cp)) != unicodedata.normalize("NFD", chr(cp))
    )


@pytest.mark.parametrize(("lower", "strip"), [(True, None), (False, None), (True, False), (False, True)])
def test_every_character_class_matches_reference(lower, strip):
    """Cleaning, whitespace, punctuation, CJK, NFC, lower-casing, accents: one code point at a time."""
    from transformers.models.bert.tokenization_bert_legacy import BasicTokenizer

    tok = Tokenizer(dict(zip(SPECIALS, range(5), strict=True)), do_lower_case=lower, strip_accents=strip)
    normalizer, pre_tokenizer = tok._backend.normalizer, tok._backend.pre_tokenizer
    # Known residue (see _rust_normalization_residue): pin its size and kind, check all else.
    residue = _rust_normalization_residue()
    assert len(residue) <= 100 and all(unicodedata.combining(chr(cp)) or cp == 0x11938 for cp in residue)
    basic = BasicTokenizer(do_lower_case=lower, strip_accents=strip)
    points = [cp for cp in _swept_code_points() if cp not in residue]
    chunk = 2000
    for start in range(0, len(points), chunk):
        text = " ".join(f"a{c}b {c}Σ xΣ{c} \u4e00{c}\u0316 A{c}\u0301" for c in map(chr, points[start : start + chunk]))
        ours = [w for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))]
        if ours != basic.tokenize(text):
            for c in map(chr, points[start : start + chunk]):  # name the first code point that differs
                one = f"a{c}b {c}Σ xΣ{c} \u4e00{c}\u0316 A{c}\u0301"
                ours_one = [w for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(one))]
                assert ours_one == basic.tokenize(one), f"U+{ord(c):04X} {unicodedata.category(c)}"


# --- offsets -----------------------------------------------------------------------------------


def _folded(text: str, lower: bool) -> str:
    """Gives text as the token spells it: cleaned, NFC, and lower-cased without accents if uncased."""
    text = "".join(c for c in text if not unicodedata.category(c).startswith("C") and c != "\ufffd")
    text = unicodedata.normalize("NFC", text)
    if lower:
        text = "".join(c for c in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(c) != "Mn")
    return text


@pytest.mark.parametrize("language", ["english", "english-cased", "chinese"])
def test_offsets_point_at_each_tokens_source(language, request, en_vocab, zh_vocab):
    vocab, lower = {"english": (en_vocab, True), "english-cased": (en_vocab, False), "chinese": (zh_vocab, True)}[language]
    singles, pairs = request.getfixturevalue(language.removesuffix("-cased"))
    tok = Tokenizer.from_vocab_file(vocab, lower)
    texts = singles + EDGE_CASES[:20]
    firsts, seconds = [p[0] for p in pairs[:100]], [p[1] for p in pairs[:100]]
    encodings = tok.encode_batch(texts) + tok.encode_batch(firsts, seconds)
    sources = [(t, t) for t in texts] + list(zip(firsts, seconds, strict=True))
    checked = 0
    for (first, second), enc in zip(sources, encodings, strict=True):
        words: dict[tuple[int, int], list[tuple[str, int, int]]] = {}
        for token, (start, end), seq, word in zip(enc.tokens, enc.offsets, enc.sequence_ids, enc.word_ids, strict=True):
            if seq is None:
                assert (start, end) == (0, 0)
                continue
            assert end > start
            if token != "[UNK]":
                words.setdefault((seq, word), []).append((token.removeprefix("##"), start, end))
        for (seq, _), pieces in words.items():
            text = first if seq == 0 else second
            # A piece may be part of one character (Hangul decomposes into jamo): it points at the
            # whole character, and the word's pieces spell its whole span.
            for piece, start, end in pieces:
                assert piece in _folded(text[start:end], lower), (text[:80], piece, text[start:end])
            span = text[pieces[0][1] : pieces[-1][2]]
            assert _folded(span, lower) == "".join(p for p, _, _ in pieces), (text[:80], span)
            checked += len(pieces)
    assert checked > 20_000


# --- the public API ------------------------------------------------------------------------------


def test_encoding_fields_and_call_conventions(en_vocab):
    tok = Tokenizer.from_vocab_file(en_vocab, model_max_length=512)
    enc = tok.encode("Hello, world!", "Second one")
    assert isinstance(enc, Encoding)
    assert enc.tokens == ["[CLS]", "hello", ",", "world", "!", "[SEP]", "second", "one", "[SEP]"]
    assert enc.sequence_ids == [None, 0, 0, 0, 0, None, 1, 1, None]
    assert enc.word_ids == [None, 0, 1, 2, 3, None, 0, 1, None]
    assert enc.offsets[1:5] == [(0, 5), (5, 6), (7, 12), (12, 13)] and enc.offsets[6] == (0, 6)
    assert enc.token_type_ids == [0] * 6 + [1] * 3 and enc.attention_mask == [1] * 9
    assert tok.encode("Hello", add_special_tokens=False).ids == [7592]

    single = tok("Hello, world!", return_offsets_mapping=True)
    assert single["input_ids"] == enc.ids[:6] and single["offset_mapping"][0] == (0, 0)
    pt = tok(["a b c", "d"], padding=True, return_tensors="pt")
    assert pt["input_ids"].dtype == torch.long and pt["input_ids"].shape == (2, 5)
    assert pt["attention_mask"].tolist() == [[1] * 5, [1, 1, 1, 0, 0]]
    assert tok("one", return_tensors="np")["input_ids"].shape == (1, 3)
    assert tok(["a"], padding="max_length", max_length=6, return_tensors="np")["input_ids"].tolist() == [[101, 1037, 102, 0, 0, 0]]
    with pytest.raises(ValueError, match="padding=True"):
        tok(["a b", "c"], return_tensors="pt")

    long_text = "word " * 600
    assert len(tok(long_text, max_length=16)["input_ids"]) == 602  # no truncation asked, none done
    assert len(tok(long_text, truncation=True)["input_ids"]) == 512  # model_max_length
    assert len(tok(long_text, max_length=16, truncation=True)["input_ids"]) == 16
    assert len(Tokenizer.from_vocab_file(en_vocab)(long_text, truncation=True)["input_ids"]) == 602  # no limit known

    batch = tok.encode_batch(["a", "b c d"], ["x", "y"], padding=True)
    assert [len(e.ids) for e in batch] == [7, 7] and batch[0].tokens[-1] == "[PAD]" and batch[0].attention_mask[-1] == 0
    assert tok.ids_for_pretraining(["Hello, world!", ""]) == [enc.ids[1:5], []]
    again = pickle.loads(pickle.dumps(tok))  # DataLoader workers receive it pickled
    assert again.encode("Hello, world!", "Second one") == enc and again.model_max_length == 512


def test_vocabulary_accessors(en_vocab):
    tok = Tokenizer.from_vocab_file(en_vocab)
    assert tok.vocab_size == 30522 == len(tok.vocab) and tok.do_lower_case
    assert (tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id) == (0, 100, 101, 102, 103)
    assert tok.all_special_ids == BertTokenizerLegacy(str(en_vocab)).all_special_ids
    assert tok.convert_tokens_to_ids(["hello", "##ing", "no-such-token"]) == [7592, 2075, 100]
    assert tok.convert_tokens_to_ids("hello") == 7592
    assert tok.convert_ids_to_tokens([7592, 2075, 10**6]) == ["hello", "##ing", "[UNK]"]
    assert tok.tokenize("Unaffable [MASK]!") == ["una", "##ffa", "##ble", "[MASK]", "!"]


def test_save_and_load_round_trip_and_transformers_reads_it(tmp_path, english, en_vocab):
    singles, _ = english
    for lower in (True, False):
        tok = Tokenizer.from_vocab_file(en_vocab, do_lower_case=lower, model_max_length=128)
        folder = tmp_path / f"lower-{lower}"
        tok.save_pretrained(folder)
        assert (folder / "vocab.txt").read_bytes() == en_vocab.read_bytes()
        again = Tokenizer.from_pretrained(folder)
        assert (again.do_lower_case, again.model_max_length) == (lower, 128)
        assert again.encode_batch(singles[:200]) == tok.encode_batch(singles[:200])
        ref = BertTokenizerLegacy.from_pretrained(str(folder))
        assert ref.do_lower_case is lower and ref.model_max_length == 128
        texts = [*singles[:200], "CAFÉ Zürich"]
        assert tok(texts, truncation=True)["input_ids"] == ref(texts, truncation=True)["input_ids"]
    from_hf_folder = Tokenizer.from_pretrained(en_vocab.parent)  # transformers' own config file
    assert from_hf_folder.do_lower_case and from_hf_folder.model_max_length == 512


# --- training ---------------------------------------------------------------------------------


def test_train_on_chinese_splits_characters_and_latin_words(shared_data):
    lines = [line for f in sorted((shared_data / "pretrain/zh").glob("*.txt")) for line in _every(_lines(f), 1500)]
    # Chinese corpora carry some Latin script (as Wikipedia does); these books carry almost none.
    latin = _every(_lines(shared_data / "pretrain/en/brown.txt"), 1000)
    tok = Tokenizer.train(lines + latin, vocab_size=8000)
    assert tok.vocab_size == 8000
    assert [tok.vocab[t] for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]] == [0, 1, 2, 3, 4]
    assert tok.tokenize("中华人民共和国成立了") == list("中华人民共和国成立了")
    pieces = tok.tokenize("Transformers")
    assert len(pieces) > 1 and not pieces[0].startswith("##") and "[UNK]" not in pieces
    assert all(p.startswith("##") for p in pieces[1:])
    assert "".join(p.removeprefix("##") for p in pieces) == "transformers"  # the word, lower-cased, in vocabulary pieces


@pytest.mark.slow
def test_train_on_english_leaves_few_unknowns_on_held_out_text(shared_data, tmp_path):
    paragraphs = [p for book in sorted((shared_data / "pretrain/en/gutenberg").glob("*.txt"))
                  for p in book.read_text(encoding="utf-8", errors="replace").split("\n\n") if p.strip()]
    train, held_out = [p for i, p in enumerate(paragraphs) if i % 10], paragraphs[::10]
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "train.txt").write_text("\r\n".join(train[::2]), encoding="utf-8")
    with gzip.open(tmp_path / "corpus" / "more.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(train[1::2]))
    tok = Tokenizer.train_from_files([tmp_path / "corpus"], vocab_size=8000)
    ids = [i for row in tok.ids_for_pretraining(held_out) for i in row]
    assert ids.count(tok.unk_token_id) / len(ids) <= 0.015
    assert "\r" not in "".join(tok.vocab)


def test_training_twice_on_the_same_text_gives_the_same_vocabulary_id_for_id():
    # tokenizers' own trainer gives these 3,000 lines different ids (and often different pieces)
    # from run to run: checked, 5 of 5 retrainings differed (huggingface/tokenizers#1794).
    with gzip.open(resources.files("bertkit") / "data/en/pretrain/gutenberg.txt.gz", "rt", encoding="utf-8") as f:
        lines = list(itertools.islice(f, 3000))
    first = Tokenizer.train(lines, vocab_size=2000)
    assert first.vocab_size == 2000
    assert all(Tokenizer.train(iter(lines), vocab_size=2000).vocab == first.vocab for _ in range(4))


def test_cased_training_keeps_case(english):
    singles, _ = english
    tok = Tokenizer.train(singles, vocab_size=2000, lowercase=False, min_frequency=1)
    assert not tok.do_lower_case and "The" in tok.vocab and "the" in tok.vocab
    assert tok.tokenize("The the")[0] == "The"


# --- bad input --------------------------------------------------------------------------------


def test_bad_vocabularies_name_the_file_and_the_problem(tmp_path):
    with pytest.raises(BertkitError, match=f"{tmp_path / 'nope'}: no such folder"):
        Tokenizer.from_pretrained(tmp_path / "nope")
    with pytest.raises(BertkitError, match="no tokenizer: neither vocab.txt nor tokenizer.json"):
        Tokenizer.from_pretrained(tmp_path)
    with pytest.raises(BertkitError, match=r"v1\.txt: vocabulary lacks the special token\(s\) \[CLS\] \[MASK\]"):
        Tokenizer.from_vocab_file(_write(tmp_path / "v1.txt", ["[PAD]", "[UNK]", "[SEP]", "a"]))
    with pytest.raises(BertkitError, match=r"v2\.txt line 7: duplicate token 'a' \(first on line 6\)"):
        Tokenizer.from_vocab_file(_write(tmp_path / "v2.txt", [*SPECIALS, "a", "a"]))
    (tmp_path / "v3.txt").write_bytes(b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nok\n\xff\xfe\n")
    with pytest.raises(BertkitError, match=r"v3\.txt line 7: not valid UTF-8"):
        Tokenizer.from_vocab_file(tmp_path / "v3.txt")
    (tmp_path / "v4.txt").write_bytes("\ufeff".encode() + "\n".join(SPECIALS).encode())
    with pytest.raises(BertkitError, match=r"\[PAD\] \(the file starts with a byte-order mark\)"):
        Tokenizer.from_vocab_file(tmp_path / "v4.txt")
    with pytest.raises(BertkitError, match="is a folder"):
        Tokenizer.from_vocab_file(tmp_path)


def test_bad_config_names_the_file_and_field(tmp_path):
    _write(tmp_path / "vocab.txt", [*SPECIALS, "a"])
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": "yes"}')
    with pytest.raises(BertkitError, match=r"tokenizer_config\.json: field 'do_lower_case' has the wrong type"):
        Tokenizer.from_pretrained(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text('{\n"do_lower_case": true,\n}')
    with pytest.raises(BertkitError, match=r"tokenizer_config\.json line 3: invalid JSON"):
        Tokenizer.from_pretrained(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text('{"unk_token": "<unk>"}')
    with pytest.raises(BertkitError, match="field 'unk_token' is '<unk>'"):
        Tokenizer.from_pretrained(tmp_path)


def test_bad_training_files_name_the_file(tmp_path):
    with pytest.raises(BertkitError, match=f"{tmp_path / 'missing.txt'}: no such file or folder"):
        Tokenizer.train_from_files([tmp_path / "missing.txt"], vocab_size=100)
    (tmp_path / "empty").mkdir()
    with pytest.raises(BertkitError, match="empty: folder holds no files"):
        Tokenizer.train_from_files([tmp_path / "empty"], vocab_size=100)
    (tmp_path / "bad.txt").write_bytes(b"fine line\nbad \xc3\x28 line\n")
    with pytest.raises(BertkitError, match=r"bad\.txt line 2: not valid UTF-8"):
        Tokenizer.train_from_files([tmp_path / "bad.txt"], vocab_size=100)
    (tmp_path / "broken.gz").write_bytes(b"not gzip at all")
    with pytest.raises(BertkitError, match=r"broken\.gz: cannot read"):
        Tokenizer.train_from_files([tmp_path / "broken.gz"], vocab_size=100)


def test_vocab_reads_the_files_prepare_reads(tmp_path):
    """One folder, the same files for `bertkit vocab` and `bertkit prepare` (bertkit.fileio.list_files): every file
    that is not hidden, whatever its extension; from JSON lines the text field only, not the JSON around it."""
    from bertkit.fileio import list_files

    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "a.txt").write_text("alpha alpha alpha\n", encoding="utf-8")
    (corpus / "sub" / "b.md").write_text("beta beta beta\n", encoding="utf-8")
    (corpus / "c.jsonl").write_text('{"text": "gamma gamma gamma", "meta": "delta"}\n', encoding="utf-8")
    (corpus / ".hidden.txt").write_text("epsilon epsilon epsilon\n", encoding="utf-8")
    assert [p.relative_to(corpus).as_posix() for p in list_files([corpus])] == ["a.txt", "c.jsonl", "sub/b.md"]
    vocab = Tokenizer.train_from_files([corpus], vocab_size=60, min_frequency=1).vocab
    assert {"alpha", "beta", "gamma"} <= set(vocab)
    assert not {"delta", "epsilon", "meta", "text", '"'} & set(vocab)


def test_real_latin1_book_is_named_with_its_line(shared_data):
    # Two Gutenberg books in the shared data hold Latin-1 bytes.
    with pytest.raises(BertkitError, match=r"chesterton-ball\.txt line 4631: not valid UTF-8"):
        Tokenizer.train_from_files([shared_data / "pretrain/en/gutenberg"], vocab_size=1000)


def test_bad_arguments_raise_value_errors(en_vocab):
    tok = Tokenizer.from_vocab_file(en_vocab)
    with pytest.raises(ValueError, match="truncation='sideways'"):
        tok("a", truncation="sideways")
    with pytest.raises(ValueError, match="2 texts but 1 pairs"):
        tok(["a", "b"], ["c"])
    with pytest.raises(TypeError):
        tok("a", ["b"])
    assert np.asarray(tok(["a"], return_tensors="np")["input_ids"]).dtype == np.int64
