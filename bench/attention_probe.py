"""How much each attention head looks at its neighbours while a tiny BERT pre-trains, by initialization.

    python -m bench.attention_probe --data runs/demo-en-local/data [--init bert|local|local-no-bias] [--lr 1e-3]
                                    [--steps 400] [--at 0 25 50 100 200 400]

Trains the tiny preset (dropout off, batch 32, fp32, AdamW with 5% warmup and linear decay, as
bench/pretrain_compare) from the chosen initialization and prints, at the given steps, every head's mean
attention weight on the token to its left and to its right (uniform attention over 128 tokens is 0.008),
then the held-out MLM accuracy in order and with each segment's words shuffled. `local-no-bias` is
`model.init=local` without its unigram MLM bias: the heads start on their neighbours, the output bias at zero.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from bertkit.config import BertConfig
from bertkit.distributed import Context
from bertkit.heads import BertForPreTraining
from bertkit.initialization import local_attention_init, unigram_bias_init
from bertkit.optim import build_optimizer, linear_schedule
from bertkit.pretrain import PretrainBatches, PretrainingObjective

from .pretrain_compare import score


@torch.no_grad()
def neighbour_attention(model: BertForPreTraining, batch: dict[str, torch.Tensor]) -> list[list[tuple[float, float]]]:
    """Per layer, per head: mean attention weight on offset -1 and on offset +1, over the interior tokens."""
    ids, types = batch["input_ids"], batch["token_type_ids"]
    T = ids.shape[1]
    x = model.bert.embeddings(ids, types, torch.arange(T).expand_as(ids))
    inner = torch.arange(1, T - 1)
    out = []
    for layer in model.bert.layers:
        att = layer.attention
        q, k, _ = att.qkv(x).view(*ids.shape, 3, att.num_heads, att.head_dim).permute(2, 0, 3, 1, 4)
        probs = torch.softmax(q @ k.transpose(-1, -2) / att.head_dim**0.5, -1)  # (B, heads, T, T)
        out.append([(round(probs[:, h, inner, inner - 1].mean().item(), 3), round(probs[:, h, inner, inner + 1].mean().item(), 3))
                    for h in range(att.num_heads)])
        x = layer(x, None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a folder written by `bertkit prepare`")
    parser.add_argument("--init", choices=["bert", "local", "local-no-bias"], default="local")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--at", type=int, nargs="+", default=[0, 25, 50, 100, 200, 400])
    args = parser.parse_args()
    torch.set_num_threads(2)
    from bertkit.pretraining import PretrainingData

    data, held_out = PretrainingData(args.data), PretrainingData(args.data, "eval")
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=data.vocab_size, hidden_dropout_prob=0.0,
                                                 attention_probs_dropout_prob=0.0))
    if args.init != "bert":
        local_attention_init(model.bert)
    if args.init == "local":
        unigram_bias_init(model, data.token_counts())
    optimizer = build_optimizer(model, lr=args.lr)
    scheduler = linear_schedule(optimizer, int(0.05 * args.steps), args.steps)
    batches = PretrainBatches([(0, data, 32)], 1, Context(0, 1, 0, torch.device("cpu")), 0)
    probe = {k: v[:8] for k, v in batches[10**6][0].items() if k in ("input_ids", "token_type_ids")}
    objective = PretrainingObjective()
    for step in range(args.steps + 1):
        if step in args.at:
            print(f"step {step}: (left, right) per head, per layer", neighbour_attention(model, probe), flush=True)
        if step == args.steps:
            break
        batch = batches[step][0]
        sums = objective(model, batch)
        loss = sums["mlm_loss"] / len(batch["mlm_positions"]) + sums["nsp_loss"] / len(batch["nsp_labels"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    print(json.dumps({"init": args.init, "lr": args.lr, "steps": args.steps, **score("bertkit", model, held_out)}))


if __name__ == "__main__":
    main()
