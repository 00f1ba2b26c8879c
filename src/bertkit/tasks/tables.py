"""Text examples read from tables and JSON lines: a text, or a text pair, with its label. What the classify and
pair families read (single-label, multi-label, regression), and what `bertkit predict` reads for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BertkitError
from .base import Dataset, ReadReport
from .readers import BadRows, bad_row, file_format, json_objects, read_text, table_rows

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
    label: str | tuple[str, ...] | None  # a tuple: a JSON list of labels (multi-label data)
    line: int  # 1-based line in the source file (index + 1 for user text)



# ---- reading tables and JSON lines -----------------------------------------------------------------


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
                           f"name it with --columns text=NAME (columns={{'text': ...}} in Python)")
    if require_pair and "pair" not in out and columns is None:
        raise BertkitError(f"{path}: cannot tell which column holds the second text of the pair; header "
                           f"{names}: name it with --columns pair=NAME (columns={{'pair': ...}} in Python)")
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


def _keep(example: TextExample, report: ReadReport, place: str, no_gold: tuple[str, ...] = NO_GOLD) -> bool:
    if isinstance(example.label, str) and example.label in no_gold:
        report.skip(f"no gold label ({example.label!r})", place)
        return False
    return True


def read_table(
    path: str | Path,
    *,
    fields: Sequence[str] | None = None,
    columns: dict[str, str | int | None] | None = None,
    delimiter: str | None = None,
    header: bool | None = None,
    bad_rows: BadRows = "error",
    no_gold: tuple[str, ...] = NO_GOLD,
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
            line) or a counted "skip". Rows labelled "-" or "" (`no_gold`) are always a counted skip.

    TSV is read without quoting (GLUE's and MSRP's texts hold bare quotes); CSV with standard quoting,
    so a quoted review may hold commas or span lines.
    """
    path = Path(path)
    text = read_text(path)
    if delimiter is None:
        first = text.split("\n", 1)[0]
        delimiter = "," if path.suffix.lower() == ".csv" or "\t" not in first else "\t"
    records = table_rows(text, delimiter)
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
            bad_row(report, bad_rows, path, f"line {n}", "wrong number of columns", f": {len(cells)}, expected {n_cols}")
            continue
        example = _row_example(cells, at, n)
        if _keep(example, report, f"line {n}", no_gold):
            examples.append(example)
    report.kept = len(examples)
    return Dataset(examples, report)


def read_jsonl(
    path: str | Path,
    *,
    fields: Sequence[str] | None = None,
    columns: dict[str, str | None] | None = None,
    bad_rows: BadRows = "error",
    no_gold: tuple[str, ...] = NO_GOLD,
) -> Dataset:
    """Gives the TextExamples of a JSON-lines file (one object a line, e.g. OCNLI's sentence1/2, label).

    `fields` and `columns` work as in `read_table`; by default the same names are looked for. A line
    that is not a JSON object, or lacks a mapped key, is an "error" (file and line named) or a counted
    "skip"; a label "-" (no gold) is always a counted skip. A label that is a JSON list (multi-label
    data) becomes a tuple of strings. Blank lines are ignored.
    """
    path = Path(path)
    report = ReadReport(str(path))
    examples = []
    keys: dict[str, str] | None = None
    for n, obj in json_objects(path, read_text(path), report, bad_rows):
        if keys is None:
            keys = _json_keys(obj, columns, fields or ("text", "pair", "label"), path, n,
                              require_pair=fields is not None and "pair" in fields)
        missing = [k for k in keys.values() if k not in obj]
        if missing:
            bad_row(report, bad_rows, path, f"line {n}", "missing key", f" {missing[0]!r}")
            continue
        label = obj[keys["label"]] if "label" in keys else None
        example = TextExample(
            str(obj[keys["text"]]).strip(),
            str(obj[keys["pair"]]).strip() if "pair" in keys else None,
            None if label is None else tuple(str(x).strip() for x in label) if isinstance(label, list) else str(label).strip(),
            n,
        )
        if _keep(example, report, f"line {n}", no_gold):
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
                           f"name it with --columns text=NAME (columns={{'text': ...}} in Python)")
    if require_pair and "pair" not in keys and columns is None:
        raise BertkitError(f"{path} line {line}: cannot tell which key holds the second text among {list(obj)}; "
                           f"name it with --columns pair=NAME (columns={{'pair': ...}} in Python)")
    return keys


def read_texts(path: str | Path, *, format: str | None = None, **options: Any) -> Dataset:
    """Gives TextExamples from a table or JSON lines: `format` "tsv", "csv" or "jsonl", else by extension."""
    path = Path(path)
    fmt = file_format(path, format)
    if fmt == "jsonl":
        return read_jsonl(path, **options)
    if fmt not in ("tsv", "csv"):
        raise BertkitError(f"{path}: unknown format {fmt!r} for text classification; use tsv, csv or jsonl")
    return read_table(path, delimiter=options.pop("delimiter", "\t" if fmt == "tsv" else ","), **options)
