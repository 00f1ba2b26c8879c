"""Extractive QA (SQuAD v1.1/v2.0, CMRC 2018) as Google's run_squad.py does it, on token offsets:

- featurize: `[CLS] question [SEP] window [SEP]`, the question cut to max_query_length tokens, the
  context cut into windows of max_seq_length - len(question) - 3 tokens that start doc_stride tokens
  apart; training targets are the answer's first and last token, or [CLS] (index 0) in a window
  that does not hold the whole answer and for SQuAD v2's unanswerable questions;
- decode: the n_best_size best starts and ends among each window's context tokens, spans of at most
  max_answer_length tokens, a start counted only in the window where it has the most context (as
  Google's `_check_is_max_context`), best total logit over all windows of a question; the answer is
  the exact substring of the context between the first token's start and the last token's end;
  v2: no answer when the [CLS] score beats the best span by more than null_score_diff_threshold.
- score: the official SQuAD EM/F1, or CMRC 2018's when the contexts are Chinese.

Each distinct context and each question is tokenized once, in one Rust batch call each.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BertkitError
from ..text import has_cjk
from .base import (
    STRING,
    Dataset,
    Family,
    Features,
    InputError,
    ReadReport,
    check_text,
    json_kind,
    obj,
    output_rows,
    pad_rows,
)
from .metrics import cmrc_scores, squad_f1, squad_normalize, squad_scores
from .readers import read_text


@dataclass(frozen=True)
class Answer:
    text: str
    start: int  # character offset into the context, checked: context[start:start+len(text)] == text


@dataclass(frozen=True)
class QAExample:
    """A question on a context; `answers` are located in the context, `gold_texts` are all annotated.

    Scoring uses `gold_texts`, as the official scripts do (they never look at offsets); training uses
    the first located answer. `is_impossible` is None for user questions (no gold at all).
    """

    qid: str
    question: str
    context: str
    answers: tuple[Answer, ...]
    gold_texts: tuple[str, ...]
    is_impossible: bool | None
    title: str = ""


@dataclass
class QAFeatures(Features):
    """Rows plus, per row, where its window lies; per example, its context's token offsets."""

    window_start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # (rows,) first context token
    window_length: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # (rows,) context tokens in row
    context_position: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # (rows,) where they begin
    max_context: list[np.ndarray] = field(default_factory=list)  # per row, (window_length,) bool
    context_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # (examples,) -> token_offsets
    token_offsets: list[np.ndarray] = field(default_factory=list)  # per distinct context, (tokens, 2) chars
    version_2: bool = False


@dataclass
class QAPrediction:
    example: QAExample
    text: str  # "" for no answer
    start: int  # character span in the context; -1, -1 for no answer
    end: int
    score: float  # start + end logit of the chosen span
    null_score_diff: float | None  # v2: [CLS] score minus the best span's score
    nbest: list[dict[str, Any]]  # text, start, end, score, probability; best first


def best_null_threshold(data: Dataset, predictions: Sequence[QAPrediction]) -> float:
    """The threshold on null_score_diff (no answer when the difference is above it) with the best total F1,
    as the official evaluate-v2.0.py's find_best_thresh: every question starts unanswered; taken in order of
    rising difference, each switches to its best span, and the threshold is the difference at which the
    total F1 was highest (0.0 when no switch beats answering nothing, as there)."""
    golds = [[g for g in e.gold_texts if squad_normalize(g)] or [""] for e in data]
    f1_null = [float(gold == [""]) for gold in golds]
    total = best = sum(f1_null)
    threshold = 0.0
    order = sorted((p.null_score_diff, i) for i, p in enumerate(predictions) if p.null_score_diff is not None and p.nbest)
    for diff, i in order:
        total += max(squad_f1(predictions[i].nbest[0]["text"], g, v2=True) for g in golds[i]) - f1_null[i]
        if total > best:
            best, threshold = total, diff
    return float(threshold)


def windows(n_tokens: int, max_tokens: int, stride: int) -> list[tuple[int, int]]:
    """Gives (start, length) of each context window, as run_squad.py's doc_spans (one empty window if n is 0)."""
    spans: list[tuple[int, int]] = []
    start = 0
    while True:
        length = min(n_tokens - start, max_tokens)
        spans.append((start, length))
        if start + length >= n_tokens:
            return spans
        start += min(length, stride)


def max_context_owner(spans: list[tuple[int, int]], n_tokens: int) -> np.ndarray:
    """Gives, per context token, the window where it has the most context (min of left and right, +0.01 length)."""
    if len(spans) == 1:
        return np.zeros(n_tokens, np.int64)
    j = np.arange(n_tokens)
    score = np.full((len(spans), n_tokens), -np.inf)
    for w, (s, length) in enumerate(spans):
        pos = j[s : s + length]
        score[w, s : s + length] = np.minimum(pos - s, s + length - 1 - pos) + 0.01 * length
    return score.argmax(0)  # first best window on ties, as Google's strict ">"


@dataclass
class QATask:
    """Extractive question answering; `version_2` None means "v2 when the data has unanswerable questions".

    `language` picks the metric: "en" SQuAD's, "zh" CMRC 2018's, "auto" by the contexts' script.
    """

    name: str = "qa"
    main_metric: str = "f1"
    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    null_score_diff_threshold: float = 0.0
    search_null_threshold: bool = True  # v2: fine-tuning searches the threshold on dev (`tuned_options`)
    null_threshold: float | None = None  # given (fine-tuning's --null-threshold): the threshold, not searched
    version_2: bool | None = None
    language: str = "auto"
    architecture: str = "BertForQuestionAnswering"
    problem_type: str | None = None
    outputs: tuple[str, ...] = ("start_logits", "end_logits")
    per_token: bool = True
    per_token_loss: bool = False  # a start and an end per window
    class_weighted: bool = False
    soft_targets: str = "positions"
    variant: str = ""
    json_fields: tuple[tuple[str, ...], tuple[str, ...]] = (("question",), ("context",))
    metric_names: tuple[str, ...] = ("exact_match", "f1")

    def __post_init__(self) -> None:
        if self.null_threshold is not None:
            self.null_score_diff_threshold, self.search_null_threshold = self.null_threshold, False

    @property
    def model_options(self) -> dict[str, Any]:
        return {"problem_type": self.problem_type}

    def read(self, path: str | Path, **fmt: Any) -> Dataset:
        """Gives the questions of a SQuAD-format JSON file; `fmt` goes to `readers.read_squad` (whole_words)."""
        return read_squad(path, **fmt)

    def labels(self, train: Dataset) -> list[str]:
        """Gives ["start", "end"]: the span head's two outputs (num_labels=2, as transformers' QA configs)."""
        return ["start", "end"]

    def featurize(self, data: Dataset, tok: Any, label2id: dict[str, int] | None = None, *,
                  max_seq_length: int | None = None, doc_stride: int | None = None,
                  max_query_length: int | None = None) -> QAFeatures:
        """Gives one row per window of each question, with start/end positions when the data has gold."""
        L = max_seq_length or self.max_seq_length
        stride = doc_stride or self.doc_stride
        max_query = max_query_length or self.max_query_length
        context_ids: dict[str, int] = {}
        context_of = np.fromiter((context_ids.setdefault(e.context, len(context_ids)) for e in data),
                                 dtype=np.int64, count=len(data))
        contexts = tok.encode_batch(list(context_ids), add_special_tokens=False)
        questions = tok.encode_batch([e.question for e in data], add_special_tokens=False)
        token_offsets = [np.asarray(c.offsets, dtype=np.int64).reshape(-1, 2) for c in contexts]
        cls, sep = tok.cls_token_id, tok.sep_token_id
        rows: list[dict[str, Any]] = []
        example_index, starts, lengths, positions, max_context = [], [], [], [], []
        for i, e in enumerate(data):
            q_ids = questions[i].ids[:max_query]
            ctx = contexts[context_of[i]].ids
            offsets = token_offsets[context_of[i]]
            max_doc = L - len(q_ids) - 3
            if max_doc <= 0:
                raise BertkitError(f"max_seq_length {L} leaves no room for the context after a "
                                   f"{len(q_ids)}-token question (question {e.qid})")
            spans = windows(len(ctx), max_doc, stride)
            owner = max_context_owner(spans, len(ctx))
            answer = _answer_tokens(e, offsets)
            head = [cls, *q_ids, sep]
            k = len(head)
            for w, (s, n) in enumerate(spans):
                row: dict[str, Any] = {"input_ids": head + ctx[s : s + n] + [sep],
                                       "token_type_ids": [0] * k + [1] * (n + 1)}
                if e.is_impossible is not None:
                    inside = answer is not None and s <= answer[0] and answer[1] < s + n
                    row["start_positions"] = answer[0] - s + k if inside else 0
                    row["end_positions"] = answer[1] - s + k if inside else 0
                rows.append(row)
                example_index.append(i)
                starts.append(s)
                lengths.append(n)
                positions.append(k)
                max_context.append(owner[s : s + n] == w)
        version_2 = self.version_2 if self.version_2 is not None else data.impossible > 0
        return QAFeatures(
            rows, data, np.asarray(example_index, np.int64), ["start", "end"], tok.pad_token_id,
            window_start=np.asarray(starts, np.int64), window_length=np.asarray(lengths, np.int64),
            context_position=np.asarray(positions, np.int64), max_context=max_context,
            context_of=context_of, token_offsets=token_offsets, version_2=version_2,
        )  # fmt: skip

    def collate(self, rows: list[dict[str, Any]], pad_token_id: int = 0) -> dict[str, np.ndarray]:
        """Gives input_ids, token_type_ids, attention_mask (+ start_positions, end_positions), padded."""
        return pad_rows(rows, pad_token_id)

    def decode(self, features: QAFeatures, outputs: Any, *, n_best_size: int | None = None,
               max_answer_length: int | None = None,
               null_score_diff_threshold: float | None = None) -> list[QAPrediction]:
        """Gives one answer per question from start/end logits (batches of model outputs, in feature order)."""
        n_best = n_best_size or self.n_best_size
        max_len = max_answer_length or self.max_answer_length
        threshold = self.null_score_diff_threshold if null_score_diff_threshold is None else null_score_diff_threshold
        rows = output_rows(outputs, ("start_logits", "end_logits"), features.lengths)
        n_examples = len(features.data)
        candidates: list[list[tuple[float, int, int]]] = [[] for _ in range(n_examples)]  # (score, start, end) tokens
        null = np.full(n_examples, np.inf)
        for r, (S, E) in enumerate(rows):
            i = features.example_index[r]
            null[i] = min(null[i], float(S[0]) + float(E[0]))
            n = int(features.window_length[r])
            if n == 0:
                continue
            k, s0 = int(features.context_position[r]), int(features.window_start[r])
            candidates[i] += _best_spans(S[k : k + n], E[k : k + n], features.max_context[r], n_best, max_len, s0)
        return [self._answer(features, i, candidates[i], float(null[i]), n_best, threshold)
                for i in range(n_examples)]

    def _answer(self, features: QAFeatures, i: int, spans: list[tuple[float, int, int]], null: float,
                n_best: int, threshold: float) -> QAPrediction:
        example: QAExample = features.data[i]
        offsets = features.token_offsets[features.context_of[i]]
        nbest: list[dict[str, Any]] = []
        seen: set[str] = set()
        for score, a, b in sorted(spans, key=lambda c: -c[0]):
            start, end = int(offsets[a, 0]), int(offsets[b, 1])
            text = example.context[start:end]
            if text in seen:
                continue
            seen.add(text)
            nbest.append({"text": text, "start": start, "end": end, "score": score})
            if len(nbest) == n_best:
                break
        scores = np.asarray([c["score"] for c in nbest] + ([null] if features.version_2 else []))
        if len(scores):
            p = np.exp(scores - scores.max())
            p /= p.sum()
            for c, prob in zip(nbest, p, strict=False):
                c["probability"] = float(prob)
        if not nbest:
            return QAPrediction(example, "", -1, -1, null, None, [])
        best = nbest[0]
        diff = null - best["score"] if features.version_2 else None
        if diff is not None and diff > threshold:
            return QAPrediction(example, "", -1, -1, null, diff, nbest)
        return QAPrediction(example, best["text"], best["start"], best["end"], best["score"], diff, nbest)

    def tuned_options(self, features: QAFeatures, outputs: Callable[[], Any]) -> dict[str, Any]:
        """v2 data: the null-score threshold that gives the best F1 on these (dev) questions, searched as the
        official evaluate-v2.0.py's find_best_thresh; {} for v1 data or when the threshold was fixed."""
        if not (features.version_2 and self.search_null_threshold):
            return {}
        predictions = self.decode(features, outputs())
        return {"null_score_diff_threshold": best_null_threshold(features.data, predictions)}

    def score(self, data: Dataset, predictions: Sequence[QAPrediction]) -> dict[str, float]:
        """Gives exact_match and f1 (percent): SQuAD's official ones, or CMRC 2018's for Chinese contexts."""
        golds = [e.gold_texts for e in data]
        texts = [p.text for p in predictions]
        chinese = self.language == "zh" or (self.language == "auto" and has_cjk(e.context for e in data.examples[:50]))
        if chinese:
            return cmrc_scores(golds, texts)
        return squad_scores(golds, texts, v2=data.impossible > 0)

    def prediction_json(self, prediction: QAPrediction) -> dict[str, Any]:
        e = prediction.example
        out: dict[str, Any] = {"id": e.qid, "question": e.question, "answer": prediction.text,
                               "start": prediction.start, "end": prediction.end,
                               "score": round(prediction.score, 4)}
        if prediction.null_score_diff is not None:
            out["null_score_diff"] = round(prediction.null_score_diff, 4)
        out["nbest"] = [{"text": c["text"], "probability": round(c.get("probability", 0.0), 6)}
                        for c in prediction.nbest[:5]]
        return out

    def inputs_from_texts(self, texts: Sequence[str], pairs: Sequence[str] | None = None,
                          **opts: Any) -> Dataset:
        """Gives questions (`texts`) on contexts (`pairs`, one per question), without gold answers."""
        if opts:
            raise TypeError(f"inputs_from_texts() got unexpected options {sorted(opts)}")
        if pairs is None or len(pairs) != len(texts):
            raise BertkitError(f"QA needs a context for each of the {len(texts)} questions")
        examples = [QAExample(str(i + 1), q, c, (), (), None) for i, (q, c) in enumerate(zip(texts, pairs, strict=True))]
        return Dataset(examples, ReadReport("<input>", kept=len(examples)))

    def texts_of(self, example: QAExample) -> tuple[str, str]:
        return example.question, example.context

    second = "context"

    def check_input(self, item: Any, where: str) -> None:
        """{"question": ..., "context": ...}."""
        if not (isinstance(item, dict) and set(item) == {"question", "context"}):
            raise InputError(f'{where}: a QA model takes {{"question": ..., "context": ...}}, got {json_kind(item)}')
        check_text(item["question"], f"{where}.question")
        check_text(item["context"], f"{where}.context")

    def split_inputs(self, items: Sequence[Any]) -> tuple[list[Any], list[str] | None]:
        return [i["question"] for i in items], [i["context"] for i in items]

    def show_input(self, text: str, second: str | None) -> str:
        return f"Q: {text} C: {second}"

    def show_prediction(self, prediction: dict[str, Any]) -> str:
        return f"{prediction.get('answer')!r} [{prediction.get('start')}:{prediction.get('end')}]"

    def matches(self, prediction: dict[str, Any], expected: str) -> bool:
        return str(prediction.get("answer", "")).strip() == expected

    input_schema = obj({"question": STRING, "context": STRING})
    prediction_schema = obj(
        {"id": {"type": "string"}, "question": {"type": "string"}, "answer": {"type": "string"},
         "start": {"type": "integer", "description": "character offset in the context; -1: no answer"},
         "end": {"type": "integer"}, "score": {"type": "number"},
         "nbest": {"type": "array", "items": obj({"text": {"type": "string"}, "probability": {"type": "number"}})}},
        {"null_score_diff": {"type": "number", "description": "SQuAD 2.0 models: the null score minus the best span's"}})

    def relevance(self, prediction: dict[str, Any], raw: bool = False) -> float | None:
        return None

    def reranks(self, labels: Sequence[str]) -> bool:
        return False

    def learner(self) -> None:
        """Trained by the task model's own loss."""
        return None


QA = Family("qa", QATask, frozenset({"doc_stride", "null_threshold"}), "extractive question answering",
            "question-answering")


def _answer_tokens(example: QAExample, offsets: np.ndarray) -> tuple[int, int] | None:
    """Gives the first and last context token of the example's first answer; None if unanswerable or uncovered."""
    if not example.answers or example.is_impossible:
        return None
    a = example.answers[0]
    start_char, end_char = a.start, a.start + len(a.text)
    first = int(np.searchsorted(offsets[:, 1], start_char, side="right"))  # first token ending after the start
    last = int(np.searchsorted(offsets[:, 0], end_char, side="left")) - 1  # last token starting before the end
    if first >= len(offsets) or last < first:
        return None  # the answer lies in characters no token covers (whitespace, dropped controls)
    return first, last


def _best_spans(S: np.ndarray, E: np.ndarray, max_context: np.ndarray, n_best: int, max_len: int,
                offset: int) -> list[tuple[float, int, int]]:
    """Gives the n_best best (score, start, end) spans in one window, as context-token indices + `offset`."""
    starts = np.flatnonzero(max_context)
    if len(starts) == 0:
        return []
    starts = starts[np.argsort(-S[starts], kind="stable")[:n_best]]
    ends = np.argsort(-E, kind="stable")[:n_best]
    total = S[starts][:, None] + E[ends][None, :]  # (n_best, n_best)
    width = ends[None, :] - starts[:, None]
    total = np.where((width >= 0) & (width < max_len), total, -np.inf)
    flat = np.argsort(-total, axis=None, kind="stable")[:n_best]
    a, b = np.unravel_index(flat, total.shape)
    keep = np.isfinite(total[a, b])
    return [(float(t), int(s) + offset, int(e) + offset)
            for t, s, e in zip(total[a, b][keep], starts[a[keep]], ends[b[keep]], strict=True)]


# ---- reading SQuAD files ---------------------------------------------------------------------------


def locate(context: str, text: str, start: int) -> int:
    """Gives where `text` occurs in `context`: at `start` if it does, else the nearest occurrence; -1 if none."""
    if start >= 0 and context.startswith(text, start):
        return start
    best, i = -1, context.find(text)
    while i != -1:
        if best == -1 or abs(i - start) < abs(best - start):
            best = i
        if i > start:
            break  # occurrences only get further away
        i = context.find(text, i + 1)
    return best


def inside_word(context: str, start: int, end: int) -> bool:
    """Tells whether context[start:end] cuts a Latin word or number ("gold" in "golden", "8" in "18")."""
    def glued(a: str, b: str) -> bool:
        return a.isascii() and b.isascii() and a.isalnum() and b.isalnum()

    return (start > 0 and glued(context[start - 1], context[start])) or (
        end < len(context) and glued(context[end - 1], context[end]))


def whole_word(context: str, text: str, start: int) -> int:
    """Gives the whole-word occurrence of `text` nearest `start` when the one at `start` is inside a word, else `start`."""
    if not inside_word(context, start, start + len(text)):
        return start
    best, i = start, context.find(text)
    while i != -1:
        if not inside_word(context, i, i + len(text)) and (best == start or abs(i - start) < abs(best - start)):
            best = i
        i = context.find(text, i + 1)
    return best


def read_squad(path: str | Path, *, whole_words: bool = True) -> Dataset:
    """Gives the QAExamples of a SQuAD v1.1/v2.0-format file (CMRC 2018 too).

    An answer whose offset is wrong (about 7 in CMRC 2018 dev) is moved to the occurrence of its text
    nearest the given offset: a counted fix. An answer whose text is nowhere in its context (193 in
    CMRC 2018 dev, written by annotators with answer_start -1) is a counted skip naming the question;
    its text still counts as gold for scoring, as in the official script. With `whole_words`, a Latin
    or numeric answer found inside a longer word ("gold" in "golden": the SQuAD dev file here gives
    each answer's first occurrence) moves to the nearest occurrence standing as a word, when there is
    one: a counted fix, so that training targets whole tokens. A question left with no
    answer, and not marked impossible, is a counted skip. Malformed JSON or a question without
    id/question/answers is a BertkitError naming the file and the question.
    """
    path = Path(path)
    text = read_text(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise BertkitError(f"{path} line {e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise BertkitError(f"{path}: not SQuAD-format JSON (expected an object with a 'data' list)")
    report = ReadReport(str(path))
    examples: list[QAExample] = []
    impossible = 0
    for a, article in enumerate(doc["data"]):
        for p, para in enumerate(article.get("paragraphs", [])):
            context = para.get("context")
            if not isinstance(context, str):
                raise BertkitError(f"{path}: data[{a}].paragraphs[{p}] has no 'context' string")
            for q, qa in enumerate(para.get("qas", [])):
                where = f"data[{a}].paragraphs[{p}].qas[{q}]"
                example = _squad_question(qa, context, str(article.get("title", "")), report, path, where, whole_words)
                if example is not None:
                    examples.append(example)
                    impossible += bool(example.is_impossible)
    if not examples and not report.total_skipped:
        raise BertkitError(f"{path}: holds no questions")
    report.kept = len(examples)
    return Dataset(examples, report, impossible=impossible)


def _squad_question(qa: dict[str, Any], context: str, title: str, report: ReadReport, path: Path,
                    where: str, whole_words: bool) -> QAExample | None:
    for key in ("id", "question"):
        if key not in qa:
            raise BertkitError(f"{path}: {where} has no '{key}'")
    qid = str(qa["id"])
    impossible = bool(qa.get("is_impossible", False))
    answers: list[Answer] = []
    gold = []
    for ans in qa.get("answers", []):
        if not isinstance(ans, dict) or "text" not in ans:
            raise BertkitError(f"{path}: question {qid} has an answer without 'text'")
        answer_text = str(ans["text"])
        gold.append(answer_text)
        given = int(ans.get("answer_start", -1))
        start = locate(context, answer_text, given)
        if start == -1 and answer_text.strip() and answer_text.strip() != answer_text:
            answer_text = answer_text.strip()  # stray spaces around the answer
            start = locate(context, answer_text, given)
        if start == -1 or not answer_text:
            report.skip("answer not in context", f"question {qid}")
            continue
        if start != given:
            report.fix("answer offset relocated", f"question {qid}")
        if whole_words and (moved := whole_word(context, answer_text, start)) != start:
            report.fix("answer moved out of a longer word", f"question {qid}")
            start = moved
        answers.append(Answer(answer_text, start))
    if not impossible and not answers:
        report.skip("question without an answer in its context", f"question {qid}")
        return None
    if impossible:
        answers, gold = [], []
    return QAExample(qid, str(qa["question"]), context, tuple(answers), tuple(gold), impossible, title)
