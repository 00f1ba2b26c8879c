"""Benchmark 3: one fine-tuning step of sentence classification on SST-2-like batches.

Batches of 32 SST-2 train sentences drawn at random (not grouped by length), each padded to its own
longest row on both sides (dynamic padding), truncated at 128. BertForSequenceClassification at base
(fresh weights) and at all-MiniLM-L6-v2's size (its real weights), fused AdamW at lr 2e-5.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bertkit import BertConfig, Tokenizer

from .common import BK, HF, QUICK, Comparison, Plan, alternate, classifier_flops
from .data import MINILM, Batch, have_data, sst2, text_batches
from .models import twins
from .pretrain_step import peak_memory, training_step
from .report import Options, Section, comparison_rows

MODELS = ("MiniLM-L6", "base")
N_BATCHES = 8
LABELS = {0: "negative", 1: "positive"}


def classification_loss(side: str, model: torch.nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
    return model(**b).loss  # both take input_ids, token_type_ids, attention_mask, labels by name


def build(model: str, seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module, BertConfig]:
    """Gives the twin classifiers: bertkit's and transformers', same weights."""
    if model == "MiniLM-L6":
        bk, hf = twins("classification", BertConfig(id2label=LABELS), from_dir=MINILM, seed=seed)
    else:
        bk, hf = twins("classification", BertConfig.preset(model, id2label=LABELS), seed=seed)
    return bk, hf, bk.config


def batches(batch_size: int, n: int = N_BATCHES) -> list[Batch]:
    texts, labels = sst2("train")
    return text_batches(Tokenizer.from_pretrained(MINILM), texts, batch_size, n, seed=1, labels=labels)


def plan(opts: Options) -> Plan:
    if opts.quick:
        return QUICK
    return Plan(warmup=2, min_rounds=8, max_rounds=40, budget_s=60)


def run(opts: Options, peaks: dict[str, float], log: Callable[[str], None]) -> Section:
    if not have_data(MINILM, MINILM.parent.parent / "sst2"):
        return Section("finetune", "3. Fine-tuning step", "Skipped: needs ../shared/data (SST-2 and all-MiniLM-L6-v2).")
    data = batches(opts.batch_size)
    comparisons = []
    for model in opts.presets or MODELS:
        for precision in opts.precisions:
            bk, hf, cfg = build(model)
            steps = {side: training_step(side, m, data, precision, classification_loss, lr=2e-5)
                     for side, m in ((BK, bk), (HF, hf))}
            c = Comparison({"model": model, "precision": precision}, [b.tokens for b in data],
                           [classifier_flops(cfg, b.lengths, train=True) for b in data], peaks[precision],
                           alternate(steps, plan(opts)))
            if opts.memory:
                c.memory = {side: peak_memory("finetune", side, model, precision, opts) for side in (BK, HF)}
            log(f"finetune {model} {precision}: {c.tok_s(BK):,.0f} vs {c.tok_s(HF):,.0f} tok/s, {c.ratio():.2f}x")
            comparisons.append(c)
    padded = sum(b.inputs["input_ids"].numel() for b in data)
    real = sum(b.tokens for b in data)
    body = (
        f"Batches of {opts.batch_size} random SST-2 train sentences (MiniLM's uncased vocabulary), padded to "
        f"each batch's longest: {real / len(data):.0f} real tokens a batch, {100 * (1 - real / padded):.0f}% of "
        f"the padded batch is [PAD]; {len(data)} distinct batches, cycled.\n\n"
        + comparison_rows(comparisons, ["model", "precision"], ms=True, memory=opts.memory)
    )
    return Section("finetune", "3. Fine-tuning step (sequence classification)", body, [c.summary() for c in comparisons])
