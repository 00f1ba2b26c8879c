"""Hard negatives for embedders and rerankers: for each anchor, passages its embedder ranks close but that are not
its positive, minus those a reranker scores nearly as high as the positive (likely unlabelled positives).

    found = mine(embedder, pairs, negatives=3, ranks=(10, 50), rerank=scorer, margin=0.1)
    write_groups(Path("groups.tsv"), found.groups)     # anchor, positive, negative_1..negative_3

The passages are the pairs' positives (and an extra corpus, if given), each once. An anchor's ranking leaves out
every positive it has in the file; `ranks` is a slice of what remains (10:50: the 11th to the 50th), skipping the
very top, where unlabelled positives crowd (as sentence-transformers' mine_hard_negatives does). With a reranker,
a candidate scoring above the positive's score minus `margin` is dropped. An anchor left with fewer negatives
than asked is dropped, and counted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import BertkitError
from .fileio import atomic_write_text
from .retrieval import dense_search

Embed = Callable[[list[str]], np.ndarray]  # texts -> (N, H) vectors
Rerank = Callable[[list[tuple[str, str]]], np.ndarray]  # (query, passage) pairs -> (N,) relevance scores


@dataclass(frozen=True)
class Mined:
    groups: list[tuple[str, str, list[str]]]  # (anchor, positive, negatives), one a pair of the input kept
    dropped: int  # pairs whose anchor had fewer negatives than asked
    reranked_out: int  # candidates the reranker scored within the margin of the positive


def mine(embed: Embed, pairs: Sequence[tuple[str, str]], negatives: int = 3, ranks: tuple[int, int] = (10, 50),
         rerank: Rerank | None = None, margin: float = 0.1, corpus: Sequence[str] = ()) -> Mined:
    """Gives each pair its anchor's hard negatives (see the module's doc)."""
    lo, hi = ranks
    if not 0 <= lo < hi or negatives < 1:
        raise BertkitError(f"--range {lo}:{hi} and --negatives {negatives}: need 0 <= start < end and at least 1")
    passages = list(dict.fromkeys([p for _, p in pairs] + list(corpus)))
    positives: dict[str, set[str]] = {}
    for anchor, positive in pairs:
        positives.setdefault(anchor, set()).add(positive)
    anchors = list(positives)
    most = max(len(p) for p in positives.values())
    run = dense_search(embed, dict(enumerate(anchors)), dict(enumerate(passages)), top_k_docs=hi + most)  # type: ignore[arg-type]
    candidates = {anchor: [passages[int(i)] for i in run[n] if passages[int(i)] not in positives[anchor]][lo:hi]
                  for n, anchor in enumerate(anchors)}
    reranked_out = 0
    if rerank is not None:
        asked = list(dict.fromkeys([(a, p) for a, p in pairs] + [(a, c) for a in anchors for c in candidates[a]]))
        score = dict(zip(asked, rerank(asked).tolist(), strict=True))
    groups, dropped = [], 0
    for anchor, positive in pairs:
        kept = candidates[anchor]
        if rerank is not None:
            ceiling = score[(anchor, positive)] - margin
            close = [c for c in kept if score[(anchor, c)] > ceiling]
            reranked_out += len(close)
            kept = [c for c in kept if c not in close]
        if len(kept) < negatives:
            dropped += 1
            continue
        groups.append((anchor, positive, kept[:negatives]))
    return Mined(groups, dropped, reranked_out)


def write_groups(path: Path, groups: Sequence[tuple[str, str, list[str]]]) -> None:
    """Writes groups as a table the embedding and reranking families read: TSV (a header, then anchor, positive,
    negative_1, ... a line), or JSON lines with the same fields when the path ends in .jsonl."""
    if not groups:
        raise BertkitError(f"{path}: no group to write (every anchor had fewer negatives than asked)")
    n = len(groups[0][2])
    fields = ["anchor", "positive", *(f"negative_{i + 1}" for i in range(n))]
    rows = [[anchor, positive, *negs] for anchor, positive, negs in groups]
    if path.suffix == ".jsonl":
        atomic_write_text(path, "".join(json.dumps(dict(zip(fields, r, strict=True)), ensure_ascii=False) + "\n"
                                        for r in rows))
        return
    for r in rows:
        bad = next((t for t in r if "\t" in t or "\n" in t or "\r" in t), None)
        if bad is not None:
            raise BertkitError(f"{path}: the text {bad[:40]!r}... holds a tab or a line break: write .jsonl instead")
    atomic_write_text(path, "".join("\t".join(r) + "\n" for r in [fields, *rows]))
