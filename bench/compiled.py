"""torch.compile on the bertkit side of the pre-training step: the compile time (the first pass over
the distinct batches, including recompiles for their different numbers of real tokens, less what
those steps take once compiled) and the steady-state speed, against bertkit eager and transformers
eager, all three alternating on the same batches."""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable

import torch

from bertkit import BertConfig

from .common import BK, HF, QUICK, Comparison, Plan, alternate, pretraining_flops
from .data import pretraining_batches
from .models import twins
from .pretrain_step import N_BATCHES, training_step
from .report import Options, Section, rate, table

COMPILED = "bertkit compiled"


def measure(preset: str, precision: str, opts: Options, peak: float) -> Comparison:
    cfg = BertConfig.preset(preset)
    batches = pretraining_batches(N_BATCHES, opts.batch_size, opts.seq_len, cfg.vocab_size)
    bk, hf = twins("pretraining", cfg)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(copy.deepcopy(bk))
    steps = {COMPILED: training_step(BK, compiled, batches, precision), BK: training_step(BK, bk, batches, precision),
             HF: training_step(HF, hf, batches, precision)}
    t0 = time.perf_counter()
    with torch._inductor.config.patch(force_disable_caches=True):  # a cold compile, whatever earlier runs cached
        for i in range(N_BATCHES):
            steps[COMPILED](i)
    first_pass = time.perf_counter() - t0
    quick = opts.quick or preset == "base"  # base: three sides of ~30 s steps a round
    rounds = QUICK if quick else Plan(warmup=1, min_rounds=5, max_rounds=20, budget_s=45)
    times = alternate(steps, rounds)
    compile_s = first_pass - N_BATCHES * statistics.median(times.seconds[COMPILED])
    graph_breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    return Comparison({"preset": preset, "precision": precision}, [b.tokens for b in batches],
                      [pretraining_flops(cfg, b.lengths, b.n_masked) for b in batches], peak, times,
                      extra={"compile_s": compile_s, "graph_breaks": graph_breaks})


def run(opts: Options, peaks: dict[str, float], log: Callable[[str], None]) -> Section:
    rows, records = [], []
    for preset in opts.presets or ("base",):
        for precision in opts.precisions:
            try:
                c = measure(preset, precision, opts, peaks[precision])
            except Exception as e:  # report why compile does not work here, and go on
                error = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
                rows.append([preset, precision, error, "", "", "", "", "", "", ""])
                records.append({"config": {"preset": preset, "precision": precision}, "error": error})
                log(f"compile {preset} {precision}: {error}")
                continue
            rows.append([preset, precision, f"{c.extra['compile_s']:.0f}", c.extra["graph_breaks"], rate(c.tok_s(COMPILED), c.tok_s_spread(COMPILED)),
                         rate(c.tok_s(BK)), rate(c.tok_s(HF)), f"**{c.ratio(HF, COMPILED):.2f}x**",
                         f"{c.ratio(BK, COMPILED):.2f}x", f"{100 * c.mfu(COMPILED):.1f}%"])
            records.append(c.summary() | {"ratio_vs_eager": c.ratio(BK, COMPILED), "ratio": c.ratio(HF, COMPILED)})
            log(f"compile {preset} {precision}: {c.tok_s(COMPILED):,.0f} tok/s, {c.ratio(HF, COMPILED):.2f}x transformers")
    body = (
        f"Same step and batches as benchmark 1; `torch.compile(model)` with default options, {N_BATCHES} distinct "
        "batches (different numbers of real tokens: one recompile with dynamic shapes); compile s is a cold "
        "compile (inductor's caches off).\n\n"
        + table(["preset", "precision", "compile s", "graph breaks", "bertkit compiled tok/s", "bertkit eager tok/s",
                 "transformers tok/s", "compiled vs transformers", "compiled vs eager", "MFU compiled"], rows)
    )
    return Section("compile", "1b. torch.compile (bertkit side)", body, records)
