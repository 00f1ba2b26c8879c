"""TinyBERT's data augmentation, measured and left out of bertkit: new training inputs made by a masked LM's word
replacements, written as text lines for `bertkit distill --unlabeled`.

    python -m bench.augment --mlm runs/minilm-mlm/run/model --teacher runs/sst2/model --data train.tsv --n 4 \
        --out augmented.txt

Why it is not in bertkit: on SST-2 (bench/distill.py --augment-model, docs/distill.md) the 3-layer student
distilled with 4 augmented copies of each training sentence scored below the same student distilled without
them, and 24,000 real unlabeled sentences did better than both; the only English masked LM this machine can
make (MiniLM-L6 given an MLM head and 30 minutes of pre-training) guesses 20% of masked words.

For every word of an input that is a single word piece, a masked LM reads the input with that word masked and
proposes its K most likely pieces (whole words only: no "##" continuation, no special token, not the word
itself). Each of N augmented copies then replaces every word, with probability p, by one of its candidates
drawn at random (Jiao et al., "TinyBERT", 2020, section 3.1 and appendix; their K=15, p=0.4, N=20). Words of
several pieces are kept as they are: TinyBERT replaced them by GloVe neighbours, which bertkit does not ship.

Only an input's first text is augmented (a sentence, a pair's first sentence, a question, an NER sentence's
words: one word for one word, so a sentence keeps its length); a second text stays, as TinyBERT's script does.
The copies carry no labels: distillation lets the teacher label them softly.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from bertkit.errors import BertkitError
from bertkit.fillmask import FillMask
from bertkit.folders import read_task_file
from bertkit.hub import resolve_model
from bertkit.tasks import Dataset, Task, get_task

MAX_PIECES = 126  # an input's pieces the masked LM reads ([CLS] and [SEP] besides); later words are kept


class Augmenter:
    """Word replacement by the masked LM in `model` (a folder or Hugging Face name with an MLM head)."""

    def __init__(self, model: str | Path, *, top_k: int = 15, p: float = 0.4, batch_size: int = 64,
                 device: torch.device | str = "cpu", progress: bool = False) -> None:
        if top_k < 1 or not 0 < p <= 1:
            raise BertkitError(f"augmentation needs top_k >= 1 and 0 < p <= 1, got top_k={top_k}, p={p}")
        fill = FillMask(resolve_model(model), device=str(device))  # refuses a model without a masked-LM head
        self.mlm, self.tok = fill.model, fill.tokenizer
        self.top_k, self.p, self.batch_size, self.device, self.progress = top_k, p, batch_size, device, progress
        vocab = self.tok.vocab
        banned = [i for t, i in vocab.items() if t.startswith("##") or (t.startswith("[") and t.endswith("]"))]
        self.allowed = torch.ones(self.tok.vocab_size, dtype=torch.bool)
        self.allowed[banned] = False

    def candidates(self, sentences: Sequence[Sequence[str]]) -> list[list[list[str]]]:
        """For each sentence (its words), each word's replacements: the masked LM's top K, [] for a word of
        several pieces (or past the first MAX_PIECES)."""
        pieces = [[self.tok.tokenize(w) for w in words] for words in sentences]
        ids = [[self.tok.convert_tokens_to_ids(p) for p in words] for words in pieces]
        jobs = []  # (sentence, word, input ids with the word masked, the masked position)
        for s, words in enumerate(ids):
            flat = [i for word in words for i in word][:MAX_PIECES]
            start = 0
            for w, word in enumerate(words):
                if len(word) == 1 and start < len(flat):
                    masked = [self.tok.cls_token_id, *flat[:start], self.tok.mask_token_id, *flat[start + 1:],
                              self.tok.sep_token_id]
                    jobs.append((s, w, masked, start + 1))
                start += len(word)
        out: list[list[list[str]]] = [[[] for _ in words] for words in sentences]
        jobs.sort(key=lambda j: len(j[2]))  # batches of like lengths pad little
        from tqdm import tqdm

        batches = range(0, len(jobs), self.batch_size)
        for b in tqdm(batches, desc="augment: the masked LM's candidates", disable=not self.progress):
            batch = jobs[b:b + self.batch_size]
            width = max(len(masked) for _, _, masked, _ in batch)
            input_ids = torch.tensor([masked + [self.tok.pad_token_id] * (width - len(masked)) for _, _, masked, _ in batch])
            attention = (torch.arange(width) < torch.tensor([[len(masked)] for _, _, masked, _ in batch])).long()
            where = torch.full_like(input_ids, -100)  # the MLM head runs where this is not -100: the masks
            where[torch.arange(len(batch)), torch.tensor([pos for *_, pos in batch])] = 0
            with torch.inference_mode():
                logits = self.mlm(input_ids.to(self.device), attention.to(self.device),
                                  mlm_labels=where.to(self.device)).prediction_logits.float().cpu()  # (B, V)
            logits = logits.masked_fill(~self.allowed, float("-inf"))
            for row, (s, w, _, _) in zip(logits, batch, strict=True):
                row[ids[s][w][0]] = float("-inf")  # not the word itself
                out[s][w] = self.tok.convert_ids_to_tokens(row.topk(self.top_k).indices.tolist())
        return out

    def augment(self, sentences: Sequence[Sequence[str]], n: int, seed: int) -> list[list[list[str]]]:
        """N copies of each sentence (its words), each word replaced with probability p by one of its
        candidates; copies equal to the sentence itself are dropped, so a sentence may get fewer than N."""
        rng = random.Random(seed)
        out = []
        for words, options in zip(sentences, self.candidates(sentences), strict=True):
            copies, seen = [], {tuple(words)}
            for _ in range(n):
                copy = [rng.choice(c) if c and rng.random() < self.p else w for w, c in zip(words, options, strict=True)]
                if tuple(copy) not in seen:
                    seen.add(tuple(copy))
                    copies.append(copy)
            out.append(copies)
        return out


def augment_dataset(task: Task, data: Dataset, augmenter: Augmenter, n: int, seed: int,
                    read_options: dict[str, Any] | None = None) -> Dataset:
    """Up to N augmented, unlabelled copies of each example of `data` (its first text augmented)."""
    firsts, seconds = zip(*(task.texts_of(e) for e in data.examples), strict=True) if data.examples else ((), ())
    as_words = [isinstance(f, tuple) for f in firsts]
    sentences = [list(f) if words else augmenter.tok.words(f) for f, words in zip(firsts, as_words, strict=True)]
    texts: list[Any] = []
    pairs: list[str | None] = []
    for copies, words, second in zip(augmenter.augment(sentences, n, seed), as_words, seconds, strict=True):
        for copy in copies:
            texts.append(tuple(copy) if words else " ".join(copy))
            pairs.append(second)
    opts = {"normalize": read_options["normalize"]} if read_options and read_options.get("normalize") else {}
    return task.inputs_from_texts(texts, pairs if task.second is not None else None, **opts)


def lines(task: Task, data: Dataset) -> list[str]:
    """The examples as `bertkit distill --unlabeled` reads a .txt file: a text a line (a pair's two tab-separated;
    an NER sentence's words space-separated)."""
    out = []
    for example in data.examples:
        first, second = task.texts_of(example)
        text = " ".join(first) if isinstance(first, tuple) else first
        parts = [text] if second is None else [text, second]
        if any("\t" in p or "\n" in p for p in parts):
            raise BertkitError(f"an input holds a tab or a line break, which a text line cannot: {parts!r}"[:200])
        out.append("\t".join(parts))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mlm", required=True, help="a model with a masked-LM head")
    parser.add_argument("--teacher", required=True, type=Path, help="the fine-tuned teacher: its task and reader options")
    parser.add_argument("--data", required=True, type=Path, help="the training file, in the task's format")
    parser.add_argument("--n", type=int, default=4, help="copies of each input (TinyBERT: 20)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", required=True, type=Path, help="the text lines, for `bertkit distill --unlabeled`")
    args = parser.parse_args(argv)
    meta = read_task_file(args.teacher)
    task = get_task(meta["task"], **meta.get("task_options", {}))
    read_options = meta.get("input_options", {})
    data = task.read(args.data, **read_options)
    augmented = augment_dataset(task, data, Augmenter(args.mlm, progress=True), args.n, args.seed, read_options)
    args.out.write_text("".join(line + "\n" for line in lines(task, augmented)), encoding="utf-8")
    print(f"{len(augmented.examples):,} augmented inputs from {len(data.examples):,} -> {args.out}")


if __name__ == "__main__":
    main()
