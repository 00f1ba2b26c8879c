"""Readers for the formats fine-tuning data comes in, each giving a `Dataset` and its `ReadReport`.

| reader        | files                                                         | examples     |
|---------------|---------------------------------------------------------------|--------------|
| `read_table`  | TSV/CSV, header or not (SST-2, RTE, MRPC's MSRP, waimai_10k)  | TextExample  |
| `read_jsonl`  | JSON lines (OCNLI, CLUE)                                      | TextExample  |
| `read_squad`  | SQuAD v1.1/v2.0 JSON, CMRC 2018                               | QAExample    |
| `read_conll`  | CoNLL columns (CoNLL-2003, MSRA's `char<TAB>tag`)             | TagExample   |

Bad input, and what happens to it (`bad_rows="error"` is the default; "skip" counts and reports):

- empty file, file with a header and no rows, unreadable JSON for SQuAD: BertkitError naming the file.
- a table row with the wrong number of columns, a JSON line that is not a JSON object, a CoNLL line
  with the wrong number of columns or a malformed tag: BertkitError naming file and line, or with
  `bad_rows="skip"` a counted skip (CoNLL: the whole sentence goes).
- a row whose label is "-" or empty (OCNLI: 50 dev rows and 15 train rows without gold): a counted
  skip, always.
- a SQuAD answer whose offset is wrong (7 in CMRC 2018 dev, 5 in trial): relocated to the occurrence
  of its text nearest the given offset, counted as fixed; a Latin/numeric answer found inside a longer
  word ("gold" in "golden") moves to a whole-word occurrence when there is one, counted as fixed; an
  answer whose text is not in the context (193 in CMRC 2018 dev): a counted skip naming the question
  id (the question stays if another answer is found; it goes, counted, if none is).
- a label never seen in training: found at featurize time, a BertkitError (see the task modules).
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from ..errors import BertkitError
from .base import Dataset, ReadReport
from .schemes import SCHEMES, check_tag, convert, detect_scheme

# csv refuses fields over 128 KiB by default; long documents are legitimate here.
csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))

BadRows = Literal["error", "skip"]
NO_GOLD = ("-", "")  # label values that mean "annotators did not agree": skipped, counted

# Column / field names recognised without a mapping, matched case-insensitively, first match wins.
DEFAULT_NAMES: dict[str, tuple[str, ...]] = {
    "text": ("sentence", "sentence1", "text", "text_a", "review", "#1 string", "premise", "content",
             "sentence_a", "question1"),
    "pair": ("sentence2", "text_b", "#2 string", "hypothesis", "sentence_b", "question2"),
    "label": ("label", "quality", "gold_label", "score", "labels", "class", "sentiment", "target"),
}  # fmt: skip


@dataclass(frozen=True)
class TextExample:
    """A text, or a text pair, with its label as written in the file (None when unlabelled)."""

    text: str
    pair: str | None
    label: str | None
    line: int  # 1-based line in the source file (index + 1 for user text)


@dataclass(frozen=True)
class Answer:
    text: str
    start: int  # character offset into the context, checked: context[start:start+len(text)] == text


@dataclass(frozen=True)
class QAExample:
    """A question on a context; `answers` are located in the context, `gold_texts` are all annotated.

    Scoring uses `gold_texts`, as the official scripts do (they never look at offsets); training uses
    the first located answer. `is_impossible` is None for user questions (no gold at all).
    """

    qid: str
    question: str
    context: str
    answers: tuple[Answer, ...]
    gold_texts: tuple[str, ...]
    is_impossible: bool | None
    title: str = ""


@dataclass(frozen=True)
class TagExample:
    """A sentence as words (or characters) with one tag per word; `spans` index `text` when known."""

    words: tuple[str, ...]
    tags: tuple[str, ...] | None
    line: int  # line of the first word; word i is on line + i in a CoNLL file
    text: str | None = None  # the original text, for user input
    spans: tuple[tuple[int, int], ...] | None = None  # each word's (start, end) in `text`


# ---------------------------------------------------------------------------------------------------
# Shared helpers


def _read_text(path: Path) -> str:
    """Gives the file's text (a UTF-8 BOM removed); BertkitError for a missing, empty or non-UTF-8 file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BertkitError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BertkitError(f"{path}: is a folder, expected a file") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise BertkitError(f"{path} line {line}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
    if not text.strip():
        raise BertkitError(f"{path}: file is empty")
    return text


def _lines(text: str) -> list[str]:
    """Gives the lines of a file's text; only \\n, \\r\\n and \\r end a line (not U+2028 and the like)."""
    return io.StringIO(text, newline=None).read().split("\n")


def _bad(report: ReadReport, bad_rows: BadRows, path: Path, place: str, kind: str, detail: str = "") -> None:
    """Raises BertkitError for a bad row, or counts it as skipped (by `kind`) when `bad_rows="skip"`."""
    if bad_rows == "error":
        raise BertkitError(f"{path} {place}: {kind}{detail} (pass bad_rows='skip' to skip such rows)")
    report.skip(kind, place)


def _resolve(
    names: list[str] | None, columns: dict[str, str | int | None] | None, n_cols: int, path: Path,
    fields: Sequence[str], sample: list[list[str]], require_pair: bool,
) -> dict[str, int]:
    """Gives field -> column index, from the mapping, the header's names, or the data's shape."""
    lowered = [n.strip().lower() for n in names] if names is not None else None
    out: dict[str, int] = {}
    for f in fields:
        wanted = (columns or {}).get(f, ...)
        if wanted is None:
            continue  # explicitly absent
        if wanted is ...:
            if lowered is None:
                continue
            hit = next((lowered.index(n) for n in DEFAULT_NAMES[f] if n in lowered), None)
            if hit is not None:
                out[f] = hit
            continue
        if isinstance(wanted, int):
            if not -n_cols <= wanted < n_cols:
                raise BertkitError(f"{path}: column {wanted} for {f} is out of range (rows have {n_cols} columns)")
            out[f] = wanted % n_cols
        elif lowered is not None and wanted.strip().lower() in lowered:
            out[f] = lowered.index(wanted.strip().lower())
        else:
            raise BertkitError(f"{path}: no column named {wanted!r} for {f}; the header has {names}")
    if names is None and not columns:
        out = _guess_columns(n_cols, fields, sample, path, require_pair)
    if "text" not in out:
        raise BertkitError(f"{path}: cannot tell which column holds the text; header {names}: "
                           f"name it with columns={{'text': ...}}")
    if require_pair and "pair" not in out and columns is None:
        raise BertkitError(f"{path}: cannot tell which column holds the second text of the pair; header "
                           f"{names}: name it with columns={{'pair': ...}}")
    return out


def _guess_columns(n_cols: int, fields: Sequence[str], sample: list[list[str]], path: Path,
                   require_pair: bool) -> dict[str, int]:
    """Gives a layout for a file without header or mapping: the label is the column with fewest values
    (then shortest cells); the other columns are the text and, when there are two, the pair.
    """
    has_label = "label" in fields and n_cols > 1
    n_texts = n_cols - has_label
    if n_texts not in ((2,) if require_pair else (1, 2) if "pair" in fields else (1,)):
        raise BertkitError(f"{path}: no header and {n_cols} columns: say which holds what with "
                           f"columns={{'text': 0, 'label': 1, ...}}")
    label = None
    if has_label:
        rows = [row for row in sample if len(row) == n_cols]
        # fewest distinct values, then shortest cells: labels are few and short
        label = min(range(n_cols), key=lambda c: (len({r[c] for r in rows}), sum(len(r[c]) for r in rows)))
    others = [c for c in range(n_cols) if c != label]
    out = dict(zip(("text", "pair"), others, strict=False))
    return out if label is None else {"label": label, **out}


def _looks_like_header(row: list[str], columns: dict[str, str | int | None] | None) -> bool:
    known = {n for names in DEFAULT_NAMES.values() for n in names}
    known |= {str(v).strip().lower() for v in (columns or {}).values() if isinstance(v, str)}
    known |= {"idx", "id", "#1 id", "#2 id"}
    return any(cell.strip().lower() in known for cell in row)


def _row_example(cells: list[str], at: dict[str, int], line: int) -> TextExample:
    label = cells[at["label"]].strip() if "label" in at else None
    pair = cells[at["pair"]].strip() if "pair" in at else None
    return TextExample(cells[at["text"]].strip(), pair, label, line)


def _keep(example: TextExample, report: ReadReport, place: str) -> bool:
    if example.label is not None and example.label in NO_GOLD:
        report.skip(f"no gold label ({example.label!r})", place)
        return False
    return True


# ---------------------------------------------------------------------------------------------------
# Tables and JSON lines (classification)


def read_table(
    path: str | Path,
    *,
    fields: Sequence[str] | None = None,
    columns: dict[str, str | int | None] | None = None,
    delimiter: str | None = None,
    header: bool | None = None,
    bad_rows: BadRows = "error",
) -> Dataset:
    """Gives the TextExamples of a TSV or CSV file.

    Args:
        fields: what to read: "text", and "pair" / "label" when the task wants them (a "pair" asked
            for must be found); a missing label column gives unlabelled examples (prediction input).
            None reads the text, and the pair and label when the file has them.
        columns: field -> column name (with a header) or 0-based index; None for a field absent.
            Without it the header's names are matched (sentence, sentence1/2, #1/#2 String, label,
            Quality, review, ...), and a headerless file's label is the column with fewest values.
        delimiter: "\\t" or ","; by default "," for .csv and otherwise a tab if the first line has one.
        header: whether the first line names the columns; by default it does when a cell is a known name.
        bad_rows: a row with the wrong number of columns is an "error" (BertkitError naming file and
            line) or a counted "skip". Rows labelled "-" or "" are always a counted skip.

    TSV is read without quoting (GLUE's and MSRP's texts hold bare quotes); CSV with standard quoting,
    so a quoted review may hold commas or span lines.
    """
    path = Path(path)
    text = _read_text(path)
    if delimiter is None:
        first = text.split("\n", 1)[0]
        delimiter = "," if path.suffix.lower() == ".csv" or "\t" not in first else "\t"
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting)
    records: list[tuple[int, list[str]]] = []
    line = 1
    for cells in reader:
        records.append((line, cells))
        line = reader.line_num + 1
    records = [(n, c) for n, c in records if c and any(x.strip() for x in c)]
    if not records:
        raise BertkitError(f"{path}: file is empty")
    if header is None:
        header = _looks_like_header(records[0][1], columns)
    names = records[0][1] if header else None
    body = records[1:] if header else records
    if not body:
        raise BertkitError(f"{path}: has a header but no rows")
    n_cols = len(names) if names is not None else len(body[0][1])
    require_pair = fields is not None and "pair" in fields
    fields = fields or ("text", "pair", "label")
    at = _resolve(names, columns, n_cols, path, fields, [c for _, c in body[:1000]], require_pair)
    report = ReadReport(str(path))
    examples = []
    for n, cells in body:
        if len(cells) != n_cols:
            _bad(report, bad_rows, path, f"line {n}", "wrong number of columns", f": {len(cells)}, expected {n_cols}")
            continue
        example = _row_example(cells, at, n)
        if _keep(example, report, f"line {n}"):
            examples.append(example)
    report.kept = len(examples)
    return Dataset(examples, report)


def read_jsonl(
    path: str | Path,
    *,
    fields: Sequence[str] | None = None,
    columns: dict[str, str | None] | None = None,
    bad_rows: BadRows = "error",
) -> Dataset:
    """Gives the TextExamples of a JSON-lines file (one object a line, e.g. OCNLI's sentence1/2, label).

    `fields` and `columns` work as in `read_table`; by default the same names are looked for. A line
    that is not a JSON object, or lacks a mapped key, is an "error" (file and line named) or a counted
    "skip"; a label "-" (no gold) is always a counted skip. Blank lines are ignored.
    """
    path = Path(path)
    lines = _lines(_read_text(path))
    report = ReadReport(str(path))
    examples = []
    keys: dict[str, str] | None = None
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            _bad(report, bad_rows, path, f"line {n}", "not JSON", f" ({e.msg} at column {e.colno})")
            continue
        if not isinstance(obj, dict):
            _bad(report, bad_rows, path, f"line {n}", "not a JSON object", f": {type(obj).__name__}")
            continue
        if keys is None:
            keys = _json_keys(obj, columns, fields or ("text", "pair", "label"), path, n,
                              require_pair=fields is not None and "pair" in fields)
        missing = [k for k in keys.values() if k not in obj]
        if missing:
            _bad(report, bad_rows, path, f"line {n}", "missing key", f" {missing[0]!r}")
            continue
        label = obj[keys["label"]] if "label" in keys else None
        example = TextExample(
            str(obj[keys["text"]]).strip(),
            str(obj[keys["pair"]]).strip() if "pair" in keys else None,
            None if label is None else str(label).strip(),
            n,
        )
        if _keep(example, report, f"line {n}"):
            examples.append(example)
    if keys is None and not report.total_skipped:
        raise BertkitError(f"{path}: file is empty")
    report.kept = len(examples)
    return Dataset(examples, report)


def _json_keys(obj: dict[str, Any], columns: dict[str, str | None] | None, fields: Sequence[str], path: Path,
               line: int, require_pair: bool) -> dict[str, str]:
    """Gives field -> key for a JSON-lines file, from the mapping or the first object's keys."""
    lowered = {k.lower(): k for k in obj}
    keys: dict[str, str] = {}
    for f in fields:
        wanted = (columns or {}).get(f, ...)
        if wanted is None:
            continue
        if wanted is ...:
            hit = next((lowered[n] for n in DEFAULT_NAMES[f] if n in lowered), None)
            if hit is not None:
                keys[f] = hit
        else:
            keys[f] = str(wanted)
    if "text" not in keys:
        raise BertkitError(f"{path} line {line}: cannot tell which key holds the text among {list(obj)}; "
                           f"name it with columns={{'text': ...}}")
    if require_pair and "pair" not in keys and columns is None:
        raise BertkitError(f"{path} line {line}: cannot tell which key holds the second text among {list(obj)}; "
                           f"name it with columns={{'pair': ...}}")
    return keys


def read_texts(path: str | Path, *, format: str | None = None, **options: Any) -> Dataset:
    """Gives TextExamples from a table or JSON lines: `format` "tsv", "csv" or "jsonl", else by extension."""
    path = Path(path)
    fmt = format or {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv"}.get(path.suffix.lower(), "tsv")
    if fmt == "jsonl":
        return read_jsonl(path, **options)
    if fmt not in ("tsv", "csv"):
        raise BertkitError(f"{path}: unknown format {fmt!r} for text classification; use tsv, csv or jsonl")
    return read_table(path, delimiter=options.pop("delimiter", "\t" if fmt == "tsv" else ","), **options)


# ---------------------------------------------------------------------------------------------------
# SQuAD (extractive QA)


def locate(context: str, text: str, start: int) -> int:
    """Gives where `text` occurs in `context`: at `start` if it does, else the nearest occurrence; -1 if none."""
    if start >= 0 and context.startswith(text, start):
        return start
    best, i = -1, context.find(text)
    while i != -1:
        if best == -1 or abs(i - start) < abs(best - start):
            best = i
        if i > start:
            break  # occurrences only get further away
        i = context.find(text, i + 1)
    return best


def _inside_word(context: str, start: int, end: int) -> bool:
    """Tells whether context[start:end] cuts a Latin word or number ("gold" in "golden", "8" in "18")."""
    def glued(a: str, b: str) -> bool:
        return a.isascii() and b.isascii() and a.isalnum() and b.isalnum()

    return (start > 0 and glued(context[start - 1], context[start])) or (
        end < len(context) and glued(context[end - 1], context[end]))


def whole_word(context: str, text: str, start: int) -> int:
    """Gives the whole-word occurrence of `text` nearest `start` when the one at `start` is inside a word, else `start`."""
    if not _inside_word(context, start, start + len(text)):
        return start
    best, i = start, context.find(text)
    while i != -1:
        if not _inside_word(context, i, i + len(text)) and (best == start or abs(i - start) < abs(best - start)):
            best = i
        i = context.find(text, i + 1)
    return best


def read_squad(path: str | Path, *, whole_words: bool = True) -> Dataset:
    """Gives the QAExamples of a SQuAD v1.1/v2.0-format file (CMRC 2018 too).

    An answer whose offset is wrong (about 7 in CMRC 2018 dev) is moved to the occurrence of its text
    nearest the given offset: a counted fix. An answer whose text is nowhere in its context (193 in
    CMRC 2018 dev, written by annotators with answer_start -1) is a counted skip naming the question;
    its text still counts as gold for scoring, as in the official script. With `whole_words`, a Latin
    or numeric answer found inside a longer word ("gold" in "golden": the SQuAD dev file here gives
    each answer's first occurrence) moves to the nearest occurrence standing as a word, when there is
    one: a counted fix, so that training targets whole tokens. A question left with no
    answer, and not marked impossible, is a counted skip. Malformed JSON or a question without
    id/question/answers is a BertkitError naming the file and the question.
    """
    path = Path(path)
    text = _read_text(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise BertkitError(f"{path} line {e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise BertkitError(f"{path}: not SQuAD-format JSON (expected an object with a 'data' list)")
    report = ReadReport(str(path))
    examples: list[QAExample] = []
    impossible = 0
    for a, article in enumerate(doc["data"]):
        for p, para in enumerate(article.get("paragraphs", [])):
            context = para.get("context")
            if not isinstance(context, str):
                raise BertkitError(f"{path}: data[{a}].paragraphs[{p}] has no 'context' string")
            for q, qa in enumerate(para.get("qas", [])):
                where = f"data[{a}].paragraphs[{p}].qas[{q}]"
                example = _squad_question(qa, context, str(article.get("title", "")), report, path, where, whole_words)
                if example is not None:
                    examples.append(example)
                    impossible += bool(example.is_impossible)
    if not examples and not report.total_skipped:
        raise BertkitError(f"{path}: holds no questions")
    report.kept = len(examples)
    return Dataset(examples, report, impossible=impossible)


def _squad_question(qa: dict[str, Any], context: str, title: str, report: ReadReport, path: Path,
                    where: str, whole_words: bool) -> QAExample | None:
    for key in ("id", "question"):
        if key not in qa:
            raise BertkitError(f"{path}: {where} has no '{key}'")
    qid = str(qa["id"])
    impossible = bool(qa.get("is_impossible", False))
    answers: list[Answer] = []
    gold = []
    for ans in qa.get("answers", []):
        if not isinstance(ans, dict) or "text" not in ans:
            raise BertkitError(f"{path}: question {qid} has an answer without 'text'")
        answer_text = str(ans["text"])
        gold.append(answer_text)
        given = int(ans.get("answer_start", -1))
        start = locate(context, answer_text, given)
        if start == -1 and answer_text.strip() and answer_text.strip() != answer_text:
            answer_text = answer_text.strip()  # stray spaces around the answer
            start = locate(context, answer_text, given)
        if start == -1 or not answer_text:
            report.skip("answer not in context", f"question {qid}")
            continue
        if start != given:
            report.fix("answer offset relocated", f"question {qid}")
        if whole_words and (moved := whole_word(context, answer_text, start)) != start:
            report.fix("answer moved out of a longer word", f"question {qid}")
            start = moved
        answers.append(Answer(answer_text, start))
    if not impossible and not answers:
        report.skip("question without an answer in its context", f"question {qid}")
        return None
    if impossible:
        answers, gold = [], []
    return QAExample(qid, str(qa["question"]), context, tuple(answers), tuple(gold), impossible, title)


# ---------------------------------------------------------------------------------------------------
# CoNLL columns (NER)


def read_conll(
    path: str | Path,
    *,
    word_column: int = 0,
    tag_column: int = -1,
    delimiter: str | None = None,
    scheme: str | None = None,
    normalize: str | None = None,
    bad_rows: BadRows = "error",
) -> Dataset:
    """Gives the TagExamples of a CoNLL-style file: a word a line, tag in `tag_column`, blank between sentences.

    `-DOCSTART-` lines are skipped. `delimiter` is a tab when the first word line has one, else any
    whitespace. `scheme` names the file's tag scheme (IOB1, BIO, BIOES); by default it is detected
    (CoNLL-2003 is IOB1). `normalize="NFKC"` maps full-width digits and letters to half-width, as
    MSRA's test file needs to match its training file. A line with the wrong number of columns, or a
    tag that is not O / B-X / I-X / E-X / S-X, is an "error" naming file and line, or with
    `bad_rows="skip"` drops its whole sentence, counted.
    """
    path = Path(path)
    lines = _lines(_read_text(path))
    report = ReadReport(str(path))
    sentences: list[TagExample] = []
    words: list[str] = []
    tags: list[str] = []
    first = 0
    broken = False
    n_cols: int | None = None
    valid_tags: set[str] = set()  # tags already checked: a file has few distinct ones

    def close() -> None:
        nonlocal words, tags, broken
        if words and not broken:
            sentences.append(TagExample(tuple(words), tuple(tags), first))
        words, tags, broken = [], [], False

    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            close()
            continue
        if raw.startswith("-DOCSTART-"):
            close()
            continue
        if delimiter is None:
            delimiter = "\t" if "\t" in raw else " "
        cells = raw.split("\t") if delimiter == "\t" else raw.split()
        if n_cols is None:
            n_cols = len(cells)
            if n_cols < 2:
                raise BertkitError(f"{path} line {n}: one column only; expected a word and a tag")
        if not words:
            first = n
        if broken:
            continue
        if len(cells) != n_cols:
            _bad(report, bad_rows, path, f"line {n}", "wrong number of columns", f": {len(cells)}, expected {n_cols}")
            broken = True
            continue
        tag = cells[tag_column].strip()
        if tag not in valid_tags:
            if not check_tag(tag):
                _bad(report, bad_rows, path, f"line {n}", "malformed tag", f" {tag!r} (expected O or B-/I-/E-/S-TYPE)")
                broken = True
                continue
            valid_tags.add(tag)
        word = cells[word_column]
        words.append(unicodedata.normalize(normalize, word) if normalize else word)
        tags.append(tag)
    close()
    if not sentences and not report.total_skipped:
        raise BertkitError(f"{path}: holds no sentences")
    detected = detect_scheme(s.tags for s in sentences if s.tags)
    if scheme is not None and scheme not in SCHEMES:
        raise BertkitError(f"unknown tag scheme {scheme!r}; use one of {list(SCHEMES)}")
    report.kept = len(sentences)
    return Dataset(sentences, report, scheme=scheme or detected)


def with_scheme(data: Dataset, scheme: str) -> Dataset:
    """Gives a tagged dataset with its tags rewritten in `scheme` (same entities); itself if already so."""
    if data.scheme == scheme or data.scheme is None:
        return data
    examples = [replace(e, tags=tuple(convert(e.tags, scheme, data.scheme))) if e.tags else e for e in data]
    return Dataset(examples, data.report, scheme=scheme, impossible=data.impossible)


# ---------------------------------------------------------------------------------------------------
# Splitting a corpus that comes without a split


def _stable_key(seed: int, i: int) -> bytes:
    return hashlib.blake2b(f"{seed}:{i}".encode(), digest_size=8).digest()


def split(data: Dataset, fractions: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0) -> list[Dataset]:
    """Gives `data` cut into parts of the given fractions, by a seeded shuffle that is the same everywhere.

    The shuffle orders examples by a hash of (seed, index), so it does not depend on numpy's or
    Python's random generators; each part keeps file order. Sizes are floor(cumulative fraction * n),
    the last part taking the remainder when the fractions sum to 1.
    """
    if any(f < 0 for f in fractions) or sum(fractions) > 1 + 1e-9:
        raise BertkitError(f"split fractions {list(fractions)} must be non-negative and sum to at most 1")
    n = len(data)
    order = sorted(range(n), key=lambda i: _stable_key(seed, i))
    bounds, total = [0], 0.0
    for f in fractions:
        total += f
        bounds.append(n if abs(total - 1) < 1e-9 else int(total * n))
    parts = []
    for k, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        picked = sorted(order[lo:hi])
        report = ReadReport(f"{data.source}[part {k + 1} of {len(fractions)}, seed {seed}]", kept=len(picked))
        parts.append(Dataset([data.examples[i] for i in picked], report, scheme=data.scheme))
    return parts


def words_of(text: str, how: str = "auto") -> tuple[tuple[str, ...], tuple[tuple[int, int], ...]]:
    """Gives the words of `text` and their character spans: whitespace-separated, or one per character.

    `how` is "whitespace", "chars" (every non-space character, as MSRA and the paper's Chinese NER),
    or "auto": characters when the text holds a CJK ideograph, else whitespace.
    """
    if how == "auto":
        how = "chars" if any(_is_cjk(c) for c in text) else "whitespace"
    spans: list[tuple[int, int]] = []
    if how == "chars":
        spans = [(i, i + 1) for i, c in enumerate(text) if not c.isspace()]
    elif how == "whitespace":
        i = 0
        for piece in text.split():
            i = text.index(piece, i)
            spans.append((i, i + len(piece)))
            i += len(piece)
    else:
        raise BertkitError(f"unknown word split {how!r}; use auto, whitespace or chars")
    return tuple(text[a:b] for a, b in spans), tuple(spans)


def _is_cjk(c: str) -> bool:
    cp = ord(c)
    return 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2FA1F or 0xF900 <= cp <= 0xFAFF


def has_cjk(texts: Iterable[str]) -> bool:
    return any(_is_cjk(c) for t in texts for c in t)
