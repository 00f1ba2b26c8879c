"""A run's metrics log: RUN/log.jsonl (one JSON object a line, each with its "step") and TensorBoard
events in RUN/tb. The training loop writes it; `bertkit plot` and the demo's report read it."""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

from .fileio import atomic_write_text

log = logging.getLogger("bertkit")


class MetricsLog:
    """Writes the run's metrics as JSON lines (RUN/log.jsonl) and TensorBoard events (RUN/tb); a no-op where
    not `enabled` (every process but rank 0)."""

    def __init__(self, run_dir: Path, enabled: bool, truncate_after: int):
        self.enabled = enabled
        self.path = run_dir / "log.jsonl"
        self.tb = None
        if not enabled:
            return
        rows = [r for r in read_log(self.path) if r["step"] <= truncate_after]  # a resumed run rewrites what follows
        atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in rows))
        self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run_dir / "tb"), purge_step=truncate_after + 1 if truncate_after else None)
        except ImportError:
            log.info("tensorboard is not installed: metrics go to %s only", self.path)

    def write(self, row: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()
        if self.tb is not None:
            for k, v in row.items():
                if k != "step" and isinstance(v, (int, float)):
                    self.tb.add_scalar(k, v, row["step"])

    def close(self) -> None:
        if self.enabled:
            self.file.close()
            if self.tb is not None:
                self.tb.close()


def read_log(path: Path) -> list[dict[str, Any]]:
    """Gives the rows of a log.jsonl; a line cut short by a killed process is skipped."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            row = json.loads(line)
            if isinstance(row, dict) and "step" in row:
                rows.append(row)
    return rows


