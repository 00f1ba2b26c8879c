"""Count-based floors for masked-LM accuracy: what a pre-trained BERT must beat to show it reads context.

    python -m bench.mlm_baselines --data runs/demo-en-45/data [--model runs/demo-en-45/pretrain/model] [--instances N]

On the held-out instances of a prepared data folder, with the masks that `bertkit pretrain` scores
them with (epoch 0, its seed), the accuracy of predicting each masked token by counts taken from the
training instances (their original tokens):

- unigram: always the most frequent token;
- left bigram: the commonest successor of the token on the left;
- bigram both sides: argmax_w c(l, w) / c(l) * c(w, r) / c(w) over the words seen between l and r
  (a bigram chain through the gap; the left bigram where l or r is masked or nothing fits).

With --model, the model's accuracy on the same masks in order and with each segment's words shuffled
(`evaluate_pretraining`): a model at or below "bigram both sides" has not learnt to use its neighbours.
Results go to bench/results/mlm_baselines.json (one entry per data folder).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import torch

from bertkit.heads import BertForPreTraining
from bertkit.pretrain import evaluate_pretraining
from bertkit.pretraining import PretrainingData

from .common import RESULTS_DIR


def original_ids(example: dict[str, np.ndarray]) -> np.ndarray:
    """The instance's tokens before masking."""
    ids, labels = example["input_ids"].copy(), example["mlm_labels"]
    ids[labels != -100] = labels[labels != -100]
    return ids


def bigram_counts(data: PretrainingData, seed: int) -> tuple[Counter, dict[int, Counter]]:
    unigram: Counter = Counter()
    successors: dict[int, Counter] = defaultdict(Counter)
    for i in range(len(data)):
        ids = original_ids(data.example(i, 0, seed)).tolist()
        unigram.update(ids)
        for left, right in itertools.pairwise(ids):
            successors[left][right] += 1
    return unigram, successors


def baselines(train: PretrainingData, held_out: PretrainingData, instances: int, seed: int) -> dict[str, float]:
    unigram, successors = bigram_counts(train, seed)
    special = {train.cls_id, train.sep_id, train.pad_id, train.mask_id}
    commonest = max((t for t in unigram if t not in special), key=unigram.__getitem__)
    best_next = {left: c.most_common(1)[0][0] for left, c in successors.items()}
    hits = Counter()
    for i in range(min(instances, len(held_out))):
        example = held_out.example(i, 0, seed)  # the masks evaluate_pretraining scores
        ids, labels = example["input_ids"], example["mlm_labels"]
        for p in np.nonzero(labels != -100)[0].tolist():
            target, left = int(labels[p]), int(ids[p - 1])
            right = int(ids[p + 1]) if p + 1 < len(ids) else None
            by_left = best_next.get(left, commonest) if left != train.mask_id else commonest
            both = by_left
            if right is not None and right != train.mask_id and left != train.mask_id:
                scores = {w: c / unigram[w] * successors[w][right] for w, c in successors.get(left, {}).items()
                          if successors[w][right]}
                if scores:
                    both = max(scores, key=scores.__getitem__)
            hits["tokens"] += 1
            hits["unigram"] += target == commonest
            hits["left bigram"] += target == by_left
            hits["bigram both sides"] += target == both
    n = hits.pop("tokens", 0)
    if n == 0:
        raise SystemExit(f"{held_out.data_dir}: no masked tokens in the held-out instances (prepare with --eval-fraction > 0)")
    return {"masked_tokens": n, **{k: 100 * v / n for k, v in hits.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a folder written by `bertkit prepare`")
    parser.add_argument("--model", type=Path, help="a pre-trained model folder to score on the same masks")
    parser.add_argument("--instances", type=int, default=256, help="the first N held-out instances (pretrain scores 8 x 32 by default)")
    parser.add_argument("--seed", type=int, default=0, help="the pre-training run's seed (its masks)")
    args = parser.parse_args()

    t0 = time.perf_counter()
    train, held_out = PretrainingData(args.data, "train"), PretrainingData(args.data, "eval")
    n = min(args.instances, len(held_out))
    result: dict[str, object] = {"instances": n, "seed": args.seed,
                                 **baselines(train, held_out, args.instances, args.seed)}
    if args.model is not None:
        model = BertForPreTraining.from_pretrained(args.model).eval()
        with torch.no_grad():
            scores = evaluate_pretraining(model, held_out, 1, n, args.seed, torch.device("cpu"))  # one batch of all n
        result.update({"model": str(args.model), "model in order": 100 * scores["mlm_acc"],
                       "model words shuffled": 100 * scores["mlm_shuffled_acc"]})
    result["seconds"] = round(time.perf_counter() - t0, 1)

    for key, value in result.items():
        print(f"{key:>22}: {value:.2f}" if isinstance(value, float) else f"{key:>22}: {value}")
    path = RESULTS_DIR / "mlm_baselines.json"
    saved = json.loads(path.read_text()) if path.is_file() else {}
    saved[str(args.data)] = result
    path.write_text(json.dumps(saved, indent=2) + "\n")


if __name__ == "__main__":
    main()
