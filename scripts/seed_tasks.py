"""The demo's three small template tasks, on which it answers the examples of a walkthrough of the BERT paper
where the main built-in tasks cannot hold them: a food-delivery review's sentiment, an NLI pair, and entities
with organizations (the main NER task has persons and places only). Built from the word lists in
scripts/demo_data/seed-tasks.json, bertkit's own (Apache-2.0), by a seeded hash: the same rows on every
machine. The last entries of each list (HELD_OUT) appear in dev only, so that dev asks for more than recall
of the training sentences. The examples themselves are in neither file, nor any sentence close to them, nor
their names (tests/test_demo_data.py measures it): a model right on them has learnt the templates' pattern.

Reviews are single verdicts ("the dumplings were delicious") or mixed ones, a complaint about one dish then
praise of another or the other way round, labelled by how they end: the walkthrough's review ends on praise
and is positive.

    rows = seed_rows("zh")    # {"sentiment": (train, dev), "nli": (train, dev), "entities": (train, dev)}
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from bertkit.demo.run import SEEDS as DEMO_SEEDS

LISTS = Path(__file__).resolve().parent / "demo_data" / "seed-tasks.json"
HELD_OUT = 3  # of each list, the last ones go to dev only
# The walkthrough's examples (bertkit.demo.run.SEEDS; the demo's report shows them), kept out of both files.
SEEDS = {lang: {job: (text, pair) if pair else text for job, text, pair, _ in examples if job != "qa"}
         for lang, examples in DEMO_SEEDS.items()}
PREFIXES = {"zh": ["", "这家的", "今天点的", "第二次点，", "外卖的"], "en": ["The", "Today's", "This place's", "Our", "The delivered"]}
LABELS = ("entailment", "contradiction", "neutral")


def _key(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(("seed-tasks", *parts)).encode()).digest()[:8], "big")


def _split(items: list) -> tuple[list, list]:
    return items[:-HELD_OUT], items


def sentiment(lang: str, words: dict) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(review, positive|negative) rows: a dish (with an opening) and what the eater thought; half of them mixed,
    one dish praised and another not, labelled by the verdict they end on."""
    def mixed(dishes: list[str], good: list[str], bad: list[str], salt: str, n: int) -> set[tuple[str, str]]:
        out = set()
        for i in range(n):
            k = lambda part, i=i: _key(lang, "mixed", salt, str(i), part)  # noqa: E731
            prefix = PREFIXES[lang][k("prefix") % len(PREFIXES[lang])]
            first = dishes[k("first") % len(dishes)]
            second = [d for d in dishes if d != first][k("second") % (len(dishes) - 1)]
            ends_well = k("label") % 2 == 0
            opening, closing = (bad, good) if ends_well else (good, bad)
            a, b = opening[k("a") % len(opening)], closing[k("b") % len(closing)]
            text = f"{prefix}{first}{a}，{second}{b}" if lang == "zh" else f"{prefix} {first} {a}; the {second} {b}"
            out.add((text[0].upper() + text[1:] if lang == "en" else text, "positive" if ends_well else "negative"))
        return out

    def rows(dishes: list[str], good: list[str], bad: list[str]) -> set[tuple[str, str]]:
        out = set()
        for prefix in PREFIXES[lang]:
            for dish in dishes:
                for label, phrases in (("positive", good), ("negative", bad)):
                    for phrase in phrases:
                        text = f"{prefix}{dish}{phrase}" if lang == "zh" else f"{prefix} {dish} {phrase}"
                        out.add((text[0].upper() + text[1:] if lang == "en" else text, label))
        return out

    train_dishes, all_dishes = _split(words["dishes"])
    (train_good, all_good), (train_bad, all_bad) = _split(words["good"]), _split(words["bad"])
    train = rows(train_dishes, train_good, train_bad)
    dev = rows(all_dishes, all_good, all_bad) - train
    train_mixed = mixed(train_dishes, train_good, train_bad, "train", 1000)
    dev_mixed = mixed(all_dishes, all_good, all_bad, "dev", 1000) - train_mixed
    (single_train, single_dev), (mixed_train, mixed_dev) = (_finish(train, dev, lang, "sentiment", 600, 150),
                                                            _finish(train_mixed, dev_mixed, lang, "sentiment", 600, 150))
    return _order([*single_train, *mixed_train], lang, "sentiment"), _order([*single_dev, *mixed_dev], lang, "sentiment")


def nli(lang: str, words: dict) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """(premise, hypothesis, entailment|contradiction|neutral) rows: someone doing something, and what follows,
    what cannot be, and what may or may not be."""
    def rows(subjects: list[str], actions: list[list[str]]) -> set[tuple[str, str, str]]:
        out = set()
        for subject in subjects:
            for act, *hypotheses in actions:
                for label, hypothesis in zip(LABELS, hypotheses, strict=True):
                    if lang == "zh":
                        out.add((f"{subject}{act}。", f"{subject}{hypothesis}。", label))
                    else:  # every English subject is plural: the phrases are written for one
                        out.add((f"{subject} {act}.", f"{subject} {hypothesis}.", label))
        return out

    train_subjects, all_subjects = _split(words["subjects"])
    train_actions, all_actions = _split(words["actions"])
    train = rows(train_subjects, train_actions)
    dev = rows(all_subjects, all_actions) - train
    return _finish(train, dev, lang, "nli", 1200, 300)


def entities(lang: str, words: dict) -> tuple[list[tuple[list[str], list[str]]], list[tuple[list[str], list[str]]]]:
    """Sentences of templates filled with persons, organizations and places, tagged BIO (Chinese by character)."""
    from bertkit.tasks import words_of

    lists = {"PER": _split(words["people"]), "ORG": _split(words["orgs"]), "LOC": _split(words["places"])}

    def sentence(template: str, held: bool, salt: str) -> tuple[list[str], list[str]]:
        words_, tags = [], []
        parts = re.split(r"(\{PER\}|\{ORG\}|\{LOC\})", template)
        for k, part in enumerate(parts):
            if part in ("{PER}", "{ORG}", "{LOC}"):
                kind = part[1:-1]
                pool = lists[kind][1] if held else lists[kind][0]
                name = pool[_key(salt, str(k)) % len(pool)]
                if name.startswith("the "):  # "the national team": the article is no part of the name
                    words_, tags, name = [*words_, "the"], [*tags, "O"], name[4:]
                pieces = list(name) if lang == "zh" else list(words_of(name, "conll")[0])
                words_ += pieces
                tags += [f"B-{kind}"] + [f"I-{kind}"] * (len(pieces) - 1)
            elif part.strip():
                pieces = list(part) if lang == "zh" else list(words_of(part, "conll")[0])
                words_ += pieces
                tags += ["O"] * len(pieces)
        return words_, tags

    seed = tuple(words_of(SEEDS[lang]["entities"], "chars" if lang == "zh" else "conll")[0])
    train, dev = set(), set()
    for i in range(4000):
        template = words["templates"][_key(lang, "template", str(i)) % len(words["templates"])]
        held = _key(lang, "held", str(i)) % 5 == 0
        found, tags = sentence(template, held, f"{lang}-{i}")
        if tuple(found) != seed:
            (dev if held else train).add((tuple(found), tuple(tags)))
    train_rows, dev_rows = _finish(train, dev - train, lang, "entities", 1000, 250)
    return [(list(w), list(t)) for w, t in train_rows], [(list(w), list(t)) for w, t in dev_rows]


def _finish(train: set, dev: set, lang: str, task: str, n_train: int, n_dev: int) -> tuple[list, list]:
    """The rows in a seeded order, at most n of each split; the seed example never among them."""
    seed = SEEDS[lang][task]

    def order(rows: set) -> list:
        return _order([r for r in rows if r[0] != seed and r[:2] != seed], lang, task)

    return order(train)[:n_train], order(dev)[:n_dev]


def _order(rows: list, lang: str, task: str) -> list:
    """The rows in an order fixed by their content (a seeded hash), whatever order they came in."""
    return sorted(rows, key=lambda r: _key(lang, task, json.dumps(r, ensure_ascii=False)))


def seed_rows(lang: str) -> dict[str, tuple[list, list]]:
    """The three tasks' (train, dev) rows of a language."""
    words = json.loads(LISTS.read_text(encoding="utf-8"))[lang]
    return {"sentiment": sentiment(lang, words), "nli": nli(lang, words), "entities": entities(lang, words)}


if __name__ == "__main__":
    for lang in ("en", "zh"):
        for name, (train, dev) in seed_rows(lang).items():
            print(lang, name, len(train), len(dev), train[0], dev[0])
