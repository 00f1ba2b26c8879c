"""Span-selection pre-training: cloze questions about the instance's own text, answered by pointing.

A fraction of the pre-training instances become extractive questions (Glass et al., 2020, "Span
Selection Pre-training for Question Answering"; Ram et al., 2021, Splinter): a stretch of the text
is copied out as the question with one to three of its words blanked by a single [MASK] (and some of
its other tokens dropped), and the model points at the blanked words in the passage, with the same
start/end head that extractive QA fine-tunes (`qa_outputs`). Masked LM and next-sentence prediction
teach the encoder about each segment on its own; this teaches it to find a question's words in the
other segment, which sentence-pair tasks and QA ask for and which minutes of MLM do not reach.

Questions carry no MLM or NSP labels (-100) and no masks: the passage must show the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IGNORE = -100
QUESTION_TOKENS = (6, 24)  # a question copies this many passage tokens (inclusive), before drops
MAX_ANSWER_TOKENS = 8
DROP = 0.15  # each question token but the blank is dropped with this probability


@dataclass(frozen=True)
class SpanSelection:
    """Turns a `fraction` of instances into span questions. `continuation[id]` is true for "##" pieces, so that
    an answer is whole words."""

    fraction: float
    continuation: np.ndarray  # (vocab_size,) bool
    cls_id: int
    sep_id: int
    mask_id: int

    def __call__(self, example: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Gives `example` with span_start / span_end added (-100: not a question), or made a question."""
        plain = {**example, "span_start": np.int64(IGNORE), "span_end": np.int64(IGNORE)}
        if rng.random() >= self.fraction:
            return plain
        question = self.question(example["input_ids"], example["token_type_ids"], example["mlm_labels"], rng)
        return plain if question is None else question

    def question(self, ids: np.ndarray, types: np.ndarray, labels: np.ndarray,
                 rng: np.random.Generator) -> dict[str, np.ndarray] | None:
        """[CLS] question [SEP] passage [SEP] from the instance's text (its masks undone), no longer than it;
        None where the text is too short or the stretch drawn has no whole word to blank."""
        original = np.where(labels != IGNORE, labels, ids)
        n, len_a = len(ids), int((types == 0).sum())
        text = np.concatenate([original[1 : len_a - 1], original[len_a : n - 1]])  # both segments, specials out
        m = len(text)
        q = min(int(rng.integers(QUESTION_TOKENS[0], QUESTION_TOKENS[1] + 1)), m // 3)
        if q < QUESTION_TOKENS[0]:
            return None
        w0 = int(rng.integers(0, m - q + 1))  # the question's stretch: text[w0 : w0 + q]
        answer = self._answer(text, w0, q, rng)
        if answer is None:
            return None
        a0, a1 = answer  # the blank: text[w0 + a0 : w0 + a1]
        window = text[w0 : w0 + q]
        keep = rng.random(q) >= DROP
        query = np.concatenate([window[:a0][keep[:a0]], [self.mask_id], window[a1:][keep[a1:]]])
        p = min(m, n - 3 - len(query))  # passage tokens: as many as the instance has room for
        p0 = int(rng.integers(max(0, w0 + q - p), min(w0, m - p) + 1))  # a passage that holds the stretch
        passage = text[p0 : p0 + p]
        out_ids = np.concatenate([[self.cls_id], query, [self.sep_id], passage, [self.sep_id]]).astype(np.int64)
        out_types = np.zeros(len(out_ids), dtype=np.int64)
        out_types[len(query) + 2 :] = 1
        start = len(query) + 2 + w0 + a0 - p0
        return {"input_ids": out_ids, "token_type_ids": out_types,
                "mlm_labels": np.full(len(out_ids), IGNORE, dtype=np.int64), "nsp_label": np.int64(IGNORE),
                "span_start": np.int64(start), "span_end": np.int64(start + a1 - a0 - 1)}  # fmt: skip

    def _answer(self, text: np.ndarray, w0: int, q: int, rng: np.random.Generator) -> tuple[int, int] | None:
        """One to three whole words of text[w0 : w0 + q] (half the time one), as offsets into it."""
        bounds = np.flatnonzero(~self.continuation[text[w0 : w0 + q + 1]])  # word starts (at q: the next word's)
        if w0 + q == len(text):
            bounds = np.append(bounds, q)  # the text's end ends a word too
        starts = bounds[bounds < q]
        if len(starts) == 0:
            return None
        a0 = int(rng.choice(starts))
        ends = bounds[bounds > a0]
        if len(ends) == 0:
            return None
        r = rng.random()
        a1 = int(ends[min(len(ends) - 1, int(r >= 0.5) + int(r >= 0.8))])
        return (a0, a1) if a1 - a0 <= MAX_ANSWER_TOKENS else None


def continuation_table(vocab: dict[str, int]) -> np.ndarray:
    """(vocab_size,) bool: which token ids continue a word ("##" pieces)."""
    table = np.zeros(max(vocab.values(), default=-1) + 1, dtype=bool)
    for token, i in vocab.items():
        table[i] = token.startswith("##")
    return table
