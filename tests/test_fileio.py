"""Atomic writes: a failed or interrupted write leaves the old file whole and no debris beside it."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from bertkit.fileio import atomic_write, atomic_write_text


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    atomic_write_text(path, "old")

    def half_then_disk_full(tmp: Path) -> None:
        tmp.write_text("new but only ha")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        atomic_write(path, half_then_disk_full)
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.json"]  # no temporary file left


def test_an_interrupted_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "report.md"
    atomic_write_text(path, "old")

    def interrupted(tmp: Path) -> None:
        tmp.write_text("partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, interrupted)
    assert path.read_text() == "old"
    assert len(list(tmp_path.iterdir())) == 1


def test_written_files_get_the_usual_mode(tmp_path: Path) -> None:
    mask = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a" / "b.txt", "x")  # parents are made
    finally:
        os.umask(mask)
    mode = stat.S_IMODE((tmp_path / "a" / "b.txt").stat().st_mode)
    assert mode == 0o666 & ~0o022 or mode == 0o666 & ~mask  # not mkstemp's 0600
