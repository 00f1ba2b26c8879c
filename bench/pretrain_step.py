"""Benchmark 1: one pre-training step (forward, backward, fused AdamW step) at each preset.

bertkit's BertForPreTraining gets mlm_labels / nsp_labels (MLM logits at the masked positions only);
transformers' gets the same labels as `labels` (dense, -100 elsewhere) / `next_sentence_label`. Both
keep dropout 0.1 and use torch's fused AdamW with the same groups, lr, betas, eps and weight decay.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bertkit import BertConfig
from bertkit.optim import build_optimizer

from .common import BK, HF, QUICK, Comparison, Plan, alternate, autocast, pretraining_flops, run_child
from .data import Batch, pretraining_batches
from .models import twins
from .report import Options, Section, comparison_rows

PRESETS = ("tiny", "mini", "small", "base")
N_BATCHES = 4  # distinct batches, cycled; both sides see the same one in each round


def loss_of(side: str, model: torch.nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
    if side == BK:
        return model(b["input_ids"], b["attention_mask"], b["token_type_ids"], b["mlm_labels"], b["nsp_labels"]).loss
    return model(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"], attention_mask=b["attention_mask"],
                 labels=b["mlm_labels"], next_sentence_label=b["nsp_labels"]).loss


def training_step(side: str, model: torch.nn.Module, batches: list[Batch], precision: str,
                  loss: Callable = loss_of, lr: float = 1e-4) -> Callable[[int], None]:
    """Gives step(i): one optimizer step on batches[i % len(batches)]."""
    optimizer = build_optimizer(model, "adamw", lr=lr, eps=1e-6, weight_decay=0.01)  # fused AdamW on the CPU

    def step(i: int) -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast(precision):
            value = loss(side, model, batches[i % len(batches)].inputs)
        value.backward()
        optimizer.step()

    return step


def plan(opts: Options, preset: str) -> Plan:
    if opts.quick:
        return QUICK
    return Plan(warmup=2, min_rounds=5, max_rounds=30, budget_s=0 if preset == "base" else 45)


def measure(preset: str, precision: str, opts: Options, peak: float) -> Comparison:
    cfg = BertConfig.preset(preset)
    batches = pretraining_batches(N_BATCHES, opts.batch_size, opts.seq_len, cfg.vocab_size)
    bk, hf = twins("pretraining", cfg)
    steps = {BK: training_step(BK, bk, batches, precision), HF: training_step(HF, hf, batches, precision)}
    times = alternate(steps, plan(opts, preset))
    return Comparison(
        config={"preset": preset, "precision": precision, "batch": f"{opts.batch_size} x {opts.seq_len}"},
        tokens=[b.tokens for b in batches],
        flops=[pretraining_flops(cfg, b.lengths, b.n_masked) for b in batches],
        peak=peak, timings=times,
        extra={"masked_per_batch": sum(b.n_masked for b in batches) / len(batches)},
    )


def peak_memory(task: str, side: str, preset: str, precision: str, opts: Options) -> dict[str, float]:
    """Runs a few training steps of one side in a child process (bench/memory.py) and gives its peak."""
    return run_child("bench.memory", [task, "--side", side, "--preset", preset, "--precision", precision,
                                      "--batch-size", str(opts.batch_size), "--seq-len", str(opts.seq_len)])


def run(opts: Options, peaks: dict[str, float], log: Callable[[str], None]) -> Section:
    comparisons = []
    for preset in opts.presets or PRESETS:
        for precision in opts.precisions:
            c = measure(preset, precision, opts, peaks[precision])
            if opts.memory:
                c.memory = {side: peak_memory("pretrain", side, preset, precision, opts) for side in (BK, HF)}
            log(f"pretrain {preset} {precision}: {c.tok_s(BK):,.0f} vs {c.tok_s(HF):,.0f} tok/s, {c.ratio():.2f}x")
            comparisons.append(c)
    masked = comparisons[0].extra["masked_per_batch"] if comparisons else 0
    body = (
        f"Batches of {opts.batch_size} x {opts.seq_len}, 10% of rows short (length uniform in [2, {opts.seq_len}]), "
        f"15% of real tokens predicted ({masked:.0f} a batch); {N_BATCHES} distinct batches, cycled. "
        "tok/s counts real (non-pad) tokens; peak MiB is the resident memory a training step adds "
        "above the built model (child process, see Method).\n\n"
        + comparison_rows(comparisons, ["preset", "precision"], memory=opts.memory)
    )
    return Section("pretrain", "1. Pre-training step (forward + backward + fused AdamW)", body,
                   [c.summary() for c in comparisons])
