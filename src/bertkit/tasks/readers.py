"""What every reader of fine-tuning data shares: reading a file's text, bad rows, and splitting a corpus.

Each task family reads its own formats (bertkit.tasks.classify, .qa, .ner), each giving a `Dataset`
and its `ReadReport`:

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from ..errors import BertkitError
from ..fileio import read_utf8
from .base import Dataset, ReadReport

BadRows = Literal["error", "skip"]

# csv refuses fields over 128 KiB by default; long documents are legitimate here.
csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))


def read_text(path: Path) -> str:
    """Gives the file's text (a UTF-8 BOM removed); BertkitError for a missing, empty or non-UTF-8 file."""
    text = read_utf8(path)
    if not text.strip():
        raise BertkitError(f"{path}: file is empty")
    return text


def text_lines(text: str) -> list[str]:
    """Gives the lines of a file's text; only \\n, \\r\\n and \\r end a line (not U+2028 and the like)."""
    return io.StringIO(text, newline=None).read().split("\n")


def file_format(path: Path, format: str | None = None) -> str:
    """The format asked for, else the file's by its extension: "jsonl" (.jsonl, .json), "csv" (.csv) or "tsv"."""
    return format or {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv"}.get(path.suffix.lower(), "tsv")


def table_rows(text: str, delimiter: str) -> list[tuple[int, list[str]]]:
    """Gives a table's non-blank rows, each with the line it starts on. TSV is read without quoting (GLUE's and
    MSRP's texts hold bare quotes); CSV with standard quoting, so a quoted cell may hold commas or span lines."""
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting)
    rows: list[tuple[int, list[str]]] = []
    line = 1
    for cells in reader:
        if cells and any(c.strip() for c in cells):
            rows.append((line, cells))
        line = reader.line_num + 1
    return rows


def json_objects(path: Path, text: str, report: ReadReport, bad_rows: BadRows) -> list[tuple[int, dict[str, Any]]]:
    """Gives a JSON-lines file's objects, each with its line; blank lines are ignored, and a line that is not JSON
    or not an object is a `bad_row`."""
    objects = []
    for n, raw in enumerate(text_lines(text), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            bad_row(report, bad_rows, path, f"line {n}", "not JSON", f" ({e.msg} at column {e.colno})")
            continue
        if not isinstance(obj, dict):
            bad_row(report, bad_rows, path, f"line {n}", "not a JSON object", f": {type(obj).__name__}")
            continue
        objects.append((n, obj))
    return objects


def bad_row(report: ReadReport, bad_rows: BadRows, path: Path, place: str, kind: str, detail: str = "") -> None:
    """Raises BertkitError for a bad row, or counts it as skipped (by `kind`) when `bad_rows="skip"`."""
    if bad_rows == "error":
        raise BertkitError(f"{path} {place}: {kind}{detail} (--skip-bad-rows skips such rows; bad_rows='skip' in Python)")
    report.skip(kind, place)


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
