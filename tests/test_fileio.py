"""Atomic writes: a failed or interrupted write leaves the old file whole and no debris beside it."""

from __future__ import annotations

import errno
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit.fileio import atomic_write, atomic_write_text, recover_dir, staged_dir


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


KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from bertkit.fileio import staged_dir

dst, stop = Path(sys.argv[1]), sys.argv[2]
renames = 0
rename = Path.rename

def counted(self, target):
    global renames
    out = rename(self, target)
    renames += 1
    if stop == f"rename{renames}":
        os.kill(os.getpid(), signal.SIGKILL)
    return out

Path.rename = counted
with staged_dir(dst) as tmp:
    (tmp / "a.txt").write_text("new a")
    if stop == "writing":
        os.kill(os.getpid(), signal.SIGKILL)
    (tmp / "b.txt").write_text("new b")
if stop == "done":
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("stop", ["writing", "rename1", "rename2", "done"])
def test_a_kill_at_any_step_of_a_staged_folder_leaves_one_whole_folder(tmp_path: Path, stop: str) -> None:
    """kill -9 while the new folder is written, between replace_dir's two renames, after them: the folder is the
    old one whole or the new one whole, once recovered (as the next run of export, pretrain or finetune does)."""
    dst = tmp_path / "model"
    dst.mkdir()
    (dst / "a.txt").write_text("old a")
    (dst / "b.txt").write_text("old b")
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(dst), stop], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    found = {p.name: p.read_text() for p in recover_dir(dst).iterdir()}
    assert found in ({"a.txt": "old a", "b.txt": "old b"}, {"a.txt": "new a", "b.txt": "new b"}), found
    expected_new = stop in ("rename2", "done")
    assert found["a.txt"] == ("new a" if expected_new else "old a")
    with staged_dir(dst) as tmp:  # and the next write succeeds over what was left
        (tmp / "c.txt").write_text("c")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"] and [p.name for p in dst.iterdir()] == ["c.txt"]
