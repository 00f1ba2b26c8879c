"""Evaluation metrics in numpy and plain Python (no sklearn or scipy at run time), all in percent.

- classification: accuracy, binary F1, macro F1, Matthews correlation (multi-class as sklearn's);
- regression: Pearson and Spearman correlation (ties get average ranks, as scipy's);
- SQuAD: exact match and token F1 with the official v1.1 / v2.0 normalization;
- CMRC 2018: its official character-level scores (mixed segmentation, longest common substring);
- NER: entity precision / recall / F1 with conlleval's chunk rules (seqeval's default mode), or
  well-formed chunks only (seqeval's strict mode), overall and per entity type.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np

from ..schemes import entities, strict_entities

# ---------------------------------------------------------------------------------------------------
# Classification and regression


def accuracy(gold: Sequence[str], pred: Sequence[str]) -> float:
    return 100.0 * float(np.mean(np.asarray(gold, dtype=object) == np.asarray(pred, dtype=object))) if gold else 0.0


def f1_binary(gold: Sequence[str], pred: Sequence[str], positive: str) -> float:
    """Gives F1 of the `positive` class (0 when it is never predicted nor gold, as sklearn's zero_division=0)."""
    g = np.asarray(gold, dtype=object) == positive
    p = np.asarray(pred, dtype=object) == positive
    tp = int(np.sum(g & p))
    denom = int(np.sum(g)) + int(np.sum(p))
    return 100.0 * 2 * tp / denom if denom else 0.0


def f1_macro(gold: Sequence[str], pred: Sequence[str], labels: Sequence[str]) -> float:
    """Gives the unweighted mean of each label's F1."""
    return float(np.mean([f1_binary(gold, pred, label) for label in labels])) if labels else 0.0


def matthews(gold: Sequence[str], pred: Sequence[str]) -> float:
    """Gives the Matthews correlation coefficient, multi-class by Gorodkin's R_K (sklearn's formula)."""
    labels = sorted(set(gold) | set(pred))
    index = {label: i for i, label in enumerate(labels)}
    C = np.zeros((len(labels), len(labels)), dtype=np.float64)
    np.add.at(C, ([index[x] for x in gold], [index[x] for x in pred]), 1)
    t, p = C.sum(1), C.sum(0)  # true and predicted counts per class
    n, correct = C.sum(), np.trace(C)
    cov_ytyp = correct * n - t @ p
    cov_ypyp = n * n - p @ p
    cov_ytyt = n * n - t @ t
    denom = cov_ytyt * cov_ypyp
    return 100.0 * float(cov_ytyp / np.sqrt(denom)) if denom > 0 else 0.0


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    a, b = np.asarray(x, np.float64), np.asarray(y, np.float64)
    a, b = a - a.mean(), b - b.mean()
    denom = np.sqrt((a @ a) * (b @ b))
    return 100.0 * float(a @ b / denom) if denom > 0 else 0.0


def ranks(x: Sequence[float]) -> np.ndarray:
    """Gives 1-based ranks, tied values sharing the average of their ranks (scipy's rankdata 'average')."""
    a = np.asarray(x, np.float64)
    order = np.argsort(a, kind="stable")
    sorted_a = a[order]
    first = np.r_[True, sorted_a[1:] != sorted_a[:-1]]  # (n,) starts of tie groups
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    ends = np.r_[starts[1:], len(a)]
    avg = (starts + ends + 1) / 2.0  # mean of ranks starts+1 .. ends
    out = np.empty(len(a))
    out[order] = avg[group]
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    return pearson(ranks(x), ranks(y))


def positive_label(labels: Sequence[str]) -> str:
    """Gives the class binary F1 is about: "1" or "positive" when present, else the second label."""
    for name in ("1", "positive", "pos", "true", "yes"):
        if name in labels:
            return name
    return labels[1]


def classification_scores(gold: Sequence[str], pred: Sequence[str], labels: Sequence[str]) -> dict[str, float]:
    """Gives accuracy, Matthews correlation, and F1: of the positive class when binary, macro otherwise."""
    scores = {"accuracy": accuracy(gold, pred), "mcc": matthews(gold, pred)}
    if len(labels) == 2:
        scores["f1"] = f1_binary(gold, pred, positive_label(labels))
    else:
        scores["f1"] = f1_macro(gold, pred, labels)
    return scores


def multilabel_scores(gold: Sequence[frozenset[str]], pred: Sequence[frozenset[str]], labels: Sequence[str]) -> dict[str, float]:
    """Gives micro-F1 (over every (example, label) decision), macro-F1 (the mean of every label's F1, 0 for a label
    neither gold nor predicted, as scikit-learn's default) and subset accuracy (the whole set right), in percent."""
    tp = {label: 0 for label in labels}
    fp, fn = dict(tp), dict(tp)
    for g, p in zip(gold, pred, strict=True):
        for label in p & g:
            tp[label] += 1
        for label in p - g:
            fp[label] += 1
        for label in g - p:
            fn[label] += 1

    def f1(t: int, f_p: int, f_n: int) -> float:
        return 100.0 * 2 * t / (2 * t + f_p + f_n) if t + f_p + f_n else 0.0

    return {
        "micro_f1": f1(sum(tp.values()), sum(fp.values()), sum(fn.values())),
        "macro_f1": float(np.mean([f1(tp[x], fp[x], fn[x]) for x in labels])) if labels else 0.0,
        "subset_accuracy": 100.0 * float(np.mean([g == p for g, p in zip(gold, pred, strict=True)])) if gold else 0.0,
    }


def regression_scores(gold: Sequence[float], pred: Sequence[float]) -> dict[str, float]:
    """Gives Pearson and Spearman correlation (percent), their mean, and the mean squared error."""
    p, s = pearson(gold, pred), spearman(gold, pred)
    mse = float(np.mean((np.asarray(gold, np.float64) - np.asarray(pred, np.float64)) ** 2)) if gold else 0.0
    return {"pearson": p, "spearman": s, "corr": (p + s) / 2, "mse": mse}


# ---------------------------------------------------------------------------------------------------
# SQuAD (official evaluate-v1.1.py / evaluate-v2.0.py semantics)

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def squad_normalize(s: str) -> str:
    """Lowercases, drops ASCII punctuation and the articles a/an/the, and collapses whitespace."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def squad_f1(pred: str, gold: str, v2: bool = False) -> float:
    """Gives the token-overlap F1 (0-1); v2: two empty answers agree (1), one empty one does not (0)."""
    p, g = squad_normalize(pred).split(), squad_normalize(gold).split()
    if v2 and (not p or not g):
        return float(p == g)
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def squad_scores(golds: Sequence[Sequence[str]], preds: Sequence[str], v2: bool = False) -> dict[str, float]:
    """Gives exact_match and f1 (percent), each the best over a question's gold answers, averaged.

    v2: gold answers that normalize to "" are dropped and a question with none has gold [""]; also
    gives the scores on answerable (has_ans_*) and unanswerable (no_ans_*) questions.
    """
    em, f1, has = [], [], []
    for gold, pred in zip(golds, preds, strict=True):
        if v2:
            gold = [g for g in gold if squad_normalize(g)] or [""]
        has.append(gold != [""])
        em.append(max(float(squad_normalize(pred) == squad_normalize(g)) for g in gold) if gold else 0.0)
        f1.append(max(squad_f1(pred, g, v2) for g in gold) if gold else 0.0)
    out = {"exact_match": _pct(em), "f1": _pct(f1)}
    if v2:
        mask = np.asarray(has, bool)
        for name, keep in (("has_ans", mask), ("no_ans", ~mask)):
            out[f"{name}_exact_match"] = _pct(np.asarray(em)[keep])
            out[f"{name}_f1"] = _pct(np.asarray(f1)[keep])
    return out


def _pct(values: Sequence[float] | np.ndarray) -> float:
    return 100.0 * float(np.mean(values)) if len(values) else 0.0


# ---------------------------------------------------------------------------------------------------
# CMRC 2018 (the official cmrc2018_evaluate.py semantics)

# The official punctuation list. It also names "……", which never matches since it is compared with
# one character at a time: a lone "…" is kept, as there.
_CMRC_PUNCT = set("-:_*^/\\~`+=，。：？！“”；’《》·、「」（）－～『』")
_CJK_CHAR = re.compile(r"[\u4e00-\u9fa5]")  # the official script's range (not bertkit.text's): its scores
# Stands in for nltk.word_tokenize on the non-Chinese runs: words, numbers with inner . or , and
# single punctuation marks. nltk's extra splits (e.g. "don't" -> "do", "n't") are not reproduced.
_WORD = re.compile(r"\w+(?:[.,]\w+)*|[^\w\s]")


def cmrc_segments(s: str, drop_punct: bool) -> list[str]:
    """Gives the official mixed segmentation: each Chinese character alone, other runs split into words."""
    out: list[str] = []
    run = []
    for ch in s.lower().strip():
        if drop_punct and ch in _CMRC_PUNCT:
            continue
        if _CJK_CHAR.match(ch) or ch in _CMRC_PUNCT:
            if run:
                out += _WORD.findall("".join(run))
                run = []
            out.append(ch)
        else:
            run.append(ch)
    if run:
        out += _WORD.findall("".join(run))
    return out


def cmrc_strip(s: str) -> str:
    """Gives the official EM normalization: lowercased, stripped, without the official punctuation."""
    return "".join(ch for ch in s.lower().strip() if ch not in _CMRC_PUNCT)


def longest_common_substring(a: Sequence[str], b: Sequence[str]) -> int:
    """Gives the length of the longest run of segments that `a` and `b` share, contiguous in both."""
    best, prev = 0, [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                cur[j + 1] = prev[j] + 1
                best = max(best, cur[j + 1])
        prev = cur
    return best


def cmrc_f1(pred: str, gold: str) -> float:
    p, g = cmrc_segments(pred, True), cmrc_segments(gold, True)
    common = longest_common_substring(g, p)
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def cmrc_scores(golds: Sequence[Sequence[str]], preds: Sequence[str | None]) -> dict[str, float]:
    """Gives the official f1, exact_match and their average (percent) over all questions.

    A question without a prediction (None) scores 0 and still counts, as in the official script.
    """
    f1, em = [], []
    for gold, pred in zip(golds, preds, strict=True):
        if pred is None or not gold:
            f1.append(0.0)
            em.append(0.0)
            continue
        f1.append(max(cmrc_f1(pred, g) for g in gold))
        em.append(float(any(cmrc_strip(g) == cmrc_strip(pred) for g in gold)))
    out = {"f1": _pct(f1), "exact_match": _pct(em)}
    out["average"] = (out["f1"] + out["exact_match"]) / 2
    return out


# ---------------------------------------------------------------------------------------------------
# NER entities


def entity_report(
    gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]], strict_scheme: str | None = None
) -> dict[str, dict[str, float]]:
    """Gives precision, recall, f1 (percent) and support, micro-averaged ("overall") and per entity type.

    Chunks are read by conlleval's rules (seqeval's default); with `strict_scheme` ("BIO" or "BIOES")
    only chunks well formed in that scheme count, as in seqeval's strict mode.
    """
    true: set[tuple[int, str, int, int]] = set()
    found: set[tuple[int, str, int, int]] = set()
    for i, (g, p) in enumerate(zip(gold, pred, strict=True)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted")
        extract = entities if strict_scheme is None else (lambda t: strict_entities(t, strict_scheme))
        true.update((i, *e) for e in extract(g))
        found.update((i, *e) for e in extract(p))
    report = {"overall": _prf(true, found)}
    for kind in sorted({e[1] for e in true | found}):
        report[kind] = _prf({e for e in true if e[1] == kind}, {e for e in found if e[1] == kind})
    return report


def _prf(true: set, found: set) -> dict[str, float]:
    hit = len(true & found)
    precision = 100.0 * hit / len(found) if found else 0.0
    recall = 100.0 * hit / len(true) if true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "support": float(len(true))}


def entity_scores(
    gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]], strict_scheme: str | None = None
) -> dict[str, float]:
    """Gives `entity_report` flat: precision, recall, f1, then "f1/PER", "precision/PER", ... per type."""
    report = entity_report(gold, pred, strict_scheme)
    flat = {k: v for k, v in report["overall"].items() if k != "support"}
    for kind, scores in report.items():
        if kind != "overall":
            flat.update({f"{name}/{kind}": value for name, value in scores.items()})
    return flat
