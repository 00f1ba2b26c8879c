"""What every benchmark shares: threads, step-by-step alternation, medians, useful FLOPs, the GEMM
peak, MFU, CPU contention, and peak memory of a child process.

Timing. Both frameworks run in one process and take turns step by step (bertkit first on even
rounds, transformers first on odd ones), each round on the same batch, so that load from other
processes and slow drift (thermal, caches, allocator) fall on both alike. A benchmark reports
medians over the rounds, the spread as the inter-quartile range relative to the median, and the
ratio as the median over rounds of t_transformers / t_bertkit (a paired ratio, robust to load that
changes between rounds; it equals the ratio of the median speeds when the load is steady). A round
during which other processes kept more than 0.4 core busy (from /proc/stat) is thrown away and rerun
after a pause: two OpenMP threads that wait on each other slow down many times over when another
process takes one of the two cores.

Useful FLOPs (the same count for both frameworks, so a ratio of MFUs is a ratio of speeds):
  * a matrix multiply of an (n, k) input by a (k, m) weight is 2nkm FLOPs forward and 4nkm backward
    (the gradients of the input and of the weight), so the encoder layers cost 2 P N in inference and
    6 P N in training, P = the parameters of the encoder layers (biases and LayerNorm included, embeddings
    excluded: a lookup is no multiply), N = the real (non-[PAD]) tokens;
  * attention: per layer and sequence of real length s, QK^T and PV are 2 s^2 H FLOPs each, so
    4 L H sum(s^2) forward; backward computes dQ, dK (from dS) and dV, dP (from dO): twice the
    forward, so 12 L H sum(s^2) in training. Padded positions are not useful work;
  * heads on the rows they need: pooler (H x H) and NSP (H x 2) or the classifier (H x labels) on the
    B sequences, and the MLM head (transform H x H, decoder H x V) on the M masked tokens only,
    6 x (H^2 + H V) x M in training. A framework that computes the decoder at every position does
    more work, but not more useful work.
MFU = useful FLOPs per second / the GEMM peak at that precision, measured here as the best of several
torch.matmul runs of three large shapes on the same threads (fp32; bf16 for bf16 autocast).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bertkit import BertConfig

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
RESULTS_DIR = ROOT / "bench" / "results"  # the JSON of runs too long for RESULTS.md (fine-tuning comparisons)
BK, HF = "bertkit", "transformers"


def set_threads(n: int) -> None:
    """Pins torch (and tokenizers' Rust pool, for child processes) to n threads."""
    torch.set_num_threads(n)
    os.environ["RAYON_NUM_THREADS"] = str(n)
    os.environ["OMP_NUM_THREADS"] = str(n)


def autocast(precision: str) -> contextlib.AbstractContextManager:
    """bf16 autocast on the CPU, or nothing for fp32."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")


# ---- timing -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """How long to measure: warm-up calls per side, then rounds until both min_rounds and budget_s are
    reached (or max_rounds). A round during which other processes kept more than max_others cores
    busy is discarded and rerun after backoff_s, up to max_discarded times."""

    warmup: int = 2
    min_rounds: int = 5
    max_rounds: int = 30
    budget_s: float = 30.0
    max_others: float = 0.4
    max_discarded: int = 20
    backoff_s: float = 10.0


QUICK = Plan(warmup=1, min_rounds=3, max_rounds=3, budget_s=0, max_discarded=0)  # a smoke run, not a measurement
TICK_S = 0.01  # /proc/stat and os.times() count in 10 ms ticks: allow a couple of ticks of noise on short rounds


@dataclass
class Timings:
    seconds: dict[str, list[float]]  # side -> seconds of each kept round
    discarded: int = 0  # rounds thrown away because other processes were busy


def alternate(sides: dict[str, Callable[[int], Any]], plan: Plan) -> Timings:
    """Gives each side's seconds per round; round i calls every side with i (the batch index), in
    turn, the order flipped every other round."""
    names = list(sides)
    for i in range(plan.warmup):
        for name in names:
            sides[name](i)
    out = Timings({name: [] for name in names})
    start = time.perf_counter()
    i = 0
    while i < plan.max_rounds and (i < plan.min_rounds or time.perf_counter() - start < plan.budget_s):
        monitor, took = CpuMonitor(), {}
        for name in names if i % 2 == 0 else reversed(names):
            t0 = time.perf_counter()
            sides[name](i)
            took[name] = time.perf_counter() - t0
        if monitor.others() > plan.max_others + 2 * TICK_S / monitor.elapsed() and out.discarded < plan.max_discarded:
            out.discarded += 1
            time.sleep(plan.backoff_s)
            continue  # the same round again
        for name, t in took.items():
            out.seconds[name].append(t)
        i += 1
    return out


def spread(values: Sequence[float]) -> float:
    """Inter-quartile range relative to the median (0 for fewer than 2 values)."""
    if len(values) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (q3 - q1) / statistics.median(values)


@dataclass
class Comparison:
    """One configuration measured on both sides: round i processed tokens[i % len] real tokens and
    flops[i % len] useful FLOPs."""

    config: dict[str, Any]
    tokens: list[int]
    flops: list[float]
    peak: float  # GEMM FLOP/s at this precision
    timings: Timings
    memory: dict[str, dict[str, float]] = field(default_factory=dict)  # side -> peak memory figures
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def times(self) -> dict[str, list[float]]:
        return self.timings.seconds

    def _per_round(self, side: str, work: list) -> list[float]:
        return [work[i % len(work)] / t for i, t in enumerate(self.times[side])]

    def tok_s(self, side: str) -> float:
        return statistics.median(self._per_round(side, self.tokens))

    def tok_s_spread(self, side: str) -> float:
        return spread(self._per_round(side, self.tokens))

    def mfu(self, side: str) -> float:
        return statistics.median(self._per_round(side, self.flops)) / self.peak

    def ms(self, side: str) -> float:
        return 1000 * statistics.median(self.times[side])

    def ratio(self, numerator: str = HF, denominator: str = BK) -> float:
        """Median over rounds of t_numerator / t_denominator: how many times faster `denominator` is."""
        return statistics.median(a / b for a, b in zip(self.times[numerator], self.times[denominator], strict=True))

    def best_ratio(self, numerator: str = HF, denominator: str = BK) -> float:
        """min(t_numerator) / min(t_denominator): the ratio of the least disturbed calls (for a busy machine)."""
        return min(self.times[numerator]) / min(self.times[denominator])

    def summary(self) -> dict[str, Any]:
        """Gives the figures as plain values (for JSON)."""
        sides = list(self.times)
        return {
            "config": self.config,
            "rounds": len(self.times[sides[0]]),
            "discarded": self.timings.discarded,
            "ratio": self.ratio() if BK in self.times and HF in self.times else None,
            "best_ratio": self.best_ratio() if BK in self.times and HF in self.times else None,
            **{side: {"tok_s": self.tok_s(side), "spread": self.tok_s_spread(side), "mfu": self.mfu(side),
                      "ms": self.ms(side), "memory": self.memory.get(side)} for side in sides},
            **self.extra,
        }


# ---- useful FLOPs, GEMM peak ----------------------------------------------------------------------------

def layer_parameters(cfg: BertConfig) -> int:
    """Parameters of one encoder layer: QKV + output projections, feed-forward, two LayerNorms."""
    H, inner = cfg.hidden_size, cfg.intermediate_size
    return (4 * H * H + 4 * H) + (2 * H * inner + inner + H) + 4 * H


def encoder_flops(cfg: BertConfig, lengths: Sequence[int], train: bool) -> float:
    """Useful FLOPs of the encoder layers on sequences of these real lengths (see the module docstring)."""
    n_tokens, sum_sq = sum(lengths), sum(s * s for s in lengths)
    dense, attention = (6, 12) if train else (2, 4)
    return cfg.num_hidden_layers * (dense * layer_parameters(cfg) * n_tokens + attention * cfg.hidden_size * sum_sq)


def pretraining_flops(cfg: BertConfig, lengths: Sequence[int], n_masked: int) -> float:
    """Useful FLOPs of a pre-training step: encoder, pooler + NSP per sequence, MLM head per masked token."""
    H, V = cfg.hidden_size, cfg.vocab_size
    pooler_nsp = 6 * len(lengths) * (H * H + H + 2 * H + 2)
    mlm = 6 * n_masked * (H * H + H + 2 * H + H * V + V)
    return encoder_flops(cfg, lengths, train=True) + pooler_nsp + mlm


def classifier_flops(cfg: BertConfig, lengths: Sequence[int], train: bool) -> float:
    """Useful FLOPs of sequence classification: encoder, then pooler + classifier per sequence."""
    H, n = cfg.hidden_size, cfg.num_labels
    return encoder_flops(cfg, lengths, train) + (6 if train else 2) * len(lengths) * (H * H + H + H * n + n)


def inference_flops(cfg: BertConfig, lengths: Sequence[int]) -> float:
    """Useful FLOPs of a BertModel forward: encoder, then the pooler per sequence."""
    H = cfg.hidden_size
    return encoder_flops(cfg, lengths, train=False) + 2 * len(lengths) * (H * H + H)


GEMM_SHAPES = ((4096, 1024, 4096), (4096, 768, 3072), (4096, 3072, 768))  # (m, k, n): square-ish, BERT-base FFN


def gemm_peak(dtype: torch.dtype, repeats: int, shapes: Sequence[tuple[int, int, int]] = GEMM_SHAPES) -> float:
    """Gives the best FLOP/s of a `dtype` GEMM over `repeats` runs of each (m, k) @ (k, n) shape: the better of
    torch.matmul into a preallocated output (so that page faults on a fresh 64 MB result do not count) and, in
    bf16, of the linear layer under autocast, which is how the models multiply. On a CPU without native bf16
    (no AVX512-BF16 or AMX) torch.matmul's bf16 path is a slow reference loop, ~1% of the autocast one: a peak
    taken from it alone would give MFUs far above 1."""
    best = 0.0
    for m, k, n in shapes:
        a, b, c = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype), torch.empty(m, n, dtype=dtype)
        torch.matmul(a, b, out=c)  # warm-up: kernel selection, first touch of c
        seconds = min(_seconds(lambda a=a, b=b, c=c: torch.matmul(a, b, out=c)) for _ in range(repeats))
        best = max(best, 2 * m * k * n / seconds)
        if dtype == torch.bfloat16:
            x, w = torch.randn(m, k), torch.randn(n, k)
            with torch.autocast("cpu", dtype=dtype):
                torch.nn.functional.linear(x, w)
                seconds = min(_seconds(lambda x=x, w=w: torch.nn.functional.linear(x, w)) for _ in range(repeats))
            best = max(best, 2 * m * k * n / seconds)
    return best


def onednn_fp32_peak(repeats: int, m: int = 4096, k: int = 768, n: int = 3072) -> float:
    """Gives the best FLOP/s of oneDNN's fp32 linear (torch's mkldnn_linear on mkldnn tensors): what the
    CPU does in fp32 when not held to the BLAS (MKL) kernels that torch.matmul and nn.Linear use."""
    x, w, bias = torch.randn(m, k).to_mkldnn(), torch.randn(n, k).to_mkldnn(), torch.zeros(n)
    torch._C._nn.mkldnn_linear(x, w, bias)
    return 2 * m * k * n / min(_seconds(lambda: torch._C._nn.mkldnn_linear(x, w, bias)) for _ in range(repeats))


def _seconds(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# ---- the machine and its load -------------------------------------------------------------------------

def machine() -> dict[str, str]:
    """Gives the CPU model, core count and library versions."""
    import tokenizers
    import transformers

    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"model name\s*:\s*(.*)", cpuinfo)
    flags = re.search(r"flags\s*:\s*(.*)", cpuinfo)
    isa = [f for f in ("avx512f", "avx512_bf16", "amx_bf16") if flags and f in flags.group(1).split()]
    return {
        "cpu": (model.group(1).strip() if model else platform.processor()) + (f" ({', '.join(isa)})" if isa else ""),
        "cores": str(os.cpu_count()),
        "threads": str(torch.get_num_threads()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
    }


def _busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (/proc/stat; not idle, iowait or steal)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class CpuMonitor:
    """Measures how many cores *other* processes kept busy while a benchmark ran (0 on a quiet machine)."""

    def __init__(self) -> None:
        self.wall, self.busy, self.own = time.perf_counter(), _busy_seconds(), _own_seconds()

    def elapsed(self) -> float:
        return time.perf_counter() - self.wall

    def others(self) -> float:
        """Gives the average number of cores other processes kept busy since this monitor was made."""
        others = (_busy_seconds() - self.busy) - (_own_seconds() - self.own)
        return max(0.0, others) / max(self.elapsed(), 1e-9)


def wait_for_quiet(max_wait_s: float = 1200, poll_s: float = 120, threshold: float = 0.5, sample_s: float = 10,
                   log: Callable[[str], None] = print) -> dict[str, float]:
    """Waits (up to max_wait_s) until other processes keep fewer than `threshold` cores busy over a
    sample of sample_s seconds; gives the last sample, the 1-minute load average and the seconds waited."""
    start = time.perf_counter()
    while True:
        monitor = CpuMonitor()
        time.sleep(sample_s)
        others, waited = monitor.others(), time.perf_counter() - start
        if others < threshold or waited + poll_s > max_wait_s:
            return {"others_cores": others, "loadavg_1m": os.getloadavg()[0], "waited_s": waited}
        log(f"other processes keep {others:.1f} cores busy (load {os.getloadavg()[0]:.2f}); retrying in {poll_s:.0f} s")
        time.sleep(poll_s)


# ---- peak memory --------------------------------------------------------------------------------------

def _status_kib(key: str) -> int:
    match = re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    return int(match.group(1)) if match else 0


@contextlib.contextmanager
def peak_rss() -> Iterator[dict[str, float]]:
    """Measures this process's peak resident memory (MiB) within the block, above the RSS at its start.

    On Linux the peak (VmHWM) is reset at the start by writing 5 to /proc/self/clear_refs, so whatever
    ran before (building the model) does not count; elsewhere it falls back to ru_maxrss, which is
    only right when the block's peak is the process's highest.
    """
    import resource

    before = _status_kib("VmRSS")
    try:
        Path("/proc/self/clear_refs").write_text("5")
        method = "VmHWM after clear_refs"
    except OSError:
        method = "ru_maxrss"
    result: dict[str, Any] = {"method": method}
    yield result
    peak = _status_kib("VmHWM") if method != "ru_maxrss" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result.update(before_mib=before / 1024, peak_mib=peak / 1024, step_mib=(peak - before) / 1024)


def run_child(module: str, args: list[str], timeout_s: float = 1800) -> dict[str, Any]:
    """Runs `python -m module args` from the repository root and gives the JSON of its last stdout line."""
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout_s, env=os.environ.copy())
    if proc.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
