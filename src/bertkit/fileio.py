"""Files in and out: which files an input names, what reading them kept and skipped, and atomic writes.

- `list_files`, `read_utf8`: the files that input paths name (folders read recursively, sorted); `bertkit vocab`
  and `bertkit prepare` read the same files from the same folder; a file's text, or the line that is not UTF-8.
- `ReadReport`: what a reader kept, skipped and fixed, by reason, with the first places (file and
  line); every reader of corpora and task data fills one.
- `atomic_write`: a killed process or a full disk never leaves a half-written file behind; `staged_dir` the
  same for a whole folder (a model).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import BertkitError

SHOWN_PLACES = 5  # line numbers / question ids a report keeps per reason
SHOWN_MESSAGES = 20  # whole skip messages a report keeps


def list_files(inputs: Iterable[str | Path]) -> list[Path]:
    """Gives the files to read: each file itself, each folder's files recursively, sorted by path.

    Hidden files and folders (a leading ".") inside folders are left out.
    """
    files: list[Path] = []
    for p in map(Path, inputs):
        if p.is_dir():
            found = []
            for root, dirs, names in os.walk(p, followlinks=True):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                found += [Path(root) / n for n in names if not n.startswith(".")]
            if not found:
                raise BertkitError(f"{p}: folder holds no files")
            files += sorted(found, key=lambda f: f.relative_to(p).as_posix())
        elif p.is_file():
            files.append(p)
        else:
            raise BertkitError(f"{p}: no such file or folder")
    return files


def read_utf8(path: Path, what: str = "file", bom: bool = False) -> str:
    """Gives the text of a UTF-8 file (a leading byte-order mark removed unless `bom`); BertkitError for a missing
    file, a folder, or the line of the first byte that is not UTF-8."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BertkitError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise BertkitError(f"{path}: is a folder, expected a {what}") from None
    try:
        return data.decode("utf-8" if bom else "utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise BertkitError(f"{path} line {line}: not valid UTF-8 ({e.reason} at byte {e.start})") from None


def parse_json(path: Path, what: str) -> Any:
    """Gives a JSON file's value (any kind), read as read_utf8(bom=True) reads it; BertkitError naming the file and
    the line where it stops being JSON."""
    try:
        return json.loads(read_utf8(path, what, bom=True))
    except json.JSONDecodeError as e:
        raise BertkitError(f"{path} line {e.lineno}: invalid JSON ({e.msg})") from None


def read_json(path: Path, what: str = "a JSON object") -> dict[str, Any]:
    """Gives a JSON file's object; BertkitError naming the file when it is missing, not JSON, or not an object."""
    try:
        data = json.loads(read_utf8(path))
    except json.JSONDecodeError as e:
        raise BertkitError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise BertkitError(f"{path}: expected {what}, got {type(data).__name__}")
    return data


@dataclass
class ReadReport:
    """What a reader kept and what it left out of a file or corpus: counts by reason, with the first places.

    `skip` and `skip_file` raise BertkitError with the message instead when called with on_error="stop".
    """

    source: str = ""  # the file (or files) read
    kept: int = 0  # examples, sentences or documents
    unit: str = "kept"  # what `kept` counts, as the summary says it ("document(s)")
    files: int = 0
    bytes: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> lines, rows or questions left out
    fixed: Counter[str] = field(default_factory=Counter)  # reason -> rows repaired and kept
    places: dict[str, list[str]] = field(default_factory=dict)  # reason -> first few "line 17" / "question X"
    skipped_files: list[dict[str, str]] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)  # the first skip messages in full

    def skip(self, reason: str, place: str, detail: str = "", on_error: str = "skip") -> None:
        message = f"{place}: {reason}{f' ({detail})' if detail else ''}"
        if on_error == "stop":
            raise BertkitError(message)
        self.skipped[reason] += 1
        self._note(reason, place, message)

    def skip_file(self, path: Path, reason: str, on_error: str = "skip") -> None:
        message = f"{path}: {reason}"
        if on_error == "stop":
            raise BertkitError(message)
        self.skipped_files.append({"file": str(path), "reason": reason})
        if len(self.messages) < SHOWN_MESSAGES:
            self.messages.append(message)

    def fix(self, reason: str, place: str) -> None:
        self.fixed[reason] += 1
        self._note(reason, place, None)

    def _note(self, reason: str, place: str, message: str | None) -> None:
        shown = self.places.setdefault(reason, [])
        if len(shown) < SHOWN_PLACES and place not in shown:
            shown.append(place)
        if message is not None and len(self.messages) < SHOWN_MESSAGES:
            self.messages.append(message)

    @property
    def total_skipped(self) -> int:
        return sum(self.skipped.values()) + len(self.skipped_files)

    def summary(self) -> str:
        """Gives one line: what was read and kept, then each skip and fix reason with its count and first places."""
        kept = f"{self.kept:,} {self.unit}"
        head = f"read {self.files} file(s), {self.bytes / 1e6:.1f} MB, {kept}" if self.files else kept
        parts = [f"{self.source}: {head}" if self.source else head]
        if self.skipped_files:
            parts.append(f"skipped {len(self.skipped_files)} file(s)")
        for verb, counts in (("skipped", self.skipped), ("fixed", self.fixed)):
            for reason, n in counts.most_common():
                parts.append(f"{verb} {n:,} ({reason}: {', '.join(self.places.get(reason, []))}"
                             f"{', ...' if n > SHOWN_PLACES else ''})")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": self.files, "bytes": self.bytes, "kept": self.kept, "skipped": dict(self.skipped),
            "fixed": dict(self.fixed), "skipped_files": self.skipped_files, "messages": self.messages,
        }  # fmt: skip

_UMASK = os.umask(0o022)  # read once, at import (os.umask can only be read by setting it) ...
os.umask(_UMASK)  # ... and put back at once


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yields a temporary path beside `path`; on success it is fsynced and renamed over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; the result gets the mode any new file would
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> None:
    """Calls `write(tmp)` and moves tmp over `path` only when it returned."""
    with atomic_path(path) as tmp:
        write(tmp)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


@contextlib.contextmanager
def staged_dir(dst: str | Path) -> Iterator[Path]:
    """Yields an empty folder beside `dst` to write a whole folder into; when the block ends without an error it
    replaces `dst` (`replace_dir`), so that a kill at any point leaves the old folder or the new one, whole.

        with staged_dir(out / "model") as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
    """
    dst = recover_dir(Path(dst))
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_dir(tmp, dst)


def replace_dir(src: Path, dst: Path) -> None:
    """Moves the finished folder `src` over `dst`. Between the two renames the old one is `dst`.old, which
    `recover_dir` puts back, so a kill at any point leaves one whole folder."""
    old = dst.with_name(dst.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if dst.exists():
        dst.rename(old)
    src.rename(dst)
    shutil.rmtree(old, ignore_errors=True)


def recover_dir(dst: Path) -> Path:
    """Gives `dst`, first putting back the old folder when a `replace_dir` was stopped between its renames."""
    old = dst.with_name(dst.name + ".old")
    if not dst.exists() and old.exists():
        old.rename(dst)
    return dst
