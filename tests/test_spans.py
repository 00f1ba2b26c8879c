"""Span-selection questions (bertkit.spans): what a question is made of, how often, and that the answer
the model is taught to point at is the blanked words, whole, in the passage."""

from __future__ import annotations

import numpy as np

from bertkit.spans import IGNORE, SpanSelection, continuation_table

CLS, SEP, MASK = 2, 3, 4
VOCAB = {"[PAD]": 0, "[UNK]": 1, "[CLS]": CLS, "[SEP]": SEP, "[MASK]": MASK,
         **{f"w{i}": i for i in range(5, 60)}, **{f"##p{i}": i for i in range(60, 80)}}  # fmt: skip
CONTINUATION = continuation_table(VOCAB)


def instance(rng: np.random.Generator, n: int = 100) -> dict[str, np.ndarray]:
    """[CLS] A [SEP] B [SEP] of random words and "##" pieces, some positions masked as MLM does."""
    len_a = int(rng.integers(3, n - 2))
    words = rng.integers(5, 80, size=n)
    pieces = rng.random(n) < 0.3
    words[pieces] = rng.integers(60, 80, size=int(pieces.sum()))  # "##" pieces (a text may start with one: a cut word)
    ids = words.copy()
    ids[0], ids[len_a - 1], ids[n - 1] = CLS, SEP, SEP
    types = np.zeros(n, dtype=np.int64)
    types[len_a:] = 1
    labels = np.full(n, IGNORE)
    masked = rng.choice(np.setdiff1d(np.arange(n), [0, len_a - 1, n - 1]), size=12, replace=False)
    labels[masked] = ids[masked]
    ids[masked] = MASK
    return {"input_ids": ids, "token_type_ids": types, "mlm_labels": labels, "nsp_label": np.int64(0)}


def is_subsequence(small: np.ndarray, big: np.ndarray) -> bool:
    it = iter(big.tolist())
    return all(any(x == y for y in it) for x in small.tolist())


def is_question(example: dict[str, np.ndarray]) -> bool:
    return bool((example["mlm_labels"] == IGNORE).all())  # an instance always has MLM targets; a question none


def test_a_question_is_a_stretch_of_the_text_with_whole_words_blanked_and_points_at_them() -> None:
    spans = SpanSelection(1.0, CONTINUATION, CLS, SEP, MASK)
    rng = np.random.default_rng(0)
    made = 0
    for _ in range(500):
        e = instance(rng, n=int(rng.integers(40, 129)))
        original = np.where(e["mlm_labels"] != IGNORE, e["mlm_labels"], e["input_ids"])
        q = spans(e, rng)
        if not is_question(q):
            continue
        made += 1
        ids, types, start, end = q["input_ids"], q["token_type_ids"], int(q["span_start"]), int(q["span_end"])
        assert len(ids) <= len(e["input_ids"]) and ids[0] == CLS and ids[-1] == SEP
        first_sep = int(np.flatnonzero(ids == SEP)[0])
        assert (types[: first_sep + 1] == 0).all() and (types[first_sep + 1 :] == 1).all()
        question, passage = ids[1:first_sep], ids[first_sep + 1 : -1]
        assert (question == MASK).sum() == 1 and (passage != MASK).all(), "MLM's masks are undone; one blank"
        assert is_subsequence(passage, original), "the passage is the instance's own text"
        assert first_sep < start <= end < len(ids) - 1 and end - start < 8
        answer = ids[start : end + 1]
        assert not CONTINUATION[answer[0]], "the answer starts a word"
        assert end + 1 == len(ids) - 1 or not CONTINUATION[ids[end + 1]], "and ends one"
        blank, at = int(np.flatnonzero(question == MASK)[0]), start - (first_sep + 1)  # the answer in question, passage
        assert is_subsequence(question[:blank], passage[:at]) and is_subsequence(question[blank + 1 :], passage[at + len(answer) :]), \
            "the question is the passage's words around the answer, some dropped"
        assert q["nsp_label"] == IGNORE, "a question is no next-sentence instance"
    assert made > 400  # a few draws find no whole word to blank


def test_a_fraction_of_the_instances_become_questions_and_the_rest_are_untouched() -> None:
    spans = SpanSelection(0.3, CONTINUATION, CLS, SEP, MASK)
    rng = np.random.default_rng(1)
    questions = 0
    for _ in range(4000):
        e = instance(rng)
        out = spans(e, rng)
        if is_question(out):
            questions += 1
        else:
            assert out["input_ids"] is e["input_ids"] and out["mlm_labels"] is e["mlm_labels"]
            assert out["span_start"] == out["span_end"] == IGNORE and out["nsp_label"] == e["nsp_label"]
    assert abs(questions / 4000 - 0.3) < 0.03  # a few draws find no question: slightly under 0.3


def test_a_short_instance_stays_an_mlm_instance() -> None:
    spans = SpanSelection(0.99, CONTINUATION, CLS, SEP, MASK)
    rng = np.random.default_rng(2)
    e = instance(rng, n=20)  # 17 text tokens: no room for a question of 6 and a passage holding it
    assert not is_question(spans(e, rng))


def test_a_micro_batch_of_questions_alone_gives_finite_sums_and_gradients_that_fit_it() -> None:
    import torch

    from bertkit.config import BertConfig
    from bertkit.heads import BertForPreTraining
    from bertkit.pretrain import PretrainingObjective, training_batch
    from bertkit.pretraining import collate

    spans = SpanSelection(1.0, CONTINUATION, CLS, SEP, MASK)
    rng = np.random.default_rng(3)
    questions = [q for q in (spans(instance(rng), rng) for _ in range(8)) if is_question(q)][:4]
    batch = training_batch(collate(questions))
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=80), span_head=True)
    sums = PretrainingObjective(spans=True)(model, batch)
    assert sums["mlm_loss"].detach().item() == 0 and sums["nsp_loss"].detach().item() == 0  # no targets of either: nothing, not nan
    assert torch.isfinite(sums["span_loss"]) and sums["span_loss"].detach().item() > 0
    (sums["mlm_loss"] + sums["nsp_loss"] + sums["span_loss"]).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert model.qa_outputs.weight.grad.abs().sum() > 0
    # the gradients lead somewhere: a few steps on this one batch fit its answers
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = sums["span_loss"].item()
    for _ in range(60):
        optimizer.zero_grad()
        sums = PretrainingObjective(spans=True)(model, batch)
        (sums["span_loss"] / len(questions)).backward()
        optimizer.step()
    assert sums["span_loss"].item() < 0.2 * first and sums["span_acc"].item() == len(questions)
