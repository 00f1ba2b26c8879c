"""Smoke tests of bench/: the pre-training-step and inference benchmarks run end to end at the tiny
preset and give well-formed figures. They check the output's structure, not speed; one thread, so that
a busy machine slows them in proportion (two OpenMP threads wait on each other when a core is taken)."""

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit import BertConfig

pytestmark = pytest.mark.slow  # whole benchmark runs: the full suite only (./dev test)

ROOT = Path(__file__).parents[1]
# `python -m bench ARGS`, each record also giving what its figures are computed from (under "raw"): every kept
# round's seconds on each side, the real tokens and useful FLOPs of each batch, and the GEMM peak used
RECORDING = """
import sys
from bench import common
from bench.__main__ import main

summary = common.Comparison.summary
common.Comparison.summary = lambda c: {**summary(c), "raw": {"seconds": c.times, "tokens": c.tokens, "flops": c.flops,
                                                             "peak": c.peak}}
main(sys.argv[1:])
"""


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("bench")
    cmd = [sys.executable, "-c", RECORDING, "--quick", "--only", "pretrain", "--only", "inference", "--preset", "tiny",
           "--batch-size", "4", "--seq-len", "32", "--no-memory", "--threads", "1", "--out", str(out / "RESULTS.md"),
           "--json", str(out / "results.json")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "results.json").read_text()), (out / "RESULTS.md").read_text()


def check_comparison(record: dict, peaks: dict[str, float]) -> None:
    """Checks a record's figures against their definitions in bench/common.py, from the times of its rounds."""
    raw = record["raw"]
    ours, theirs = raw["seconds"]["bertkit"], raw["seconds"]["transformers"]
    # the same workload on both sides: the same rounds, round i on batch i % (number of batches) for both
    # rounds run while other processes kept the machine busy are discarded and rerun (up to 20): a busy machine
    # (CI beside other jobs) may discard some, and the kept rounds are still 3
    assert len(ours) == len(theirs) == record["rounds"] == 3 and 0 <= record["discarded"] <= 20
    assert len(raw["tokens"]) == len(raw["flops"]) and all(t > 0 for t in raw["tokens"])
    assert raw["peak"] == peaks[record["config"]["precision"]]  # the peak of the record's precision
    # ratio: the median over rounds of t_transformers / t_bertkit, paired round by round; best-of: the fastest calls
    assert record["ratio"] == pytest.approx(statistics.median(t / o for o, t in zip(ours, theirs, strict=True)), rel=1e-9)
    assert record["best_ratio"] == pytest.approx(min(theirs) / min(ours), rel=1e-9)
    for side, seconds in (("bertkit", ours), ("transformers", theirs)):
        batch = [i % len(raw["tokens"]) for i in range(len(seconds))]
        # tokens/s and MFU: medians over rounds of that round's tokens (useful FLOPs / peak) over its time
        assert record[side]["tok_s"] == pytest.approx(
            statistics.median(raw["tokens"][b] / t for b, t in zip(batch, seconds, strict=True)), rel=1e-9)
        assert record[side]["mfu"] == pytest.approx(
            statistics.median(raw["flops"][b] / t for b, t in zip(batch, seconds, strict=True)) / raw["peak"], rel=1e-9)
        assert record[side]["ms"] == pytest.approx(1000 * statistics.median(seconds), rel=1e-9)
        assert 0 < record[side]["mfu"] <= 1, record


def test_pretraining_step_figures(quick_run):
    results, _ = quick_run
    records = results["sections"]["pretrain"]["records"]
    assert {(r["config"]["preset"], r["config"]["precision"]) for r in records} == {("tiny", "fp32"), ("tiny", "bf16")}
    assert results["header"]["peaks"]["fp32"] > 0 and results["header"]["peaks"]["bf16"] > 0
    for r in records:
        check_comparison(r, results["header"]["peaks"])
        # 4 distinct batches of 4 x 32, cycled (the quick run's 3 rounds take the first 3): real tokens, 15% masked
        assert r["config"]["batch"] == "4 x 32" and len(r["raw"]["tokens"]) == 4 and max(r["raw"]["tokens"]) <= 128
        assert 0 < r["masked_per_batch"] < 0.2 * 128


def useful_inference_flops(cfg: BertConfig, batch: int, length: int) -> int:
    """A forward's useful FLOPs as bench/common.py defines them, counted here from its docstring: 2 x the encoder
    layers' parameters x the tokens, 4 x layers x hidden x sum(length^2) for attention, the pooler per sequence."""
    H, inner, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    layer = (4 * H * H + 4 * H) + (2 * H * inner + inner + H) + 4 * H  # Q, K, V, output; feed-forward; 2 LayerNorms
    return L * (2 * layer * batch * length + 4 * H * batch * length**2) + 2 * batch * (H * H + H)


def test_inference_figures(quick_run):
    results, _ = quick_run
    records = results["sections"]["inference"]["records"]
    assert "32 x 32 full" not in {r["config"]["workload"] for r in records}  # the batch shape comes from the options
    full = [r for r in records if r["config"]["workload"] == "4 x 32 full"]
    assert sorted(r["config"]["precision"] for r in full) == ["bf16", "fp32"]
    for r in records:
        check_comparison(r, results["header"]["peaks"])
    # the full 4 x 32 batch is the same work every round: --quick's three rounds give speed and MFU from the middle
    # (median) round's time, 128 tokens and the FLOPs counted above
    flops = useful_inference_flops(BertConfig.preset("tiny"), 4, 32)
    for r in full:
        assert r["rounds"] == 3
        for side in ("bertkit", "transformers"):
            seconds = r[side]["ms"] / 1000
            assert r[side]["tok_s"] == pytest.approx(128 / seconds, rel=1e-9), (side, r)
            assert r[side]["mfu"] == pytest.approx(flops / seconds / results["header"]["peaks"][r["config"]["precision"]],
                                                   rel=1e-9), (side, r)


def test_results_markdown(quick_run):
    results, markdown = quick_run
    for heading in ("## Machine", "## Targets", "## 1. Pre-training step", "## 2. Inference", "## Method"):
        assert heading in markdown
    # every record's figures are in its table row, as the JSON gives them
    for section in ("pretrain", "inference"):
        for r in results["sections"][section]["records"]:
            assert (f"| **{r['ratio']:.2f}x** | {r['best_ratio']:.2f}x | {100 * r['bertkit']['mfu']:.1f}% | "
                    f"{100 * r['transformers']['mfu']:.1f}% |") in markdown, r
    assert "python -m bench --quick" in markdown
    assert "GEMM peak" in markdown


def test_peak_memory_counts_what_the_block_allocates(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    import torch

    from bench.common import peak_rss

    with peak_rss() as memory:
        x = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
        del x
    assert 60 < memory["step_mib"] < 100, memory


def test_mlm_baselines_read_a_deterministic_corpus(tmp_path: Path) -> None:
    """On text where every word has one successor, the bigram floors lie far above the unigram one."""
    from bench.mlm_baselines import baselines
    from bertkit.pretraining import PretrainingData, prepare
    from bertkit.tokenizer import Tokenizer

    words = [f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(50)]
    lines = [" ".join(words[(d + k) % 50] for k in range(12)) + " ." for d in range(400)]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(lines[i : i + 10]) for i in range(0, 400, 10)) + "\n", encoding="utf-8")  # 40 documents
    Tokenizer.train(lines, 200).save_pretrained(tmp_path / "vocab")
    prepare([corpus], tmp_path / "vocab", tmp_path / "data", max_seq_length=32, eval_fraction=0.1, progress=False, workers=1)
    scores = baselines(PretrainingData(tmp_path / "data"), PretrainingData(tmp_path / "data", "eval"), 64, seed=0)
    assert scores["masked_tokens"] > 40
    assert scores["unigram"] < 15
    assert scores["bigram both sides"] > scores["left bigram"] > 55  # misses: a masked or special left neighbour, "."
