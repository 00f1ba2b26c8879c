"""The batches benchmarks run on: synthetic pre-training batches with Google's length and masking
statistics, and real text (SST-2 sentences, SQuAD contexts) from the shared data sets."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bertkit import Tokenizer

from .common import SHARED_DATA

MINILM = SHARED_DATA / "models" / "all-MiniLM-L6-v2"
PAD, CLS, SEP, MASK = 0, 101, 102, 103  # ids in the uncased BERT / MiniLM vocabulary
FIRST_WORD = 999  # ids below are specials and unused slots


@dataclass
class Batch:
    """Model inputs (all (B, T) tensors but nsp_labels / labels), with the real length of each row."""

    inputs: dict[str, torch.Tensor]
    lengths: list[int]
    n_masked: int = 0

    @property
    def tokens(self) -> int:
        return sum(self.lengths)


def pretraining_batch(rng: np.random.Generator, batch_size: int, seq_len: int, vocab_size: int,
                      short_seq_prob: float = 0.1, mask_prob: float = 0.15) -> Batch:
    """Gives a batch shaped like Google's create_pretraining_data output: [CLS] A [SEP] B [SEP], of
    full length except with probability short_seq_prob (then uniform in [2, seq_len]), with
    max(1, round(15% of the length)) non-special tokens predicted (80% [MASK], 10% random, 10% kept)."""
    ids = np.full((batch_size, seq_len), PAD, np.int64)
    types = np.zeros_like(ids)
    labels = np.full_like(ids, -100)
    lengths = []
    for row in range(batch_size):
        n = int(rng.integers(2, seq_len + 1)) if rng.random() < short_seq_prob else seq_len
        ids[row, :n] = rng.integers(FIRST_WORD, vocab_size, n)
        ids[row, 0] = CLS
        ids[row, n - 1] = SEP
        special = [0, n - 1]
        if n >= 5:  # room for a sentence pair
            split = int(rng.integers(2, n - 2))  # [CLS] A = ids[:split], [SEP] at split, B after it
            ids[row, split] = SEP
            types[row, split + 1 : n] = 1
            special.append(split)
        candidates = np.setdiff1d(np.arange(n), special)
        picked = rng.choice(candidates, min(len(candidates), max(1, round(mask_prob * n))), replace=False)
        labels[row, picked] = ids[row, picked]
        fate = rng.random(len(picked))
        ids[row, picked[fate < 0.8]] = MASK
        swap = picked[(fate >= 0.8) & (fate < 0.9)]
        ids[row, swap] = rng.integers(FIRST_WORD, vocab_size, len(swap))
        lengths.append(n)
    mask = (np.arange(seq_len)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    inputs = {
        "input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(types),
        "attention_mask": torch.from_numpy(mask), "mlm_labels": torch.from_numpy(labels),
        "nsp_labels": torch.from_numpy(rng.integers(0, 2, batch_size)),
    }
    return Batch(inputs, lengths, int((labels != -100).sum()))


def pretraining_batches(n: int, batch_size: int, seq_len: int, vocab_size: int, seed: int = 0) -> list[Batch]:
    rng = np.random.default_rng(seed)
    return [pretraining_batch(rng, batch_size, seq_len, vocab_size) for _ in range(n)]


def full_batch(batch_size: int, seq_len: int, vocab_size: int, seed: int = 0) -> Batch:
    """Gives a batch of random full-length single sentences, no padding."""
    ids = torch.randint(FIRST_WORD, vocab_size, (batch_size, seq_len), generator=torch.Generator().manual_seed(seed))
    ids[:, 0], ids[:, -1] = CLS, SEP
    inputs = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids)}
    return Batch(inputs, [seq_len] * batch_size)


# ---- real text ----------------------------------------------------------------------------------------

def have_data(*paths: Path) -> bool:
    return all(p.exists() for p in paths)


def sst2(split: str) -> tuple[list[str], list[int]]:
    """Gives SST-2's sentences and labels (0/1) of `split` (train or dev)."""
    with open(SHARED_DATA / "sst2" / f"{split}.tsv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r["sentence"] for r in rows], [int(r["label"]) for r in rows]


def squad_contexts() -> list[str]:
    """Gives the paragraphs of SQuAD v1.1 dev."""
    data = json.loads((SHARED_DATA / "squad_v1.1" / "dev-v1.1.json").read_text(encoding="utf-8"))["data"]
    return [p["context"] for article in data for p in article["paragraphs"]]


def text_batches(tok: Tokenizer, texts: list[str], batch_size: int, n: int, seed: int = 0,
                 labels: list[int] | None = None, max_length: int = 128) -> list[Batch]:
    """Gives n batches of randomly drawn texts, each padded to its own longest row (dynamic padding)."""
    order = np.random.default_rng(seed).permutation(len(texts))
    order = np.resize(order, n * batch_size)  # wraps around when n batches need more texts than there are
    out = []
    for b in range(n):
        rows = order[b * batch_size : (b + 1) * batch_size]
        inputs = tok([texts[i] for i in rows], max_length=max_length, truncation=True, padding=True, return_tensors="pt")
        if labels is not None:
            inputs["labels"] = torch.tensor([labels[i] for i in rows])
        out.append(Batch(inputs, inputs["attention_mask"].sum(1).tolist()))
    return out


def median_text(tok: Tokenizer, texts: list[str]) -> Batch:
    """Gives a batch of one: the text of median token length."""
    lengths = [len(ids) for ids in tok(texts, max_length=128, truncation=True)["input_ids"]]
    median = sorted(lengths)[len(lengths) // 2]
    inputs = tok([texts[lengths.index(median)]], return_tensors="pt")
    return Batch(inputs, [median])
