"""Benchmark 5: `bertkit prepare` (raw text to MLM + NSP shards). Its benchmark lives in
bench/prepare_bench.py (someone else's); this runs it in a child process, where it exists, and
includes what it prints."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

from .common import ROOT
from .report import Options, Section

SCRIPT = ROOT / "bench" / "prepare_bench.py"
TITLE = "5. `prepare` (bench/prepare_bench.py)"


def run(opts: Options, peaks: dict[str, float], log: Callable[[str], None]) -> Section:
    if not SCRIPT.exists():
        return Section("prepare", TITLE, "Not run: bench/prepare_bench.py is absent from this checkout.")
    helps = subprocess.run([sys.executable, str(SCRIPT), "--help"], cwd=ROOT, capture_output=True, text=True)
    args = ["--quick"] if opts.quick and "--quick" in helps.stdout else []
    shown = " ".join(["python bench/prepare_bench.py", *args])
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True)
    log(f"prepare: exit code {proc.returncode}")
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        return Section("prepare", TITLE, f"`{shown}` failed "
                                         f"(exit code {proc.returncode}):\n\n```\n{tail}\n```",
                       [{"config": {}, "error": tail}])
    return Section("prepare", TITLE, f"Output of `{shown}`:\n\n"
                                     + proc.stdout.strip(), [{"config": {}, "output": proc.stdout}])
