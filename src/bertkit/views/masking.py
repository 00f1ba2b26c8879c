"""`bertkit mask`: what pre-training does to one input, drawn by the code that draws it for training.

    bertkit mask --vocab runs/demo-en/vocab "the man went to the store ." --pair "he bought a gallon of milk ."

The text (and its pair) is tokenized as `prepare` tokenizes sentences, laid out as `[CLS] A [SEP] B [SEP]`
(truncated as Google's truncate_seq_pair would), and masked by `DynamicMasking.apply`, the function
training calls on every instance, with the key of (seed, epoch, index): the same arguments draw the
same masks as `PretrainingData.example(index, epoch, seed)` draws for an instance of these tokens.
15% of the tokens are chosen (at most max_predictions_per_seq, never [CLS] or [SEP]); of those, 80%
become [MASK], 10% a random token and 10% stay; the model is asked for every chosen one.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

from ..config import IGNORE
from ..corpus import split_sentences
from ..errors import BertkitError
from ..pretraining.dataset import DynamicMasking, instance_key
from ..pretraining.documents import tokenize_sentences
from ..pretraining.instances import Vocab, default_max_predictions, truncate_pair
from ..text import has_cjk
from ..tokenizer import Tokenizer


def show_masking(vocab_dir: str | Path, text: str, pair: str | None = None, *, whole_word_masking: bool = False,
                 seed: int = 12345, epoch: int = 0, index: int = 0, masked_lm_prob: float = 0.15,
                 max_seq_length: int = 128) -> dict[str, Any]:
    """Gives one input as pre-training sees it: tokens, segments, which were chosen and what each became.

    Without `pair`, the text's sentences are split in two: A the first half, B the rest (Google's "actual
    next" segment); a random-next pair would put another document's sentences in B.
    """
    tok = Tokenizer.from_pretrained(vocab_dir)
    vocab = Vocab.of(tok)
    if pair is not None:
        segments = [[text], [pair]]
    else:
        sentences = split_sentences(text)
        if len(sentences) < 2:
            raise BertkitError("one sentence: next-sentence prediction needs two segments; give --pair TEXT or more sentences")
        half = (len(sentences) + 1) // 2
        segments = [sentences[:half], sentences[half:]]
    jieba = whole_word_masking and has_cjk(text + (pair or ""))  # prepare's Chinese whole words: jieba's
    parts = [tokenize_sentences(s, tok, vocab, jieba) for s in segments]
    (a, _, ws_a), (b, _, ws_b) = parts
    if len(a) == 0 or len(b) == 0:
        raise BertkitError("a segment has no tokens: give text with words in it")
    a0, a1, b0, b1 = truncate_pair(0, len(a), 0, len(b), max_seq_length - 3, random.Random(seed))
    ids = np.concatenate([[vocab.cls_id], a[a0:a1], [vocab.sep_id], b[b0:b1], [vocab.sep_id]]).astype(np.int64)
    len_a = a1 - a0 + 2
    word_starts = None
    if whole_word_masking:
        word_starts = (np.concatenate([[1], ws_a[a0:a1], [1], ws_b[b0:b1], [1]]).astype(bool) if jieba
                       else ~vocab.continuation[ids])  # fmt: skip
    original = ids.copy()
    masking = DynamicMasking(masked_lm_prob, default_max_predictions(max_seq_length, masked_lm_prob), vocab.size,
                             vocab.mask_id)
    labels = masking.apply(ids, len_a, instance_key(seed, epoch, index), word_starts)
    chosen = np.flatnonzero(labels != IGNORE)
    fates = {int(i): "[MASK]" if ids[i] == vocab.mask_id else "kept" if ids[i] == original[i] else "random" for i in chosen}
    rows = [{"position": i, "token": tok.convert_ids_to_tokens(int(original[i])), "segment": "A" if i < len_a else "B",
             "input": tok.convert_ids_to_tokens(int(ids[i])), "chosen": fates.get(i)} for i in range(len(ids))]
    return {
        "a": tok.decode(original[1 : len_a - 1].tolist()), "b": tok.decode(original[len_a:-1].tolist()),
        "nsp_label": "IsNext", "rows": rows, "input_ids": ids.tolist(), "mlm_labels": labels.tolist(),
        "token_type_ids": [0] * len_a + [1] * (len(ids) - len_a),
        "counts": {"tokens": len(ids), "chosen": len(chosen), **{f: list(fates.values()).count(f) for f in ("[MASK]", "random", "kept")}},
        "key": {"seed": seed, "epoch": epoch, "index": index},
    }  # fmt: skip


def format_masking(shown: dict[str, Any]) -> str:
    """Gives `show_masking`'s result as a table a learner can read."""
    c = shown["counts"]
    lines = [f"A: {shown['a']}", f"B: {shown['b']}", f"next-sentence label: {shown['nsp_label']} (B follows A; "
             "half of pre-training's pairs take B from another document instead: NotNext)", "",
             f"{'pos':>4}  {'seg':3}  {'token':16} {'input':16} chosen"]
    for r in shown["rows"]:
        mark = "" if r["chosen"] is None else {"[MASK]": "-> [MASK]", "random": "-> random token", "kept": "-> kept"}[r["chosen"]]
        lines.append(f"{r['position']:>4}  {r['segment']:3}  {r['token']:16} {r['input']:16} {mark}")
    lines += ["", f"{c['chosen']} of {c['tokens']} tokens chosen to predict ({100 * c['chosen'] / c['tokens']:.0f}%; "
              f"[CLS] and [SEP] never): {c['[MASK]']} became [MASK], {c['random']} a random token, {c['kept']} kept "
              f"(80/10/10 on average); seed {shown['key']['seed']}, epoch {shown['key']['epoch']}, "
              f"instance {shown['key']['index']}"]
    return "\n".join(lines)
