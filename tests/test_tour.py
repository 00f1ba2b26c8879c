"""docs/tour.md runs: its Python blocks, in order, in one namespace, each printed output checked against the
```text block that follows it (```text varies: run, not compared). A tour that drifts from the code fails here.

    python tests/test_tour.py     # reruns the tour; rewrites its outputs and its pictures (docs/img/tour/)
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from pictures import check_attention

TOUR = Path(__file__).parents[1] / "docs" / "tour.md"
PICTURES = TOUR.parent / "img" / "tour"
BLOCK = re.compile(r"```(python|text(?: varies)?|bash)\n(.*?)```", re.DOTALL)


def blocks(markdown: str) -> list[tuple[str, str, re.Match]]:
    return [(m.group(1), m.group(2), m) for m in BLOCK.finditer(markdown)]


def run_tour(workdir: Path) -> list[tuple[str, str | None, str | None, re.Match | None]]:
    """Runs the tour's Python blocks in `workdir`; gives (code, printed, expected or None, the output block)."""
    found = blocks(TOUR.read_text(encoding="utf-8"))
    namespace: dict = {"__name__": "__tour__"}
    results = []
    cwd = Path.cwd()
    os.chdir(workdir)
    try:
        for k, (kind, code, _) in enumerate(found):
            if kind != "python":
                continue
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(compile(code, f"docs/tour.md block {k + 1}", "exec"), namespace)
            after = found[k + 1] if k + 1 < len(found) and found[k + 1][0].startswith("text") else None
            expected = after[1] if after is not None and after[0] == "text" else None
            results.append((code, printed.getvalue(), expected, after[2] if after is not None else None))
    finally:
        os.chdir(cwd)
    return results


@pytest.mark.slow
def test_the_tour_runs_and_prints_what_it_shows(tmp_path: Path) -> None:
    results = run_tour(tmp_path)
    assert len(results) >= 10
    for code, printed, expected, _ in results:
        if expected is not None:
            assert printed == expected, f"{code}\n--- printed ---\n{printed}--- the tour shows ---\n{expected}"
    pictures = re.findall(r"\(img/tour/([\w.-]+)\)", TOUR.read_text(encoding="utf-8"))
    assert pictures == ["attention.png"]  # a picture the tour adds gets a check of what it shows, here
    work = tmp_path / "runs" / "tour"
    model = json.loads((work / "pretrain" / "model" / "config.json").read_text())
    for drawn in (work / "attention.png", PICTURES / "attention.png"):  # as the tour draws it, and the docs' copy
        assert drawn.is_file(), f"{drawn}: run python tests/test_tour.py"
        check_attention(drawn, model["num_hidden_layers"], model["num_attention_heads"])


def write() -> None:
    """Reruns the tour and writes what it printed into its output blocks, and its pictures into docs/img/tour."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        results = run_tour(Path(tmp))
        text = TOUR.read_text(encoding="utf-8")
        for _, printed, _, block in reversed(results):
            if block is not None:
                kind = block.group(1)
                text = text[: block.start()] + f"```{kind}\n{printed}```" + text[block.end() :]
        TOUR.write_text(text, encoding="utf-8")
        PICTURES.mkdir(parents=True, exist_ok=True)
        for picture in re.findall(r"\(img/tour/([\w.-]+)\)", text):
            shutil.copy(Path(tmp) / "runs" / "tour" / picture, PICTURES / picture)
    print(f"wrote {TOUR} and its pictures", file=sys.stderr)


if __name__ == "__main__":
    write()
