"""Baselines on the demo data (src/bertkit/data/): do the labels carry signal a simple model finds, without
being trivial? Run as `python scripts/build_demo_data.py --baselines`; reads the built files with
bertkit's own readers and needs nothing beyond numpy.

- classify: the majority class, and a bag-of-words softmax regression;
- pair: the same, with the question's words marked, so the bag cannot see the overlap; and a
  regression on word-overlap features, which can;
- qa: the context's sentence that shares the most content words with the question, as the answer;
- ner: how many dev entities training never names, and a lookup of the training names.

The build writes the scores to src/bertkit/data/baselines.json; the demo's report puts each beside its task.
"""

from __future__ import annotations

import collections
import itertools
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bertkit.corpus import split_sentences
from bertkit.schemes import entities, to_tags
from bertkit.tasks import Dataset, read_conll, read_squad, read_table
from bertkit.tasks.metrics import cmrc_scores, entity_report, squad_scores

ContentWords = Callable[[str, bool], set[str]]  # (text, zh) -> the words that count as content


def baselines(out: Path, content_words: ContentWords) -> tuple[list[str], dict[str, dict[str, dict]]]:
    """Gives report lines and, per language and task, the simple baseline's score on the dev file.

    `content_words` is the build's notion of a content word, the one that chose the pair negatives.
    """
    lines, scores = [], {}
    for lang in ("en", "zh"):
        zh = lang == "zh"
        train, dev = (read_table(out / lang / "classify" / f"{s}.tsv") for s in ("train", "dev"))
        maj, bow = _bow_accuracy([(_words(e.text, zh), e.label) for e in train],
                                 [(_words(e.text, zh), e.label) for e in dev])
        lines.append(f"{lang} classify: majority {maj:.1f}%, bag-of-words logistic regression {bow:.1f}%")
        scores[lang] = {"classify": _score("accuracy", "bag-of-words logistic regression", bow, maj)}

        train, dev = (read_table(out / lang / "pair" / f"{s}.tsv") for s in ("train", "dev"))
        maj, bow = _bow_accuracy([(_pair_words(e.text, e.pair, zh), e.label) for e in train],
                                 [(_pair_words(e.text, e.pair, zh), e.label) for e in dev])
        x_train = np.array([_overlap(e.text, e.pair, zh, content_words) for e in train], np.float32)
        x_dev = np.array([_overlap(e.text, e.pair, zh, content_words) for e in dev], np.float32)
        mu, sd = x_train.mean(0), x_train.std(0) + 1e-6
        y_train = np.array([e.label == "entailment" for e in train], int)
        y_dev = np.array([e.label == "entailment" for e in dev], int)
        pred = _logistic_regression((x_train - mu) / sd, y_train, (x_dev - mu) / sd, 2, l2=0.0, steps=500)
        overlap = 100 * float(np.mean(pred == y_dev))
        lines.append(f"{lang} pair: majority {maj:.1f}%, bag-of-words (question and sentence words, no "
                     f"interaction) {bow:.1f}%, word-overlap logistic regression {overlap:.1f}%")
        scores[lang]["pair"] = _score("accuracy", "word-overlap logistic regression", overlap, maj)

        qa = _qa_overlap(read_squad(out / lang / "qa" / "dev.json"), zh, content_words)
        lines.append(f"{lang} qa: the sentence with the most question words as the answer, F1 {qa:.1f}")
        scores[lang]["qa"] = _score("f1", "the context sentence sharing most words with the question", qa)

        train, dev = (read_conll(out / lang / "ner" / f"{s}.txt") for s in ("train", "dev"))
        line, f1 = _lexicon_f1(train, dev)
        lines.append(f"{lang} ner: {line}")
        scores[lang]["ner"] = _score("f1", "train-lexicon lookup", f1)
    return lines, scores


def _score(metric: str, name: str, score: float, majority: float | None = None) -> dict:
    return {"metric": metric, "baseline": name, "score": round(score, 1),
            **({"majority": round(majority, 1)} if majority is not None else {})}


def _qa_overlap(data: Dataset, zh: bool, content_words: ContentWords) -> float:
    """Gives the F1 (SQuAD's, or CMRC 2018's for Chinese) of answering each question with the context sentence that
    shares the most content words with it (the first of the best)."""
    answers = []
    for e in data:
        words = content_words(e.question, zh)
        sentences = split_sentences(e.context) or [e.context]
        answers.append(max(sentences, key=lambda s: len(words & content_words(s, zh))))
    golds = [e.gold_texts for e in data]
    return (cmrc_scores if zh else squad_scores)(golds, answers)["f1"]


def _words(text: str, zh: bool) -> list[str]:
    if zh:
        chars = [c for c in text if not c.isspace()]
        return chars + [a + b for a, b in itertools.pairwise(chars)]
    return re.findall(r"[a-z0-9]+", text.lower())


def _pair_words(question: str, sentence: str, zh: bool) -> list[str]:
    """Gives the question's words (marked) and the sentence's: a bag that cannot see their overlap."""
    return ["q:" + w for w in _words(question, zh)] + _words(sentence, zh)


def _overlap(question: str, sentence: str, zh: bool, content_words: ContentWords) -> list[float]:
    """Gives overlap features: shared content words, their share of the question's, sentence length."""
    q, s = content_words(question, zh), content_words(sentence, zh)
    return [len(q & s), len(q & s) / max(1, len(q)), len(s) / 50]


def _features(texts: list[list[str]], vocab: dict[str, int]) -> np.ndarray:
    """Gives log(1 + count) of each vocabulary word per text, (texts, vocab)."""
    x = np.zeros((len(texts), len(vocab)), np.float32)
    for i, words in enumerate(texts):
        for w in words:
            if w in vocab:
                x[i, vocab[w]] += 1
    return np.log1p(x)


def _logistic_regression(x_train: np.ndarray, y_train: np.ndarray, x_dev: np.ndarray, k: int,
                         l2: float = 1e-3, steps: int = 300) -> np.ndarray:
    """Gives dev predictions of a softmax regression trained full-batch with Adam (numpy only)."""
    w = np.zeros((x_train.shape[1], k), np.float32)
    b = np.zeros(k, np.float32)
    y = np.eye(k, dtype=np.float32)[y_train]
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t in range(1, steps + 1):
        z = x_train @ w + b
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        g = x_train.T @ (p - y) / len(y) + l2 * w
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        w -= 0.05 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
        b -= 0.05 * (p - y).mean(0)
    return (x_dev @ w + b).argmax(1)


def _bow_accuracy(train: list[tuple[list[str], str]], dev: list[tuple[list[str], str]]) -> tuple[float, float]:
    """Gives (majority-class accuracy, bag-of-words logistic regression accuracy) on dev, in percent."""
    labels = sorted({y for _, y in train})
    counts = collections.Counter(w for words, _ in train for w in set(words))
    vocab = {w: i for i, w in enumerate(sorted(w for w, n in counts.items() if n >= 2))}
    y_train = np.array([labels.index(y) for _, y in train])
    y_dev = np.array([labels.index(y) for _, y in dev])
    pred = _logistic_regression(_features([w for w, _ in train], vocab), y_train,
                                _features([w for w, _ in dev], vocab), len(labels))
    majority = collections.Counter(y_train.tolist()).most_common(1)[0][0]
    return 100 * float(np.mean(y_dev == majority)), 100 * float(np.mean(pred == y_dev))


def _lexicon_f1(train: Dataset, dev: Dataset) -> tuple[str, float]:
    """Gives a line on a memorizing baseline: each dev entity string seen in train gets its train type."""
    seen: dict[tuple[str, ...], collections.Counter] = collections.defaultdict(collections.Counter)
    for sent in train:
        for kind, a, b in entities(sent.tags):
            seen[sent.words[a:b]][kind] += 1
    longest = max(len(k) for k in seen)
    predicted, unseen = [], 0
    for sent in dev:
        words, found, i = sent.words, [], 0
        while i < len(words):  # the longest training name that starts here, left to right
            for size in range(min(longest, len(words) - i), 0, -1):
                if words[i : i + size] in seen:
                    found.append((seen[words[i : i + size]].most_common(1)[0][0], i, i + size))
                    i += size
                    break
            else:
                i += 1
        predicted.append(to_tags(found, len(words), "BIO"))
        unseen += sum(words[a:b] not in seen for _, a, b in entities(sent.tags))
    scores = entity_report([sent.tags for sent in dev], predicted)["overall"]
    n_gold = int(scores["support"])
    return (f"{n_gold} dev entities, {100 * unseen / n_gold:.1f}% never seen in train; train-lexicon lookup "
            f"P {scores['precision']:.1f} R {scores['recall']:.1f} F1 {scores['f1']:.1f}"), scores["f1"]
