"""The committed docs and reports speak to a user: no path of the machine they were written on, and no word of
how the work was done (who worked when, in what order, on which step of the project).

A user's clone has no /root, /work or ../shared; a reader of the docs was not there when they were written. A path
a reader needs is one they will have (a file of the clone, an output folder of the command shown) or the name of
the data and where to get it.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "docs").rglob("*.html"))]

# An absolute path of a machine (a URL's path is not one: a letter, digit or dot comes before its slash), a
# Windows drive, a home folder, or the developers' folder beside the clone.
ABSOLUTE = re.compile(r"(?<![\w.:/-])(?:/(?:root|work|home|tmp|Users|mnt|var|opt|srv|private)\b|~/|[A-Z]:\\)"
                      r"|\.\./shared\b")
PROCESS = re.compile("|".join([
    r"\bsessions?\b",                    # "in the previous session", "this session", "across two sessions"
    r"\bstop note\b",
    r"\barchitecture step\b",
    r"\bresearch out of the product\b",
    r"\bthis project's (?:\d-core )?(?:machine|CPU)\b",
    r"\bissue #?\d+\b",
    r"\blab notebook\b",
]), re.IGNORECASE)


def findings(text: str, pattern: re.Pattern) -> list[str]:
    """Each match with its line number and the line around it."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        for found in pattern.finditer(line):
            start = max(0, found.start() - 40)
            out.append(f"line {number}: {found.group(0)!r} in ...{line[start:found.end() + 40]}...")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_absolute_path_of_a_machine(doc: Path) -> None:
    found = findings(doc.read_text(encoding="utf-8"), ABSOLUTE)
    assert not found, f"{doc.relative_to(ROOT)} holds paths a reader's machine does not have:\n" + "\n".join(found)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_word_of_the_development_process(doc: Path) -> None:
    found = findings(doc.read_text(encoding="utf-8"), PROCESS)
    assert not found, f"{doc.relative_to(ROOT)} speaks of how it was made, not to its reader:\n" + "\n".join(found)


def test_the_checks_catch_what_they_are_for() -> None:
    for path in ("/root/data", "(/work/main/runs/hf-home/hub)", "at /home/me/x", "/tmp/x", "../shared/data/models",
                 "C:\\Users\\me", "~/models"):
        assert ABSOLUTE.search(path), path
    for fine in ("https://download.pytorch.org/whl/cpu", "localhost:8000/v1/predict", "runs/tmp/x", "docs/demo/en",
                 "src/bertkit/data/zh/seed", "a 2/work ratio"):
        assert not ABSOLUTE.search(fine), fine
    for words in ("in the previous session", "this session", "a stop note", "the architecture step that took",
                  "on this project's 2-core CPU", "this project's machine"):
        assert PROCESS.search(words), words
    assert not PROCESS.search("on a 2-core Intel Xeon, the machine the report names")
