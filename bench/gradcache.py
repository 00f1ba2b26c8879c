"""GradCache's memory: one training step of in-batch negatives (MNRL, symmetric) on all-MiniLM-L6-v2 over real
sentence pairs, each configuration in a fresh process, its peak resident memory above the weights measured.

    python -m bench.gradcache                      # batch 32 whole, 512 through chunks of 32 and 16, 128 whole
    python -m bench.gradcache --child --batch-size 512 --cache 32     # one step, one JSON line

Target (the embedders' issue): batch 512 through GradCache costs no more than 1.2x the memory of batch 32
without it. Peak memory on the CPU is the process's (torch keeps no allocator statistics there): VmHWM,
reset just before the step (bench.common.peak_rss).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .common import ROOT, machine, peak_rss, run_child, set_threads

MODEL = ROOT.parent / "shared" / "data" / "models" / "all-MiniLM-L6-v2"
PAIRS = ROOT / "src" / "bertkit" / "data" / "en" / "pair" / "train.tsv"


def pairs(n: int) -> tuple[list[str], list[str]]:
    rows = [line.split("\t") for line in PAIRS.read_text(encoding="utf-8").splitlines()[1:]]
    rows = [r for r in rows if len(r) >= 2][:n]
    if len(rows) < n:
        raise SystemExit(f"{PAIRS}: {len(rows)} pairs, fewer than {n}")
    return [r[0] for r in rows], [r[1] for r in rows]


def child(batch_size: int, cache: int, max_length: int, threads: int) -> dict:
    import torch

    from bertkit import Tokenizer
    from bertkit.model import BertModel
    from bertkit.tasks.embedding_losses import cached_backward, mnrl_loss

    set_threads(threads)
    torch.manual_seed(0)  # dropout
    tok, model = Tokenizer.from_pretrained(MODEL), BertModel.from_pretrained(MODEL).train()
    def batch(texts: list[str]) -> dict:
        return tok(texts, max_length=max_length, truncation=True, padding=True, return_tensors="pt")

    texts = pairs(batch_size)

    def encode(batch: dict) -> torch.Tensor:
        mask = batch["attention_mask"]
        hidden = model(**batch).last_hidden_state  # (n, T, H)
        return (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)  # (n, H)

    def loss_of(vectors: list[torch.Tensor]) -> torch.Tensor:
        return mnrl_loss(vectors[0], vectors[1:], symmetric=True)

    with peak_rss() as memory:
        if cache:  # each piece padded to its own longest text, as training collates its batches
            pieces = [[batch(col[i : i + cache]) for i in range(0, batch_size, cache)] for col in texts]
            loss = cached_backward(encode, pieces, loss_of)
        else:
            loss = loss_of([encode(batch(col)) for col in texts])
            loss.backward()
    tokens = sum(int(batch(col)["attention_mask"].sum()) for col in texts)
    return {"batch_size": batch_size, "cache": cache, "loss": float(loss.detach()), "tokens": tokens, **memory}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.gradcache")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--cache", type=int, default=0, help="GradCache chunk size (0: the whole batch at once)")
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gradcache.json")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.batch_size, args.cache, args.max_length, args.threads)))
        return
    runs = []
    for batch, cache in ((32, 0), (512, 32), (512, 16), (128, 0)):
        flags = ["--child", "--batch-size", str(batch), "--cache", str(cache), "--max-length", str(args.max_length)]
        runs.append(run_child("bench.gradcache", flags))
        print(json.dumps(runs[-1]), flush=True)
    base = runs[0]["step_mib"]
    result = {"command": "python -m bench.gradcache", "machine": machine(), "max_length": args.max_length,
              "runs": runs, "ratio_512_cached_to_32": runs[1]["step_mib"] / base}
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print("| batch | GradCache chunk | step memory above the weights (MiB) | x batch 32 |")
    print("|---:|---:|---:|---:|")
    for r in runs:
        print(f"| {r['batch_size']} | {r['cache'] or '-'} | {r['step_mib']:.0f} | {r['step_mib'] / base:.2f} |")


if __name__ == "__main__":
    main()
