"""QA: windows, training targets, and decoding from gold logits back to the gold answers on real
SQuAD v1.1 and CMRC 2018 questions; SQuAD v2 no-answer; a tiny model's padded outputs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit import BertConfig
from bertkit.heads import MODEL_CLASSES, to_tensors
from bertkit.tasks import QATask, get_task
from bertkit.tasks.qa import QAFeatures
from bertkit.tokenizer import Tokenizer


def gold_logits(features: QAFeatures) -> list[tuple[np.ndarray, np.ndarray]]:
    """Gives per-row (1, T) start and end logits that peak at each row's training target."""
    out = []
    for row in features.rows:
        n = len(row["input_ids"])
        start, end = np.zeros((1, n), np.float32), np.zeros((1, n), np.float32)
        start[0, row["start_positions"]] = end[0, row["end_positions"]] = 10.0
        out.append((start, end))
    return out


def beyond_first_window(features: QAFeatures) -> list[int]:
    """Gives the examples whose answer is in some window but not in their first one."""
    first_has = {}
    later = set()
    for r, row in enumerate(features.rows):
        i = int(features.example_index[r])
        if features.window_start[r] == 0:
            first_has[i] = row["start_positions"] > 0
        elif row["start_positions"] > 0:
            later.add(i)
    return sorted(i for i in later if not first_has[i])


@pytest.fixture(scope="module")
def squad(shared_data: Path) -> tuple[QATask, object, QAFeatures, float]:
    tok = Tokenizer.from_pretrained(shared_data / "models" / "all-MiniLM-L6-v2")
    task = get_task("qa")
    data = task.read(shared_data / "squad_v1.1" / "dev-v1.1.json")
    t = time.perf_counter()
    features = task.featurize(data, tok)
    return task, data, features, time.perf_counter() - t


@pytest.fixture(scope="module")
def zh_tok(shared_data: Path) -> Tokenizer:
    return Tokenizer.from_vocab_file(shared_data / "vocab" / "bert-base-chinese-vocab.txt")


@pytest.mark.slow
def test_squad_gold_logits_give_back_the_gold_answers(squad):
    task, data, features, seconds = squad
    assert seconds < 30, f"featurizing {len(data)} questions took {seconds:.1f}s"
    predictions = task.decode(features, gold_logits(features))
    scores = task.score(data, predictions)
    # the rest are answers that end inside a token ("8" of "18", "£20,980" from "20,980")
    assert scores["exact_match"] > 99.7 and scores["f1"] > 99.7, scores
    for p in predictions:
        assert p.example.context[p.start : p.end] == p.text  # always the exact substring of the context
    later = beyond_first_window(features)
    assert len(later) == 32
    wide = task.decode(features, gold_logits(features), max_answer_length=512)  # two of them run past 30 tokens
    found = [wide[i].text == data[i].answers[0].text for i in later]
    assert all(found), f"{sum(found)} of {len(found)} answers beyond the first window decoded"


def test_windows_follow_doc_stride_and_max_length(squad, shared_data: Path):
    _, data, features, _ = squad
    tok = Tokenizer.from_pretrained(shared_data / "models" / "all-MiniLM-L6-v2")
    assert max(len(r["input_ids"]) for r in features.rows) <= 384
    multi = 0
    for i in np.unique(features.example_index):
        rows = np.flatnonzero(features.example_index == i)
        starts = features.window_start[rows]
        lengths = features.window_length[rows]
        assert list(starts) == [128 * w for w in range(len(rows))]  # windows start doc_stride apart
        n_context = len(features.token_offsets[features.context_of[i]])
        assert starts[-1] + lengths[-1] == n_context  # the last window reaches the end of the context
        owned = np.zeros(n_context, int)
        for r in rows:
            owned[features.window_start[r] : features.window_start[r] + features.window_length[r]] += features.max_context[r]
        assert (owned == 1).all()  # each context token decided by exactly one window
        multi += len(rows) > 1
    assert multi == 183
    r = int(np.flatnonzero(features.window_start == 128)[0])
    row, e = features.rows[r], data[features.example_index[r]]
    question = tok.encode(e.question, add_special_tokens=False).ids[:64]
    context = tok.encode(e.context, add_special_tokens=False).ids
    k = len(question) + 2
    assert row["input_ids"] == [tok.cls_token_id, *question, tok.sep_token_id, *context[128 : 128 + 384 - k - 1],
                                tok.sep_token_id]  # fmt: skip
    assert row["token_type_ids"] == [0] * k + [1] * (len(row["input_ids"]) - k)


@pytest.mark.slow
def test_cmrc_gold_logits_give_back_the_gold_answers(shared_data: Path, zh_tok: Tokenizer):
    task = QATask()
    data = task.read(shared_data / "cmrc2018" / "dev.json")
    features = task.featurize(data, zh_tok)
    logits = gold_logits(features)
    # CMRC answers run longer than Google's 30-token default; with room for them all come back
    wide = task.score(data, task.decode(features, logits, max_answer_length=512))
    assert wide == {"f1": 100.0, "exact_match": 100.0, "average": 100.0}
    default = task.score(data, task.decode(features, logits))
    assert default["exact_match"] > 94
    later = beyond_first_window(features)
    predictions = task.decode(features, logits, max_answer_length=512)
    assert len(later) == 399 and all(predictions[i].text == data[i].answers[0].text for i in later)


def test_decoder_looks_at_context_tokens_only(zh_tok: Tokenizer):
    task = QATask()
    data = task.inputs_from_texts(["谁开发了战国无双3？"], ["《战国无双3》是由光荣和ω-force开发的游戏。"])
    features = task.featurize(data, zh_tok)
    assert "start_positions" not in features.rows[0]  # user questions have no targets
    n = len(features.rows[0]["input_ids"])
    k = int(features.context_position[0])
    start, end = np.zeros((1, n), np.float32), np.zeros((1, n), np.float32)
    start[0, 1:k], end[0, 1:k] = 50, 50  # the question tokens score highest: never an answer
    context = data[0].context
    first, last = context.index("光"), context.index("e")  # "光荣和ω-force"
    offsets = features.token_offsets[0]
    start[0, k + int(np.flatnonzero(offsets[:, 0] == first)[0])] = 9
    end[0, k + int(np.flatnonzero(offsets[:, 1] == last + 1)[0])] = 9
    padded = np.full((1, n + 5), np.finfo(np.float32).min, np.float32)  # a batch padded past the row
    padded[0, :n] = start
    padded_end = np.full_like(padded, np.finfo(np.float32).min)
    padded_end[0, :n] = end
    prediction = task.decode(features, [(padded, padded_end)])[0]
    assert prediction.text == "光荣和ω-force"
    out = task.prediction_json(prediction)
    assert out["answer"] == "光荣和ω-force" and context[out["start"] : out["end"]] == out["answer"]


def test_squad_v2_unanswerable_questions(tmp_path: Path, zh_tok: Tokenizer):
    path = tmp_path / "v2.json"
    path.write_text(json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": [{
        "context": "北京是中国的首都。",
        "qas": [{"id": "a", "question": "中国的首都？", "answers": [{"text": "北京", "answer_start": 0}]},
                {"id": "b", "question": "日本的首都？", "answers": [], "is_impossible": True,
                 "plausible_answers": [{"text": "北京", "answer_start": 0}]}]}]}]}, ensure_ascii=False))
    task = QATask(language="en")  # SQuAD v2 scoring, whatever the script
    data = task.read(path)
    assert data.impossible == 1
    features = task.featurize(data, zh_tok)
    assert features.version_2
    assert (features.rows[1]["start_positions"], features.rows[1]["end_positions"]) == (0, 0)
    logits = gold_logits(features)
    predictions = task.decode(features, logits)
    assert [p.text for p in predictions] == ["北京", ""]
    # no answer: [CLS] scores 10 + 10 while every span of the context scores 0 + 0
    assert predictions[1].null_score_diff == pytest.approx(20.0) and predictions[0].null_score_diff == pytest.approx(-20.0)
    scores = task.score(data, predictions)
    assert scores["exact_match"] == 100.0 and scores["no_ans_exact_match"] == 100.0
    # a high threshold keeps the best span even where [CLS] wins
    forced = task.decode(features, logits, null_score_diff_threshold=1e9)
    assert forced[1].text != ""


def test_tiny_model_outputs_decode(builtin_data: Path, vocab: Path):
    task, tok = QATask(), Tokenizer.from_pretrained(vocab)
    data = task.read(builtin_data / "qa" / "dev.json")
    data.examples = data.examples[:4]
    features = task.featurize(data, tok, max_seq_length=128, doc_stride=64)
    assert len(features) > len(data)  # contexts of several windows: the answer is searched across them
    torch.manual_seed(0)
    model = MODEL_CLASSES[task.architecture](BertConfig.preset("tiny", vocab_size=tok.vocab_size).with_labels(task.labels(data)))
    model.eval()
    outputs, padded = [], 0
    with torch.no_grad():
        for i in range(0, len(features), 4):
            batch = to_tensors(task.collate(features.rows[i : i + 4], tok.pad_token_id))
            out = model(**batch)
            # [PAD] scores lowest; the loss is the mean over rows of the start and end cross-entropies over the row's
            # own tokens, recomputed row by row without padding
            pad = batch["attention_mask"] == 0
            lowest = torch.finfo(torch.float32).min
            assert (out.start_logits[pad] == lowest).all() and (out.end_logits[pad] == lowest).all()
            padded += int(pad.sum())
            rows = []
            for r, n in enumerate(batch["attention_mask"].sum(1).tolist()):
                s, e = int(batch["start_positions"][r]), int(batch["end_positions"][r])
                rows.append(-(out.start_logits[r, :n].log_softmax(-1)[s] + out.end_logits[r, :n].log_softmax(-1)[e]) / 2)
            torch.testing.assert_close(out.loss, torch.stack(rows).mean())
            outputs.append(out)
    assert padded > 0  # some batch was padded
    predictions = task.decode(features, outputs)
    assert [p.example for p in predictions] == list(data.examples)
    row_logits = [(o.start_logits[j], o.end_logits[j]) for o in outputs for j in range(len(o.start_logits))]  # by row
    for i, p in enumerate(predictions):
        assert p.text and p.example.context[p.start : p.end] == p.text
        assert len(p.nbest) <= 20 and p.nbest[0]["text"] == p.text and p.score == p.nbest[0]["score"]
        assert [c["score"] for c in p.nbest] == sorted((c["score"] for c in p.nbest), reverse=True)
        # SQuAD v1: the n-best probabilities are the softmax of their scores
        scores = torch.tensor([c["score"] for c in p.nbest], dtype=torch.float64)
        assert [c["probability"] for c in p.nbest] == pytest.approx(scores.softmax(0).tolist(), abs=1e-9)
        # the answer's score is exactly the start + end logit of a span of context tokens, at most 30 long, in one of
        # the question's windows, starting on a token that window has the most context around
        found = False
        for r in np.flatnonzero(features.example_index == i):
            k, w = int(features.context_position[r]), int(features.window_length[r])
            start, end = row_logits[r]
            spans = start[k : k + w, None] + end[None, k : k + w]  # (w, w): [a, b] scores the span a..b
            a, b = torch.meshgrid(torch.arange(w), torch.arange(w), indexing="ij")
            valid = (b >= a) & (b - a < 30) & torch.as_tensor(features.max_context[r], dtype=torch.bool)[:, None]
            found |= bool((spans[valid] == p.score).any())
        assert found, p.score


def test_a_prediction_matches_an_expected_answer() -> None:
    task = get_task("qa")
    assert task.matches({"answer": " Paris ", "start": 3, "end": 9}, "Paris")
    assert not task.matches({"answer": "", "start": -1, "end": -1}, "Paris")
