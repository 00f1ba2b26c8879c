"""The fine-tuning comparisons in bench/: their data splits and result tables (the runs themselves
take minutes to hours and live in bench/, not in the test suite)."""

from __future__ import annotations

import csv
from pathlib import Path

from bench import finetune_compare, zh_finetune


def test_comparison_table_gives_difference_and_speed_up() -> None:
    jobs = finetune_compare.jobs(Path("/nonexistent"))
    results = {
        "rte": {"bertkit": {"dev": {"accuracy": 60.0}, "seconds": 120.0},
                "transformers": {"dev": {"accuracy": 58.5}, "seconds": 300.0}},
        "squad": {"bertkit": {"dev": {"exact_match": 40.0, "f1": 52.0}, "seconds": 60.0},
                  "transformers": {"dev": {"exact_match": 41.0, "f1": 53.5}, "seconds": 90.0}},
        "mrpc": {"bertkit": {"dev": {"f1": 80.0}, "seconds": 1.0}},  # one side missing: no row
    }
    rows = finetune_compare.table(results, jobs).splitlines()
    assert len(rows) == 4
    assert rows[2] == "| RTE dev accuracy | 60.00 | 58.50 | +1.50 | 2.0 min | 5.0 min | 2.50x |"
    assert rows[3].startswith("| SQuAD v1.1 (articles 0-37 -> 38-47) EM/F1 | 40.00 / 52.00 | 41.00 / 53.50 | -1.50 |")


def test_waimai_split_is_fixed_disjoint_and_80_10_10(shared_data: Path, tmp_path: Path) -> None:
    def rows(path: Path) -> list[tuple[str, str]]:
        with path.open(encoding="utf-8", newline="") as f:
            return [tuple(r) for r in list(csv.reader(f))[1:]]

    first = [rows(p) for p in zh_finetune.waimai_split(tmp_path)]
    (tmp_path / "again").mkdir()
    again = [rows(p) for p in zh_finetune.waimai_split(tmp_path / "again")]
    assert first == again
    assert [len(part) for part in first] == [9589, 1199, 1199]  # 11,987 reviews
    # together the parts are the file's rows, each once (a few reviews occur twice in the file, so compare multisets)
    assert sorted(first[0] + first[1] + first[2]) == sorted(rows(shared_data / "waimai_10k" / "waimai_10k.csv"))
    assert {label for part in first for label, _ in part} == {"0", "1"}
