"""Benchmark 4: the tokenizer. bertkit's Tokenizer.__call__ against transformers' BertTokenizer (Rust,
"fast") and, for reference, BertTokenizerLegacy (pure Python), on the same texts and vocabulary:
padding and truncation to 128, return_tensors="pt". Outputs are checked identical first.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch
import transformers

from bertkit import Tokenizer

from .common import BK, HF, QUICK, Plan, alternate, spread
from .data import MINILM, have_data, squad_contexts, sst2
from .report import Options, Section, rate, table

LEGACY = "BertTokenizerLegacy"


def run(opts: Options, peaks: dict[str, float], log: Callable[[str], None]) -> Section:
    if not have_data(MINILM, MINILM.parent.parent / "sst2", MINILM.parent.parent / "squad_v1.1"):
        return Section("tokenizer", "4. Tokenizer", "Skipped: needs ../shared/data (SST-2, SQuAD, all-MiniLM-L6-v2).")
    tokenizers = {BK: Tokenizer.from_pretrained(MINILM), HF: transformers.BertTokenizer.from_pretrained(MINILM),
                  LEGACY: transformers.BertTokenizerLegacy.from_pretrained(MINILM)}
    corpora = {"SST-2 train sentences": sst2("train")[0][: 1024 if opts.quick else 8192],
               "SQuAD v1.1 contexts": squad_contexts()[: 256 if opts.quick else None]}
    rows, records = [], []
    for name, texts in corpora.items():
        def call(side: str, texts: list[str] = texts) -> Callable[[int], dict[str, torch.Tensor]]:
            return lambda i: tokenizers[side](texts, max_length=128, truncation=True, padding="max_length",
                                              return_tensors="pt")

        outputs = {side: call(side)(0) for side in tokenizers}
        same = {side: all(torch.equal(outputs[BK][k], outputs[side][k]) for k in outputs[side]) for side in (HF, LEGACY)}
        tokens = int(outputs[BK]["attention_mask"].sum())
        fast = QUICK if opts.quick else Plan(warmup=1, min_rounds=10, max_rounds=100, budget_s=20)
        times = alternate({BK: call(BK), HF: call(HF)}, fast).seconds
        slow = Plan(warmup=0, min_rounds=3, max_rounds=3, budget_s=0, max_discarded=0 if opts.quick else 6)
        times |= alternate({LEGACY: call(LEGACY)}, slow).seconds
        per_s = {side: [len(texts) / t for t in ts] for side, ts in times.items()}
        ratio = statistics.median(h / b for h, b in zip(times[HF], times[BK], strict=True))
        legacy = statistics.median(times[LEGACY]) / statistics.median(times[BK])
        rows.append([name, f"{len(texts):,}", f"{tokens / len(texts):.0f}",
                     *(rate(statistics.median(per_s[s]), spread(per_s[s])) for s in (BK, HF, LEGACY)),
                     f"**{ratio:.2f}x**", f"{legacy:.1f}x", f"{same[HF]} / {same[LEGACY]}"])
        records.append({"config": {"corpus": name}, "ratio": ratio, "ratio_legacy": legacy, "identical": same,
                        **{s: {"texts_s": statistics.median(v)} for s, v in per_s.items()}})
        log(f"tokenizer {name}: {statistics.median(per_s[BK]):,.0f} vs {statistics.median(per_s[HF]):,.0f} texts/s, {ratio:.2f}x")
    body = (
        "One call on the whole list of texts per round (Rust parallelism as each library configures it).\n\n"
        + table(["corpus", "texts", "real tokens/text", "bertkit texts/s", "transformers (fast) texts/s",
                 "legacy texts/s", "ratio vs fast", "ratio vs legacy", "identical ids (fast / legacy)"], rows)
    )
    return Section("tokenizer", "4. Tokenizer (`__call__`, padding + truncation to 128, tensors)", body, records)
