"""Benchmark 2: BertModel forward under torch.inference_mode (last_hidden_state and pooler output).

Three workloads: full-length batches (32 x 128, no padding); batches of 32 SST-2 dev sentences in a
random order, each padded to its longest row (SST-2's real lengths, MiniLM's vocabulary); and the
latency of one sentence of median length, batch 1.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bertkit import BertConfig, Tokenizer

from .common import BK, HF, Comparison, Plan, alternate, autocast, inference_flops
from .data import MINILM, Batch, full_batch, have_data, median_text, sst2, text_batches
from .models import twins
from .report import Options, Section, comparison_rows


def forward(model: torch.nn.Module, batches: list[Batch], precision: str) -> Callable[[int], None]:
    def call(i: int) -> None:
        with torch.inference_mode(), autocast(precision):
            model(**batches[i % len(batches)].inputs)

    return call


def workloads(opts: Options) -> dict[str, list[Batch]]:
    """Gives the batches of each workload (the SST-2 ones only where the shared data is present)."""
    out = {f"{opts.batch_size} x {opts.seq_len} full": [full_batch(opts.batch_size, opts.seq_len, 30522)]}
    if have_data(MINILM, MINILM.parent.parent / "sst2"):
        tok = Tokenizer.from_pretrained(MINILM)
        texts, _ = sst2("dev")
        n = 4 if opts.quick else len(texts) // opts.batch_size
        out[f"SST-2 dev, {opts.batch_size}"] = text_batches(tok, texts, opts.batch_size, n)
        out["SST-2 median, batch 1"] = [median_text(tok, texts)]
    return out


def plan(opts: Options, n_batches: int) -> Plan:
    if opts.quick:
        return Plan(warmup=1, min_rounds=3, max_rounds=max(3, n_batches), budget_s=0)
    return Plan(warmup=3, min_rounds=max(10, n_batches), max_rounds=max(200, n_batches), budget_s=45)


def run(opts: Options, peaks: dict[str, float], log: Callable[[str], None]) -> Section:
    comparisons = []
    work = workloads(opts)
    for preset in opts.presets or ("base",):
        cfg = BertConfig.preset(preset)
        bk, hf = twins("model", cfg)
        bk.eval(), hf.eval()
        for precision in opts.precisions:
            for name, batches in work.items():
                calls = {BK: forward(bk, batches, precision), HF: forward(hf, batches, precision)}
                c = Comparison({"preset": preset, "workload": name, "precision": precision},
                               [b.tokens for b in batches], [inference_flops(cfg, b.lengths) for b in batches],
                               peaks[precision], alternate(calls, plan(opts, len(batches))))
                log(f"inference {preset} {name} {precision}: {c.tok_s(BK):,.0f} vs {c.tok_s(HF):,.0f} tok/s, "
                    f"{c.ratio():.2f}x")
                comparisons.append(c)
    notes = [f"- {name}: {len(b)} batch(es), {sum(x.tokens for x in b) / len(b):.0f} real tokens a batch, "
             f"{100 * (1 - sum(x.tokens for x in b) / sum(x.inputs['input_ids'].numel() for x in b)):.0f}% [PAD]"
             for name, b in work.items()]
    body = (
        "Useful FLOPs of inference: 2 x layer parameters x real tokens + 4 x layers x hidden x sum(length^2) "
        "+ the pooler.\n\n" + "\n".join(notes) + "\n\n"
        + comparison_rows(comparisons, ["preset", "workload", "precision"], ms=True)
    )
    return Section("inference", "2. Inference (BertModel forward, torch.inference_mode)", body,
                   [c.summary() for c in comparisons])
