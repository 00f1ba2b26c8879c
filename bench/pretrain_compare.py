"""Pre-training curves, bertkit beside transformers: same initial weights, batches, optimizer and schedule.

    python -m bench.pretrain_compare --data runs/demo-en-45/data [--steps 1000] [--lr 2e-3] [--batch-size 32] [--init bert|local]

Both models start from one randomly initialized tiny BERT (saved by bertkit, loaded by transformers'
`BertForPreTraining`), are fed the same `PretrainBatches` (dynamic masks, seed 0) and trained by the
same fp32 loop: AdamW (bertkit's parameter groups, eps 1e-6), linear warmup (5%) and decay,
gradient clipping at 1.0. transformers computes its own loss from `labels` and `next_sentence_label`.
Every quarter of the run both are scored by `evaluate_pretraining` on the held-out instances (MLM
accuracy in order and with each segment's words shuffled). Equal curves say a plateau is the recipe's,
not bertkit's. `--init local` starts both from bertkit's `model.init=local` (every head on a neighbour, the
MLM bias at the data's unigram log-frequencies) instead of BERT's initialization. Results go to bench/results/pretrain_compare[-local].json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from bertkit.config import BertConfig
from bertkit.distributed import Context
from bertkit.heads import BertForPreTraining
from bertkit.initialization import INITS, initialize
from bertkit.optim import build_optimizer, linear_schedule
from bertkit.pretrain import PretrainBatches, PretrainingObjective, evaluate_pretraining
from bertkit.pretraining import PretrainingData

from .common import RESULTS_DIR


def curve(side: str, init: Path, data: Path, steps: int, lr: float, batch_size: int) -> list[dict[str, float]]:
    import transformers

    train_data, held_out = PretrainingData(data), PretrainingData(data, "eval")
    if side == "bertkit":
        model: torch.nn.Module = BertForPreTraining.from_pretrained(init)
    else:
        model = transformers.BertForPreTraining.from_pretrained(init, attn_implementation="sdpa")
    optimizer = build_optimizer(model, lr=lr)
    scheduler = linear_schedule(optimizer, int(0.05 * steps), steps)
    batches = PretrainBatches([(0, train_data, batch_size)], 1, Context(0, 1, 0, torch.device("cpu")), 0)
    objective = PretrainingObjective()
    points, t0 = [], time.perf_counter()
    for step in range(steps):
        batch = batches[step][0]
        if side == "bertkit":
            sums = objective(model, batch)
            loss = sums["mlm_loss"] / len(batch["mlm_positions"]) + sums["nsp_loss"] / len(batch["nsp_labels"])
        else:
            mask = batch.get("attention_mask", torch.ones_like(batch["input_ids"]))
            loss = model(input_ids=batch["input_ids"], attention_mask=mask, token_type_ids=batch["token_type_ids"],
                         labels=batch["mlm_labels"], next_sentence_label=batch["nsp_labels"]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if (step + 1) % max(1, steps // 4) == 0:
            points.append({"step": step + 1, "loss": loss.item(), **score(side, model, held_out)})
            print(side, json.dumps(points[-1]), f"{time.perf_counter() - t0:.0f} s", flush=True)
    return points


def score(side: str, model: torch.nn.Module, held_out: PretrainingData) -> dict[str, float]:
    """MLM accuracy (percent) in order and words shuffled, by bertkit's evaluation on the model's weights."""
    if side == "bertkit":
        scored = model
    else:
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp)
            scored = BertForPreTraining.from_pretrained(tmp)
    scored.eval()
    with torch.no_grad():
        r = evaluate_pretraining(scored, held_out, 8, 32, 0, torch.device("cpu"))
    model.train()
    return {"mlm_acc": 100 * r["mlm_acc"], "mlm_shuffled_acc": 100 * r["mlm_shuffled_acc"], "nsp_acc": 100 * r["nsp_acc"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a folder written by `bertkit prepare`")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--init", choices=INITS, default="bert")
    args = parser.parse_args()
    torch.set_num_threads(2)

    vocab_size = PretrainingData(args.data).vocab_size
    torch.manual_seed(0)
    config = BertConfig.preset(args.preset, vocab_size=vocab_size, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    result: dict[str, object] = {"data": str(args.data), "steps": args.steps, "lr": args.lr, "batch_size": args.batch_size,
                                 "preset": args.preset, "init": args.init, "date": time.strftime("%Y-%m-%d")}
    with tempfile.TemporaryDirectory() as init:
        model = BertForPreTraining(config)
        initialize(model, args.init, PretrainingData(args.data).token_counts)
        model.save_pretrained(init)
        for side in ("bertkit", "transformers"):
            result[side] = curve(side, Path(init), args.data, args.steps, args.lr, args.batch_size)
    path = RESULTS_DIR / ("pretrain_compare.json" if args.init == "bert" else f"pretrain_compare-{args.init}.json")
    path.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
