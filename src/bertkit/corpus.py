"""Raw text -> documents -> sentences, streamed: pre-training corpora in English and Chinese.

Formats (`input_format`; "auto" picks one per file, see `detect_format`):

* `google`: Google's `create_pretraining_data.py` input. One sentence a line, a blank line between
  documents. Lines are taken as sentences as they are (no splitting).
* `paragraphs`: prose with blank lines between paragraphs (Gutenberg books, the Chinese novels).
  The lines of a paragraph are joined (hard-wrapped text), then split into sentences.
* `lines`: prose with one paragraph a line and no blank lines (People's Daily).
* `jsonl`: one JSON object a line; its `text_field` is one document, split into paragraphs at line
  breaks and then into sentences.

What a document is. Google's format and JSON lines say it explicitly. Prose does not, so a
document there is a run of consecutive paragraphs that ends at a heading (a chapter marker such
as "CHAPTER IV" or "第十二回", or a short line without closing punctuation: a title), once it
holds `max_document_chars` characters (default 10,000: a chapter-sized piece of a book, a few
news articles), or at the end of the file. That keeps NSP's random-next sampling meaningful: a
random document is a different chapter, book or article, while a document stays long enough to
give several consecutive-sentence pairs.

Bad input never raises by default (`on_error="skip"`): unreadable or binary files (a NUL byte),
empty files, undecodable lines, lines over 10 MB and bad JSON records are skipped, counted in a
`ReadReport` with a message naming the file and line. `on_error="stop"` raises `BertkitError` with
that message instead.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .errors import BertkitError
from .fileio import ReadReport, list_files
from .text import CJK_CLASS

INPUT_FORMATS = ("auto", "google", "paragraphs", "lines", "jsonl")
ON_ERROR = ("skip", "stop")
MAX_DOCUMENT_CHARS = 10_000
MAX_LINE_BYTES = 10 * 2**20  # a longer "line" is a data file or a dump, not prose
_SNIFF_BYTES = 64 * 2**10
_JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
NUL = b"\0"

# CJK ideographs, CJK punctuation and full-width forms: text in these is Chinese.
_CJK_OR_PUNCT = re.compile(f"[{CJK_CLASS}\u3000-\u303f\uff00-\uffef]")


# ---- sentence splitting -----------------------------------------------------------------------------

# Chinese: a run of 。！？；… (or ． used as a full stop, as in 红楼梦, but not between digits as in
# "１．５"), then any closing quotes and brackets. No space follows in Chinese text.
_ZH_END = re.compile(
    f"(?:[。！？；]|(?<=[{CJK_CLASS}，。、”’」』）])…+|(?<![0-9０-９])．(?![0-9０-９])|[!?](?=[{CJK_CLASS}“‘「『]))+"
    "[”’」』）》〉\"')]*"
)
# English: [.!?] or an ellipsis, closing quotes/brackets, white space, then what can start a sentence
# (an opening quote or bracket, then an upper-case letter or a digit). The word before the stop then
# tells abbreviations and initials apart.
_EN_END = re.compile(r"""([.!?]+|…)(["'”’)\]]*)\s+(?=["'“‘(\[]*[A-Z0-9À-Þ""" + CJK_CLASS + "])")
# Abbreviations that precede a name or a word, so their period never ends a sentence.
# ("etc." and "Inc." can end a sentence too, but prose more often goes on after them with a capital.)
_TITLE_WORDS = """
    mr mrs ms messrs mme mlle dr prof rev fr st mt ft gen col lt capt cmdr adm maj sgt cpl pvt gov sen rep
    hon pres supt insp jr sr esq bros co corp inc ltd vs etc al cf viz approx ca dept univ assn
    jan feb mar apr jun jul aug sep sept oct nov dec tues thurs
"""
_TITLES = frozenset(_TITLE_WORDS.split())
_NUMBERED_WORDS = "no nos vol vols p pp fig figs art sec ch eq ex op"  # "No. 5", "p. 12": only before a number
_NUMBERED = frozenset(_NUMBERED_WORDS.split())
_DOTTED = re.compile(r"(?:[a-z]\.)+[a-z]")  # U.S, e.g, i.e, a.m, Ph.D-like acronyms
_OPENERS = "\"'“‘([«"


def _en_boundaries(text: str) -> Iterator[int]:
    """Yields the offsets where an English sentence ends (the start of the white space after it)."""
    for m in _EN_END.finditer(text):
        stop, closers = m.group(1), m.group(2)
        if stop == "." and not closers:
            before = text[max(0, m.start() - 32) : m.start()]  # enough for any abbreviation
            w = before.rsplit(None, 1)[-1].lstrip(_OPENERS).lower() if before.strip() else ""
            if w in _TITLES or _DOTTED.fullmatch(w):
                continue
            if len(w) == 1 and w.isalpha() and w != "i":  # an initial: "J. R. R. Tolkien"
                continue
            if w in _NUMBERED and text[m.end() : m.end() + 1].isdigit():
                continue
        yield m.end(2)


def split_sentences(text: str) -> list[str]:
    """Gives the sentences of one paragraph, English and Chinese rules both applied.

    English: a sentence ends at . ! ? or an ellipsis (with closing quotes or brackets after it)
    followed by white space and a capital or a digit, except after titles and other abbreviations
    (Mr. Dr. St. e.g. U.S. Jan.), initials (J. R. R.) and "No."/"p." before a number. Decimals never
    split (no space after the point). Chinese: after 。！？；… and the closing quotes ”’」』 after them.
    """
    cuts = set(_en_boundaries(text)) if ("." in text or "!" in text or "?" in text or "…" in text) else set()
    if _CJK_OR_PUNCT.search(text):
        cuts.update(m.end() for m in _ZH_END.finditer(text))
    if not cuts:
        text = text.strip()
        return [text] if text else []
    sentences, start = [], 0
    for cut in sorted(cuts):
        piece = text[start:cut].strip()
        if piece:
            sentences.append(piece)
        start = cut
    piece = text[start:].strip()
    if piece:
        sentences.append(piece)
    return sentences


# ---- headings: where prose documents end ---------------------------------------------------------------

_CHAPTER = re.compile(
    r"(?:(?:chapter|book|part|volume|vol\.|canto|act|actus|scene|scena|scoena|section|letter|stave)"
    r"\s+(?:[ivxlcdm]+|\d+|the\s+\w+|one|two|three|four|five|six|seven|eight|nine|ten|\w+)\b"
    r"|第[0-9０-９一二三四五六七八九十百千零〇两]+[回章节卷集部篇幕]|楔子|序[章言]|引子|尾声)",
    re.IGNORECASE,
)
_CLOSING = re.compile(r"""[.!?;:,。！？；：，、…．\-—]["'”’」』)\]）》]*$""")


def is_heading(paragraph: str, n_lines: int = 1) -> bool:
    """True for a chapter marker, or a title: one short line that does not end like a sentence."""
    if len(paragraph) > 100 or n_lines > 2:
        return False
    if _CHAPTER.match(paragraph):
        return True
    return n_lines == 1 and len(paragraph) <= 60 and not _CLOSING.search(paragraph)


# ---- reading files ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Document:
    """One document: its paragraphs (for Google's format, its sentences) and where it starts."""

    source: str  # "path line N"
    paragraphs: tuple[str, ...]
    presplit: bool  # True when the paragraphs are sentences already (Google's format)

    @property
    def nbytes(self) -> int:
        return sum(len(p.encode("utf-8")) + 1 for p in self.paragraphs)

    def sentences(self) -> list[str]:
        if self.presplit:
            return list(self.paragraphs)
        return [s for p in self.paragraphs for s in split_sentences(p)]


def _open(path: Path) -> BinaryIO:
    raw = open(path, "rb")  # noqa: SIM115 - closed by the caller's `with`
    if path.suffix == ".gz":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


def is_jsonl_name(path: Path) -> bool:
    """Tells whether a file's name says JSON lines (.jsonl, .ndjson or .json, gzipped or not)."""
    name = path.name[:-3] if path.suffix == ".gz" else path.name
    return name.endswith(_JSONL_SUFFIXES)


_SENTENCE_END = re.compile(r"""[.!?。！？；…．]["'”’」』)\]）]*$""")


def detect_format(path: Path, head: bytes) -> str:
    """Gives the likely format of a file from its name and its first bytes (`head`).

    JSON lines by name (.jsonl, .ndjson, .json) or when the first line is a JSON object; `lines`
    when there is no blank line; `paragraphs` when blank lines separate single lines (a paragraph
    a line) or most lines do not end a sentence (hard-wrapped prose); otherwise `google` (most
    lines end a sentence and blank lines separate runs of them).
    """
    if is_jsonl_name(path):
        return "jsonl"
    text = head.decode("utf-8", errors="replace").replace("\r\n", "\n")
    lines = text.split("\n")
    if len(head) >= _SNIFF_BYTES and len(lines) > 1:
        lines = lines[:-1]  # the last line is cut off
    stripped = [line.strip() for line in lines]
    nonblank = [s for s in stripped if s]
    if not nonblank:
        return "lines"
    if nonblank[0].startswith("{"):
        try:
            if isinstance(json.loads(nonblank[0]), dict):
                return "jsonl"
        except json.JSONDecodeError:
            pass
    blank = len(stripped) - len(nonblank)
    if blank == 0 or (len(nonblank) > 1 and blank == 1 and not stripped[-1]):
        return "lines"
    blocks = sum(1 for i, s in enumerate(stripped) if s and (i == 0 or not stripped[i - 1]))
    if len(nonblank) / blocks < 2:
        return "paragraphs"
    ending = sum(1 for s in nonblank if _SENTENCE_END.search(s)) / len(nonblank)
    return "google" if ending >= 0.6 else "paragraphs"


def _lines(path: Path, f: BinaryIO, report: ReadReport, on_error: str) -> Iterator[tuple[int, str]]:
    """Yields (line number, text without its line ending) of a UTF-8 file; bad lines are skipped."""
    number = 0
    while True:
        raw = f.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        report.bytes += len(raw)
        if len(raw) > MAX_LINE_BYTES:
            while raw and not raw.endswith(b"\n"):  # skip the rest of the line
                raw = f.readline(MAX_LINE_BYTES)
                report.bytes += len(raw)
            report.skip("line longer than 10 MB", f"{path} line {number}", "", on_error)
            continue
        if NUL in raw:
            report.skip("NUL byte (binary data)", f"{path} line {number}", f"at byte {raw.index(NUL)}", on_error)
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            report.skip("not valid UTF-8", f"{path} line {number}", f"{e.reason} at byte {e.start} of the line", on_error)
            continue
        if number == 1 and line.startswith("\ufeff"):
            line = line[1:]
        yield number, line.rstrip("\r\n")


def _join_lines(lines: list[str]) -> str:
    """Joins the lines of a hard-wrapped paragraph: with a space, or nothing between Chinese."""
    text = lines[0]
    for line in lines[1:]:
        glue = "" if _CJK_OR_PUNCT.match(line) or _CJK_OR_PUNCT.match(text[-1]) else " "
        text += glue + line
    return text


def _normalize_space(text: str) -> str:
    return " ".join(text.split())


def _prose_paragraphs(
    lines: Iterator[tuple[int, str]], blank_separated: bool
) -> Iterator[tuple[int, str, int]]:
    """Yields (first line number, paragraph text, number of lines) of prose."""
    if not blank_separated:
        for number, line in lines:
            text = _normalize_space(line)
            if text:
                yield number, text, 1
        return
    block: list[str] = []
    start = 0
    for number, line in lines:
        text = _normalize_space(line)
        if text:
            if not block:
                start = number
            block.append(text)
        elif block:
            yield start, _join_lines(block), len(block)
            block = []
    if block:
        yield start, _join_lines(block), len(block)


def _prose_documents(
    path: Path, paragraphs: Iterator[tuple[int, str, int]], max_document_chars: int
) -> Iterator[Document]:
    """Groups paragraphs into documents: a heading or the size limit starts a new one."""
    doc: list[str] = []
    start, chars, has_body = 0, 0, False
    for number, text, n_lines in paragraphs:
        heading = is_heading(text, n_lines)
        if has_body and (heading or chars >= max_document_chars):
            yield Document(f"{path} line {start}", tuple(doc), presplit=False)
            doc, chars, has_body = [], 0, False
        if not doc:
            start = number
        doc.append(text)
        chars += len(text)
        has_body = has_body or not heading
    if doc:
        yield Document(f"{path} line {start}", tuple(doc), presplit=False)


def _google_documents(path: Path, lines: Iterator[tuple[int, str]]) -> Iterator[Document]:
    doc: list[str] = []
    start = 0
    for number, line in lines:
        text = line.strip()
        if text:
            if not doc:
                start = number
            doc.append(text)
        elif doc:
            yield Document(f"{path} line {start}", tuple(doc), presplit=True)
            doc = []
    if doc:
        yield Document(f"{path} line {start}", tuple(doc), presplit=True)


def _jsonl_documents(
    path: Path, lines: Iterator[tuple[int, str]], text_field: str, report: ReadReport, on_error: str
) -> Iterator[Document]:
    for number, line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            report.skip("invalid JSON", f"{path} line {number}", f"{e.msg} at column {e.colno}", on_error)
            continue
        if not isinstance(record, dict) or text_field not in record:
            report.skip(f"no field '{text_field}'", f"{path} line {number}", "", on_error)
            continue
        text = record[text_field]
        if not isinstance(text, str):
            report.skip(f"field '{text_field}' is not a string", f"{path} line {number}", type(text).__name__, on_error)
            continue
        paragraphs = tuple(p for p in map(_normalize_space, text.splitlines()) if p)
        if paragraphs:
            yield Document(f"{path} line {number}", paragraphs, presplit=False)


def read_file(
    path: Path,
    *,
    input_format: str = "auto",
    text_field: str = "text",
    on_error: str = "skip",
    report: ReadReport | None = None,
    max_document_chars: int = MAX_DOCUMENT_CHARS,
) -> Iterator[Document]:
    """Yields the documents of one file (.gz too), streamed; bad lines and files go to `report`."""
    report = report if report is not None else ReadReport(unit="document(s)")
    report.files += 1
    before = report.kept
    try:
        with _open(path) as f:
            head = f.read(_SNIFF_BYTES)
            if not head.strip():
                report.skip_file(path, "empty file (no text)", on_error)
                return
            if NUL in head:
                report.skip_file(path, f"binary file (NUL byte at byte {head.index(NUL)})", on_error)
                return
            fmt = detect_format(path, head) if input_format == "auto" else input_format
            f.seek(0)
            lines = _lines(path, f, report, on_error)
            if fmt == "google":
                docs = _google_documents(path, lines)
            elif fmt == "jsonl":
                docs = _jsonl_documents(path, lines, text_field, report, on_error)
            else:
                paragraphs = _prose_paragraphs(lines, blank_separated=fmt == "paragraphs")
                docs = _prose_documents(path, paragraphs, max_document_chars)
            for doc in docs:
                report.kept += 1
                yield doc
    except (OSError, EOFError, zlib.error) as e:  # unreadable, truncated or corrupt gzip
        report.skip_file(path, f"cannot read ({getattr(e, 'strerror', None) or e})", on_error)
        return
    if report.kept == before:
        report.skip_file(path, "no text left after skipping bad lines", on_error)


def iter_documents(
    inputs: Iterable[str | Path],
    *,
    input_format: str = "auto",
    text_field: str = "text",
    on_error: str = "skip",
    report: ReadReport | None = None,
    max_document_chars: int = MAX_DOCUMENT_CHARS,
) -> Iterator[Document]:
    """Yields the documents of files and folders (recursively, sorted), one at a time.

    Args:
        inputs: files (.txt, .gz, .jsonl, ...) and folders.
        input_format: "auto" (per file, `detect_format`), "google", "paragraphs", "lines", "jsonl".
        text_field: the field of a JSON lines record that holds its text.
        on_error: "skip" bad files and lines, counting them in `report`, or "stop" with BertkitError.
        report: filled with counts and skip messages as reading goes.
        max_document_chars: prose documents end at a paragraph once they hold this many characters.
    """
    if input_format not in INPUT_FORMATS:
        raise BertkitError(f"input format {input_format!r} is not one of {', '.join(INPUT_FORMATS)}")
    if on_error not in ON_ERROR:
        raise BertkitError(f"on_error {on_error!r} is not one of {', '.join(ON_ERROR)}")
    report = report if report is not None else ReadReport(unit="document(s)")
    for path in list_files(inputs):
        yield from read_file(path, input_format=input_format, text_field=text_field, on_error=on_error,
                             report=report, max_document_chars=max_document_chars)  # fmt: skip


def read_documents(inputs: Iterable[str | Path], **options: object) -> Iterator[list[str]]:
    """Yields each document as its list of sentences; options as for `iter_documents`."""
    for doc in iter_documents(inputs, **options):  # type: ignore[arg-type]
        sentences = doc.sentences()
        if sentences:
            yield sentences


def file_lines(path: Path, skipped: list[str] | None = None, text_field: str = "text") -> Iterator[str]:
    """Yields a UTF-8 (or gzipped UTF-8) file's lines without line endings; CRLF is fine. A line that
    is not UTF-8 is an error, or with a `skipped` list, left out and named there. A JSON-lines file
    (by its name, as `prepare` tells them) gives the lines of each record's `text_field` instead."""
    opener = gzip.open if path.suffix == ".gz" else open
    jsonl = is_jsonl_name(path)
    try:
        with opener(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as e:
                    if skipped is None:
                        raise BertkitError(f"{path} line {number}: not valid UTF-8 ({e.reason})") from None
                    skipped.append(f"{path} line {number}")
                    continue
                if not jsonl:
                    yield line
                    continue
                with contextlib.suppress(json.JSONDecodeError):  # `prepare` counts bad records; here they add nothing
                    record = json.loads(line)
                    if isinstance(record, dict) and isinstance(record.get(text_field), str):
                        yield from record[text_field].splitlines()
    except (OSError, EOFError, zlib.error) as e:
        raise BertkitError(f"{path}: cannot read ({e})") from None


def sniff(path: Path) -> bytes:
    """Gives the first bytes of a file (decompressed for .gz), for format and language detection."""
    with _open(path) as f:
        return f.read(_SNIFF_BYTES)


__all__ = [
    "INPUT_FORMATS",
    "Document",
    "ReadReport",
    "detect_format",
    "file_lines",
    "is_heading",
    "iter_documents",
    "read_documents",
    "read_file",
    "sniff",
    "split_sentences",
]  # fmt: skip
