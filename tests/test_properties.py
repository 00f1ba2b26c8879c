"""Property-based tests (hypothesis): the tokenizer and every reader take arbitrary input without
crashing (a clear BertkitError at worst), and round trips hold where they should."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertkit import BertkitError, Tokenizer
from bertkit.corpus import iter_documents, split_sentences
from bertkit.tasks import get_task

DATA = Path(__file__).parents[1] / "src" / "bertkit" / "data"
FAST = settings(max_examples=int(__import__("os").environ.get("HYPOTHESIS_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
ANY_TEXT = st.text(st.characters(codec="utf-8"), max_size=300)
WORDS = st.lists(st.sampled_from(["the", "whale", "emma", "said", "harpoon", "sea", "ship", "of", "a", "captain",
                                  "knightley", "rain", ",", ".", "!", "?", "ahab", "miss", "woodhouse"]), max_size=40)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    # the demo's own data trains a small vocabulary; no shared data needed
    lines = (DATA / "en" / "classify" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return Tokenizer.train([line.split("\t")[0] for line in lines], 2000)


@FAST
@given(text=ANY_TEXT, pair=st.one_of(st.none(), ANY_TEXT), max_length=st.integers(3, 40))
def test_tokenizer_never_crashes_and_keeps_its_invariants(tok: Tokenizer, text: str, pair: str | None, max_length: int) -> None:
    enc = tok.encode(text, pair, max_length=max_length, truncation=True)
    assert len(enc.ids) == len(enc.token_type_ids) == len(enc.offsets) == len(enc.tokens)
    assert enc.ids[0] == tok.cls_token_id and enc.ids[-1] == tok.sep_token_id
    assert all(0 <= i < tok.vocab_size for i in enc.ids)
    assert len(enc.ids) <= max(max_length, 3)
    for token, (start, end), seq in zip(enc.tokens, enc.offsets, enc.sequence_ids, strict=True):
        source = text if seq == 0 else pair
        if seq is not None and token != "[UNK]":
            assert 0 <= start < end <= len(source)
    tok.decode(enc.ids)
    batch = tok([text, text[:5]], [pair or "", ""] if pair is not None else None, padding=True, truncation=True,
                max_length=max_length, return_tensors="pt")
    assert batch["input_ids"].shape == batch["attention_mask"].shape


@FAST
@given(words=WORDS)
def test_decode_inverts_encode_on_known_words(tok: Tokenizer, words: list[str]) -> None:
    text = " ".join(words)
    decoded = tok.decode(tok.encode(text).ids)
    # Google's decode glues punctuation back the way `clean_up_tokenization_spaces` does
    assert decoded.replace(" ", "") == text.replace(" ", "")


@FAST
@given(text=ANY_TEXT)
def test_sentence_splitting_loses_no_text(text: str) -> None:
    sentences = split_sentences(text)
    assert all(s.strip() for s in sentences)
    assert "".join("".join(sentences).split()) == "".join(text.split())


def _write(data: bytes, suffix: str) -> Path:
    with tempfile.NamedTemporaryFile(delete=False, suffix=suffix) as f:
        f.write(data)
    return Path(f.name)


BYTES = st.one_of(st.binary(max_size=400), ANY_TEXT.map(lambda s: s.encode("utf-8")),
                  st.lists(st.lists(ANY_TEXT.filter(lambda s: "\n" not in s and "\t" not in s), min_size=1, max_size=5)
                           .map("\t".join), max_size=12).map(lambda rows: "\n".join(rows).encode("utf-8")))


@FAST
@given(data=BYTES, suffix=st.sampled_from([".txt", ".jsonl", ".gz", ".txt"]))
def test_corpus_reader_skips_or_reports_never_crashes(data: bytes, suffix: str) -> None:
    path = _write(data, suffix)
    try:
        for doc in iter_documents([path], on_error="skip"):
            assert all(isinstance(s, str) for s in doc.sentences())
        with _maybe_error():
            list(iter_documents([path], on_error="stop"))
    finally:
        path.unlink()


class _maybe_error:
    """Either nothing goes wrong or a BertkitError does: anything else is a bug."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, value, tb) -> bool:
        return kind is None or issubclass(kind, BertkitError)


@FAST
@given(data=BYTES, task=st.sampled_from(["classify", "pair", "qa", "ner"]), suffix=st.sampled_from([".tsv", ".csv", ".jsonl", ".json", ".txt"]))
def test_task_readers_never_crash(data: bytes, task: str, suffix: str) -> None:
    path = _write(data, suffix)
    try:
        for bad_rows in ("error", "skip"):
            with _maybe_error():
                options = {} if task == "qa" else {"bad_rows": bad_rows}
                dataset = get_task(task).read(path, **options)
                assert dataset.report.kept == len(dataset)
    finally:
        path.unlink()


@FAST
@given(text=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=80))
def test_ner_inputs_keep_character_spans(text: str) -> None:
    data = get_task("ner").inputs_from_texts([text])
    example = data.examples[0]
    for word, (start, end) in zip(example.words, example.spans, strict=True):
        assert text[start:end] == word
