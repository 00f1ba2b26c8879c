"""Every figure the docs quote from a committed report is in that report.

A quote is marked in the Markdown source:

    <!-- figures from demo/en/report.md -->
    ... text and tables ...
    <!-- end of figures -->

The path is relative to docs/. Each number inside (a score, a step count, a percentage, a commit) must appear
among the numbers of that report, so a rerun that changes the report without the docs fails here.
"""

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[1] / "docs"
QUOTE = re.compile(r"<!-- figures from (\S+) -->\n(.*?)<!-- end of figures -->", re.S)
# 2,394 · -0.4 · +19.0 · 26.6% · 7.3 min; not the digits inside words (bf16, L6, fonts-wqy) nor markdown links
NUMBER = re.compile(r"(?<![\w.])[-+−]?\d[\d,]*(?:\.\d+)?(?![\w])")
COMMIT = re.compile(r"commit ([0-9a-f]{7,40})\b")


def numbers(text: str) -> set[str]:
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets are not figures
    return {n.replace(",", "").replace("−", "-").lstrip("+") for n in NUMBER.findall(text)}


def quotes() -> list[tuple[str, str, str]]:
    found = []
    for doc in sorted(DOCS.rglob("*.md")):
        for source, body in QUOTE.findall(doc.read_text(encoding="utf-8")):
            found.append((str(doc.relative_to(DOCS)), source, body))
    return found


def test_the_demo_docs_quote_both_committed_reports() -> None:
    sources = {(doc, source) for doc, source, _ in quotes()}
    assert ("demo.md", "demo/en/report.md") in sources and ("demo.md", "demo/zh/report.md") in sources


@pytest.mark.parametrize(("doc", "source", "body"), quotes(), ids=lambda v: v if "\n" not in v else "")
def test_quoted_figures_are_in_the_report(doc: str, source: str, body: str) -> None:
    report = (DOCS / source).read_text(encoding="utf-8")
    missing = sorted(numbers(body) - numbers(report), key=lambda n: (len(n), n))
    assert not missing, f"docs/{doc} quotes figures that docs/{source} does not hold: {missing}"
    for commit in COMMIT.findall(body):
        assert f"commit {commit}" in report, f"docs/{doc}: commit {commit} is not the one docs/{source} was made at"


def test_numbers_are_read_as_written() -> None:
    assert numbers("2,394 steps, +19.0 (-3.3 to +2.3), 26.6%; bf16 L6 [x](a/1.md)") == {"2394", "19.0", "-3.3", "2.3", "26.6"}
