"""Texts that go together, read from tables and JSON lines: what the embed and rerank families train on.

    anchor <TAB> positive                              pairs (in-batch negatives only)
    anchor <TAB> positive <TAB> negative [<TAB> ...]   triplets and groups (hard negatives)
    text   <TAB> pair     <TAB> score                  scored (or labelled 0/1) pairs

A file is one of these throughout: a group has as many negatives on every line. Columns are found by `--columns`
(anchor=0,positive=1,negative=2,... or header names; `negatives=KEY` a JSON list of them), else by the header
(anchor/query/question/sentence1, positive/passage/document/sentence2, negative..., score/label), else by the shape
of a file without one: two columns are pairs, three whose last is a number on every line scored pairs, more groups.

Every text is a non-blank string and every score a number: anything else is an error naming the file, line and
field, or with `bad_rows="skip"` a counted skip.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BertkitError
from .base import Dataset, Features, ReadReport
from .readers import BadRows, bad_row, file_format, json_objects, read_text, table_rows

NAMES: dict[str, tuple[str, ...]] = {
    "anchor": ("anchor", "query", "question", "sentence1", "text", "sentence", "premise", "text_a", "sentence_a",
               "question1"),
    "positive": ("positive", "pos", "passage", "document", "sentence2", "pair", "hypothesis", "text_b",
                 "sentence_b", "question2", "context", "answer"),
    "score": ("score", "label", "similarity", "relevance"),
}  # fmt: skip
NEGATIVE_PREFIXES = ("negative", "neg")


@dataclass(frozen=True)
class TextGroup:
    """An anchor (a query, a sentence) with its positive, hard negatives, or a gold score of the pair."""

    anchor: str
    positive: str
    negatives: tuple[str, ...] = ()
    score: float | None = None  # scored pairs: their similarity (or 0/1 relevance)
    line: int = 0

    @property
    def texts(self) -> tuple[str, ...]:
        """The anchor, then the positive (a text given alone, to embed, has none) and the negatives."""
        return (self.anchor, *((self.positive,) if self.positive else ()), *self.negatives)


def kind_of(data: Dataset) -> str:
    """"scored" (pairs with a score each), "groups" (with hard negatives) or "pairs"."""
    first = data.examples[0] if data.examples else None
    if first is None or first.score is not None:
        return "scored"
    return "groups" if first.negatives else "pairs"


class GroupTask:
    """What the embed and rerank tasks share: a variant named by the loss, no task-model options, inputs' fields as
    groups files name them, and the reader of those files."""

    name: str
    loss: str

    @property
    def variant(self) -> str:
        return self.loss

    @property
    def model_options(self) -> dict[str, Any]:
        return {}

    @property
    def json_fields(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return NAMES["anchor"], NAMES["positive"]

    def read_file(self, path: str | Path, fmt: dict[str, Any], **options: Any) -> Dataset:
        """`read_groups` with the reading options of `bertkit finetune` (those for other families refused)."""
        for option in ("label_sep", "normalize"):
            if fmt.pop(option, None) is not None:
                raise BertkitError(f"--{option.replace('_', '-')} is not for the {self.name} task")
        return read_groups(path, **fmt, **options)


def per_example(features: Features, values: np.ndarray) -> list[np.ndarray]:
    """The rows' `values` cut into each example's (its rows are consecutive, in the example's order)."""
    if len(values) != len(features):
        raise ValueError(f"outputs hold {len(values)} rows but the features have {len(features)}")
    starts = np.searchsorted(features.example_index, np.arange(len(features.data) + 1))
    return [values[starts[i] : starts[i + 1]] for i in range(len(features.data))]


# ---- where each field is ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    anchor: str | int
    positive: str | int
    negatives: tuple[str | int, ...] = ()
    score: str | int | None = None
    negative_list: str | None = None  # JSON lines: a key holding a list of negatives


def _is_negative(name: str) -> bool:
    return name.strip().lower().startswith(NEGATIVE_PREFIXES)


def _layout(names: Sequence[str] | None, columns: dict[str, Any] | None, width: int, sample: list[list[str]],
            path: Path) -> Layout:
    """Gives where each field is: from `columns`, else the header's names, else the shape of the rows."""
    columns = dict(columns or {})
    unknown = [k for k in columns if k not in ("anchor", "positive", "score", "negatives") and not _is_negative(k)]
    if unknown:
        raise BertkitError(f"--columns {unknown[0]}=...: the fields of this task are anchor, positive, negative_1.., "
                           "score (or text, pair, label)")
    lowered = [n.strip().lower() for n in names] if names is not None else None

    def find(field: str) -> str | int | None:
        if field in columns:
            return columns[field]
        if lowered is None:
            return None
        hit = next((lowered.index(n) for n in NAMES[field] if n in lowered), None)
        return hit if hit is None or names is None else names[hit]

    if names is None and not columns:  # the shape of a headerless table
        if width < 2:
            raise BertkitError(f"{path}: rows have {width} column; expected at least an anchor and a positive")
        numeric = width == 3 and all(_number(r[2]) is not None for r in sample if len(r) == 3)
        return Layout(0, 1, () if numeric else tuple(range(2, width)), 2 if numeric else None)
    anchor, positive, score = find("anchor"), find("positive"), find("score")
    negatives = sorted((k for k in columns if _is_negative(k)), key=lambda k: (len(k), k))
    negative_cols: tuple[str | int, ...] = tuple(columns[k] for k in negatives)
    if not negatives and names is not None:
        negative_cols = tuple(n for n in names if _is_negative(n))
    if anchor is None or positive is None:
        missing = "anchor" if anchor is None else "positive"
        raise BertkitError(f"{path}: no {missing} column (header {list(names) if names is not None else 'none'}); "
                           f"name it with --columns {missing}=NAME")
    return Layout(anchor, positive, negative_cols, score, columns.get("negatives"))


def _number(cell: Any) -> float | None:
    if isinstance(cell, bool):
        return None
    if isinstance(cell, (int, float)):
        return float(cell)
    try:
        return float(str(cell).strip())
    except ValueError:
        return None


# ---- reading ------------------------------------------------------------------------------------------

def read_groups(path: str | Path, *, format: str | None = None, columns: dict[str, Any] | None = None,
                header: bool | None = None, bad_rows: BadRows = "error", scores: bool | None = None,
                **_: Any) -> Dataset:
    """Gives the TextGroups of a TSV, CSV or JSON-lines file (see the module's doc). `scores`: True, the file must
    hold scored pairs; False, it must not; None, either."""
    path = Path(path)
    text = read_text(path)
    report = ReadReport(str(path))
    records: list[tuple[int, Any]]
    if file_format(path, format) == "jsonl":
        records = list(json_objects(path, text, report, bad_rows))
        if not records:
            raise BertkitError(f"{path}: no JSON objects")
        keys = list(records[0][1])
        layout = _layout(keys, columns, len(keys), [], path)
        listed = [k for k in layout.negatives if isinstance(records[0][1].get(k), list)]
        if layout.negative_list is None and len(listed) == 1 and len(layout.negatives) == 1:  # "negatives": [...]
            layout = Layout(layout.anchor, layout.positive, (), layout.score, str(listed[0]))
    else:
        records = table_rows(text, "," if file_format(path, format) == "csv" else "\t")
        if not records:
            raise BertkitError(f"{path}: file is empty")
        first = records[0][1]
        known = {n for names in NAMES.values() for n in names}
        if header is None:
            header = any(c.strip().lower() in known or _is_negative(c) for c in first) or any(
                isinstance(v, str) and v in first for v in (columns or {}).values())
        names = first if header else None
        if header:
            records = records[1:]
        if not records:
            raise BertkitError(f"{path}: has a header but no rows")
        width = len(names) if names is not None else len(records[0][1])
        layout = _layout(names, columns, width, [c for _, c in records[:1000]], path)
        layout = _by_index(layout, names, path)
    if scores is True and layout.score is None:
        raise BertkitError(f"{path}: no score column: scored pairs are text, pair, score (--columns score=NAME)")
    if scores is False and layout.score is not None:
        raise BertkitError(f"{path}: a score column ({layout.score!r}): this loss trains on pairs or groups, not "
                           "scored pairs")
    examples: list[TextGroup] = []
    width = len(layout.negatives) if layout.negative_list is None else None
    for n, record in records:
        try:
            group = _group(record, layout, n)
        except _Bad as e:
            bad_row(report, bad_rows, path, f"line {n}", f"field {e.field!r}", f": {e.why}")
            continue
        if width is None:
            width = len(group.negatives)
        if len(group.negatives) != width:
            bad_row(report, bad_rows, path, f"line {n}", "field 'negatives'",
                    f": {len(group.negatives)} negatives, but the first line has {width} (every line the same)")
            continue
        examples.append(group)
    report.kept = len(examples)
    return Dataset(examples, report)


def _by_index(layout: Layout, names: Sequence[str] | None, path: Path) -> Layout:
    """The layout with every column as an index into a table's rows."""
    lowered = [n.strip().lower() for n in names] if names is not None else None

    def index(col: str | int | None) -> int | None:
        if col is None or isinstance(col, int):
            return col
        if col.isdigit():
            return int(col)
        if lowered is None or col.strip().lower() not in lowered:
            raise BertkitError(f"{path}: no column named {col!r}; the header has {list(names or [])}")
        return lowered.index(col.strip().lower())

    anchor, positive = index(layout.anchor), index(layout.positive)
    assert anchor is not None and positive is not None
    return Layout(anchor, positive, tuple(i for c in layout.negatives if (i := index(c)) is not None),
                  index(layout.score))


class _Bad(Exception):
    def __init__(self, field: str, why: str):
        self.field, self.why = field, why


def _cell(record: Any, col: str | int, field: str) -> Any:
    try:
        return record[col]
    except (KeyError, IndexError):
        raise _Bad(str(col) if isinstance(record, dict) else field,
                   "missing" if isinstance(record, dict) else f"no column {col} (the row has {len(record)})") from None


def _text(record: Any, col: str | int, field: str) -> str:
    value = _cell(record, col, field)
    name = col if isinstance(record, dict) else field
    if not isinstance(value, str):
        raise _Bad(str(name), f"expected a text, got {json.dumps(value)[:40]}")
    if not value.strip():
        raise _Bad(str(name), "empty text")
    return value.strip()


def _group(record: Any, layout: Layout, line: int) -> TextGroup:
    anchor = _text(record, layout.anchor, "anchor")
    positive = _text(record, layout.positive, "positive")
    if layout.negative_list is not None:
        listed = _cell(record, layout.negative_list, "negatives")
        if not isinstance(listed, list):
            raise _Bad(layout.negative_list, "expected a list of texts")
        negatives = tuple(_text(listed, i, f"{layout.negative_list}[{i}]") for i in range(len(listed)))
    else:
        negatives = tuple(_text(record, col, f"negative_{i + 1}") for i, col in enumerate(layout.negatives))
    score = None
    if layout.score is not None:
        raw = _cell(record, layout.score, "score")
        score = _number(raw)
        if score is None or not np.isfinite(score):
            name = layout.score if isinstance(record, dict) else "score"
            raise _Bad(str(name), f"{json.dumps(raw)[:40] if isinstance(record, dict) else repr(raw)[:40]} is not a number")
    return TextGroup(anchor, positive, negatives, score, line)


# ---- features -----------------------------------------------------------------------------------------

@dataclass
class GroupFeatures(Features):
    """Rows of several sequences each ("sequences": (token ids, token type ids) per text of a group, or per pair of
    a reranker's group); a row's length, which batches rows of similar size together, is that of all its sequences.
    `extra`: the rows' other fields a batch carries (`stack_sequences`). `bucket` False: training batches are drawn
    at random, not by length (in-batch negatives: rows sharing a text would be each other's false negatives)."""

    extra: tuple[str, ...] = ()
    bucket: bool = True

    @property
    def sort_keys(self) -> np.ndarray:
        return self.lengths if self.bucket else np.zeros(len(self.rows), np.int64)

    def collate(self, rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        return stack_sequences(rows, self.pad_token_id, self.extra)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((sum(len(s[0]) for s in r["sequences"]) for r in self.rows), dtype=np.int64,
                           count=len(self.rows))


def stack_sequences(rows: list[dict[str, Any]], pad_token_id: int, extra: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Gives the batch of every row's sequences, one after another (row 0's, then row 1's, ...), padded to the
    longest: input_ids, token_type_ids, attention_mask (N, T); "row" (N,) the row each came from, "position" (N,)
    its place in that row; and each of `extra`, a number a sequence ("labels") or a row ("score")."""
    sequences = [(i, k, s) for i, r in enumerate(rows) for k, s in enumerate(r["sequences"])]
    N, T = len(sequences), max(len(s[0]) for _, _, s in sequences)
    ids = np.full((N, T), pad_token_id, np.int64)
    types, mask = np.zeros((N, T), np.int64), np.zeros((N, T), np.int64)
    for n, (_, _, (token_ids, type_ids)) in enumerate(sequences):
        ids[n, : len(token_ids)], types[n, : len(type_ids)], mask[n, : len(token_ids)] = token_ids, type_ids, 1
    batch = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask,
             "row": np.array([i for i, _, _ in sequences], np.int64),
             "position": np.array([k for _, k, _ in sequences], np.int64)}
    for key in extra:
        values = [r[key] for r in rows]
        flat = [v for value in values for v in value] if isinstance(values[0], list) else values
        batch[key] = np.asarray(flat, np.float32)
    return batch


def regroup(features: Features, extra: tuple[str, ...] = (), bucket: bool = True) -> GroupFeatures:
    """Gives one row a group of the rows that came from one example (in their order): its sequences, and each of
    `extra` as a list, a number a sequence."""
    groups: list[dict[str, Any]] = []
    for row, i in zip(features.rows, features.example_index.tolist(), strict=True):
        if not groups or groups[-1]["example"] != i:
            groups.append({"example": i, "sequences": [], **{k: [] for k in extra}})
        groups[-1]["sequences"].append((row["input_ids"], row["token_type_ids"]))
        for k in extra:
            groups[-1][k].append(row[k])
    for g in groups:
        del g["example"]
    return GroupFeatures(groups, features.data, np.arange(len(groups)), features.labels, features.pad_token_id, extra,
                         bucket)
