"""Atomic writes: a failed or interrupted write leaves the old file whole and no debris beside it."""

from __future__ import annotations

import errno
import stat
import subprocess
import sys
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


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640)], ids=["umask 022", "umask 027"])
def test_written_files_get_the_mode_the_umask_gives(tmp_path: Path, umask: int, mode: int) -> None:
    # mkstemp makes its file 0600 whatever the umask; a written file must get what open() would give it. A fresh
    # process with a known umask, since bertkit.fileio reads the umask once, at import.
    code = ("import os, sys; os.umask(int(sys.argv[1], 8)); from bertkit.fileio import atomic_write_text; "
            "atomic_write_text(sys.argv[2], 'x')")
    path = tmp_path / "a" / "b.txt"  # parents are made
    subprocess.run([sys.executable, "-c", code, oct(umask), str(path)], check=True)
    assert stat.S_IMODE(path.stat().st_mode) == mode
