"""Where a pre-training step spends its time, side by side: torch.profiler's self CPU time by op
(top ops) and grouped into kinds of work (matmuls, attention, element-wise, optimizer, ...)."""

from __future__ import annotations

import re
from collections.abc import Callable

from torch.profiler import ProfilerActivity, profile

from bertkit import BertConfig

from .common import BK, HF
from .data import pretraining_batches
from .models import twins
from .pretrain_step import training_step
from .report import Options, Section, table

TOP = 15
KINDS = [  # first match wins; aten op names
    ("matmul (mm, addmm, bmm, linear)", r"^aten::(mm|addmm|bmm|matmul|linear|_mkl|mkldnn_.*(mm|linear))"),
    ("attention (SDPA kernels)", r"flash_attention|scaled_dot_product|_efficient_attention"),
    ("softmax / cross-entropy", r"softmax|log_softmax|nll_loss|cross_entropy"),
    ("layer norm", r"layer_norm"),
    ("GELU", r"gelu"),
    ("dropout (bernoulli, mask multiply)", r"dropout|bernoulli"),
    ("gather / scatter / pad (index, nonzero, masked)", r"index|nonzero|masked|gather|scatter|where"),
    ("embedding backward", r"embedding"),
    ("optimizer (fused AdamW)", r"adam|foreach|zero_"),
    ("copy / cast / layout (copy_, to, clone, contiguous, cat)", r"copy_|^aten::to$|_to_copy|clone|contiguous|cat"),
    ("element-wise add / mul / sum", r"^aten::(add|mul|sum|div|sub|tanh|fill_|ones|zeros|empty)"),
]


def kind_of(op: str) -> str:
    return next((kind for kind, pattern in KINDS if re.search(pattern, op)), "other")


def profile_step(side: str, model, batches, precision: str) -> dict[str, tuple[float, int]]:
    """Gives op name -> (self CPU seconds, calls) of one training step, after a warm-up step."""
    step = training_step(side, model, batches, precision)
    step(0)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step(1)
    return {e.key: (e.self_cpu_time_total / 1e6, e.count) for e in prof.key_averages()}


def run(opts: Options, peaks: dict[str, float], log: Callable[[str], None]) -> Section:
    parts, records = [], []
    for preset in opts.presets or ("base",):
        cfg = BertConfig.preset(preset)
        batches = pretraining_batches(2, opts.batch_size, opts.seq_len, cfg.vocab_size)
        for precision in opts.precisions:
            bk, hf = twins("pretraining", cfg)
            ops = {side: profile_step(side, m, batches, precision) for side, m in ((BK, bk), (HF, hf))}
            totals = {side: sum(s for s, _ in o.values()) for side, o in ops.items()}
            kinds: dict[str, dict[str, float]] = {}
            for side, o in ops.items():
                for name, (s, _) in o.items():
                    kinds.setdefault(kind_of(name), {BK: 0.0, HF: 0.0})[side] += s
            rows = [[k, f"{v[BK]:.2f}", f"{100 * v[BK] / totals[BK]:.0f}%", f"{v[HF]:.2f}", f"{100 * v[HF] / totals[HF]:.0f}%"]
                    for k, v in sorted(kinds.items(), key=lambda kv: -kv[1][BK])]
            rows.append(["**total self CPU**", f"{totals[BK]:.2f}", "", f"{totals[HF]:.2f}", ""])
            parts.append(f"**{preset} {precision}, by kind of work (self CPU seconds of one step)**\n\n"
                         + table(["kind", "bertkit s", "bertkit %", "transformers s", "transformers %"], rows))
            for side in (BK, HF):
                top = sorted(ops[side].items(), key=lambda kv: -kv[1][0])[:TOP]
                parts.append(f"**{preset} {precision}, {side}: top {TOP} ops by self CPU time**\n\n" + table(
                    ["op", "self CPU s", "%", "calls"],
                    [[f"`{name}`", f"{s:.3f}", f"{100 * s / totals[side]:.1f}%", n] for name, (s, n) in top]))
            records.append({"config": {"preset": preset, "precision": precision}, "kinds": kinds, "totals": totals,
                            "ops": {side: dict(sorted(o.items(), key=lambda kv: -kv[1][0])[:40]) for side, o in ops.items()}})
            log(f"profile {preset} {precision}: {totals[BK]:.1f} s vs {totals[HF]:.1f} s self CPU")
    body = ("One profiled step per side (after one warm-up step), the same batch of benchmark 1; the profiler "
            "adds overhead of its own, so these are shares, not speeds.\n\n" + "\n\n".join(parts))
    return Section("profile", "Profile of the pre-training step (torch.profiler, self CPU time)", body, records)
