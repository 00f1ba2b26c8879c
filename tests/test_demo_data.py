"""The demo data shipped in the package (src/bertkit/data/): licensed, small, readable, split cleanly.

Reads only the package's own files (no shared data), so it runs wherever bertkit is installed.
scripts/build_demo_data.py --check verifies that the files are what the build makes.
"""

from __future__ import annotations

import gzip
import importlib.resources
import re
from pathlib import Path

import pytest

from bertkit.tasks import get_task

DATA = Path(str(importlib.resources.files("bertkit") / "data"))
LANGS = ("en", "zh")
MAX_TOTAL_BYTES = 8 * 2**20
MAX_FILE_BYTES = 2 * 2**20

# task -> (file extension, labels by language); README.md documents the same sets
TASKS = {
    "classify": ("tsv", {
        "en": {"emma", "persuasion", "sense_and_sensibility", "father_brown", "thursday", "moby_dick"},
        "zh": {"sanguo", "shuihu", "honglou"},
    }),
    "pair": ("tsv", {"en": {"entailment", "not_entailment"}, "zh": {"entailment", "not_entailment"}}),
    "qa": ("json", {"en": set(), "zh": set()}),
    "ner": ("txt", {lang: {"O", "B-PER", "I-PER", "B-LOC", "I-LOC"} for lang in LANGS}),
}
QA_CONTEXT_CHARS = {"en": 700, "zh": 220}  # contexts fit one 256-token window with their question


def _shipped() -> set[str]:
    return {p.relative_to(DATA).as_posix() for p in DATA.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def _licences() -> dict[str, str]:
    """Gives file -> licence text from DATA_LICENSES ("File: a, b" then "License: ..." lines)."""
    out, files = {}, []
    for line in (DATA / "DATA_LICENSES").read_text(encoding="utf-8").splitlines():
        if line.startswith("File: "):
            files = [f.strip() for f in line[len("File: "):].split(",")]
        elif line.startswith("License: "):
            out.update(dict.fromkeys(files, line[len("License: "):].strip()))
    return out


@pytest.fixture(scope="module")
def read():
    """Gives a cached reader: (lang, task, split) -> Dataset read by the task's own reader."""
    cache = {}

    def get(lang: str, task: str, split: str):
        if (lang, task, split) not in cache:
            ext, _ = TASKS[task]
            cache[lang, task, split] = get_task(task).read(DATA / lang / task / f"{split}.{ext}")
        return cache[lang, task, split]

    return get


def test_every_file_is_listed_with_a_licence():
    licences = _licences()
    shipped = _shipped()
    assert shipped, f"no data in {DATA}"
    assert shipped - set(licences) == set(), "shipped but not in DATA_LICENSES"
    assert set(licences) - shipped == set(), "in DATA_LICENSES but not shipped"
    allowed = re.compile(r"Public domain|CC BY-SA 4\.0|Apache-2\.0")
    for name, licence in licences.items():
        assert allowed.search(licence), f"{name}: licence {licence!r} is not one the package may carry"
        assert not re.search(r"non-?commercial|research only|\bNC\b", licence, re.IGNORECASE), name


def test_sizes_are_small():
    sizes = {name: (DATA / name).stat().st_size for name in _shipped()}
    assert sum(sizes.values()) <= MAX_TOTAL_BYTES, f"{sum(sizes.values()):,} bytes in all"
    for name, size in sizes.items():
        assert 0 < size <= MAX_FILE_BYTES, f"{name}: {size:,} bytes"


@pytest.mark.parametrize("lang", LANGS)
def test_pretraining_text_is_utf8_prose(lang):
    files = sorted((DATA / lang / "pretrain").glob("*.txt.gz"))
    assert len(files) == 2
    for path in files:
        text = gzip.decompress(path.read_bytes()).decode("utf-8")  # raises if not UTF-8
        assert len(text) > 300_000, path
        assert "\r" not in text and "\n\n" in text, f"{path}: expected paragraphs separated by blank lines"


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("task", list(TASKS))
def test_task_files_read_cleanly(read, lang, task):
    for split in ("train", "dev"):
        data = read(lang, task, split)
        assert data.report.total_skipped == 0, data.report.summary()
        assert 300 <= len(data) <= 5_000, f"{lang}/{task}/{split}: {len(data)} examples"
    train, dev = read(lang, task, "train"), read(lang, task, "dev")
    labels = TASKS[task][1][lang]
    if task in ("classify", "pair"):
        assert {e.label for e in train} == labels
        assert {e.label for e in dev} == labels
        assert all(e.text and (e.pair if task == "pair" else e.pair is None) for e in [*train, *dev])
    elif task == "ner":
        assert train.scheme == dev.scheme == "BIO"
        assert {t for e in train for t in e.tags} == labels
        assert {t for e in dev for t in e.tags} == labels
        if lang == "zh":  # one character a line
            assert all(len(w) == 1 for e in [*train, *dev] for w in e.words)
    else:
        for e in [*train, *dev]:
            assert e.answers and not e.is_impossible
            assert len(e.context) <= QA_CONTEXT_CHARS[lang]
            assert all(e.context[a.start : a.start + len(a.text)] == a.text for a in e.answers)


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("task", list(TASKS))
def test_train_and_dev_are_disjoint(read, lang, task):
    train, dev = read(lang, task, "train"), read(lang, task, "dev")
    if task in ("classify", "pair"):  # pair splits by article: not even a question is shared
        keys = [{e.text for e in d} for d in (train, dev)]
    elif task == "qa":
        keys = [{e.context for e in d} for d in (train, dev)]
        assert not {e.qid for e in train} & {e.qid for e in dev}
    else:
        keys = [{" ".join(e.words) for e in d} for d in (train, dev)]
    assert not keys[0] & keys[1]


@pytest.mark.parametrize("lang", LANGS)
def test_ner_dev_has_names_never_seen_in_training(read, lang):
    """Dev tests names in context, not recall of the training names: many dev names are new."""
    def names(data):
        out = []
        for e in data:
            name = []
            for w, t in [*zip(e.words, e.tags, strict=True), ("", "O")]:
                if name and not t.startswith("I-"):
                    out.append(" ".join(name))
                    name = []
                if t.startswith("B-"):
                    name = [w]
                elif t.startswith("I-"):
                    name.append(w)
        return out

    seen = set(names(read(lang, "ner", "train")))
    dev = names(read(lang, "ner", "dev"))
    unseen = sum(n not in seen for n in dev) / len(dev)
    assert 0.3 <= unseen <= 0.8, f"{unseen:.0%} of dev names unseen in train"


@pytest.mark.parametrize("lang", LANGS)
def test_classify_sentences_are_held_out_of_the_pretraining_text(read, lang):
    name = "gutenberg" if lang == "en" else "novels"
    text = gzip.decompress((DATA / lang / "pretrain" / f"{name}.txt.gz").read_bytes()).decode()
    text = re.sub(r"\s+", " " if lang == "en" else "", text)
    sample = [e.text for e in read(lang, "classify", "dev")][:100]
    inside = [s for s in sample if (" ".join(s.split()) if lang == "en" else s) in text]
    assert len(inside) <= 2, inside  # a stock phrase may recur elsewhere in a book


def test_readme_documents_the_label_sets():
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    for task, (_, labels) in TASKS.items():
        for lang in LANGS:
            for label in labels[lang]:
                assert label in readme, f"README.md does not name {lang}/{task} label {label!r}"


def _distance(a: str, b: str, limit: int) -> int:
    """Levenshtein distance of two strings (characters), or limit + 1 once it is known to exceed limit."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
        if min(row) > limit:
            return limit + 1
    return row[-1]


def _seed_texts(lang: str) -> dict[str, list[str]]:
    """Every text of each template task's files (both splits): reviews, premises and hypotheses, sentences."""
    texts = {}
    for job, (task, ext) in {"sentiment": ("classify", "tsv"), "nli": ("pair", "tsv"), "entities": ("ner", "txt")}.items():
        found = []
        for split in ("train", "dev"):
            for e in get_task(task).read(DATA / lang / "seed" / job / f"{split}.{ext}"):
                if task == "ner":
                    found.append(("" if lang == "zh" else " ").join(e.words))
                else:
                    found += [e.text, *([e.pair] if e.pair else [])]
        texts[job] = found
    return texts


@pytest.mark.parametrize("lang", LANGS)
def test_the_template_tasks_hold_neither_the_walkthroughs_examples_nor_their_names(lang):
    """A model right on the walkthrough's examples has learnt the templates' pattern, not recalled the example: no
    sentence of the template tasks is within a quarter of an example's length (in edit distance) of it, and no
    name of the examples is in them."""
    from bertkit.demo.run import SEEDS

    texts = _seed_texts(lang)
    everything = [t for found in texts.values() for t in found]
    for job, text, pair, expected in SEEDS[lang]:
        examples = [text, *([pair] if pair else [])]
        if job == "entities" and lang == "en":  # the files hold words: compare the example as words too
            examples = [" ".join(words_of_conll(text))]
        for example in examples:
            limit = max(3, len(example) // 4)
            close = [t for t in everything if _distance(t, example, limit) <= limit]
            assert not close, f"{lang}: template sentences within {limit} edits of {example!r}: {close[:5]}"
        if job == "entities":
            names = [name.strip() for part in expected.split(";") for name in part.split(":", 1)[1].split(",")]
            for name in names:
                inside = [t for t in everything if name in t]
                assert not inside, f"{lang}: the example's name {name!r} is in the template tasks: {inside[:3]}"


def words_of_conll(text: str) -> list[str]:
    from bertkit.tasks import words_of

    return list(words_of(text, "conll")[0])


@pytest.mark.parametrize("lang", LANGS)
def test_the_walkthroughs_review_is_whole_and_the_sentiment_task_teaches_how_it_reads(lang):
    """The review is the walkthrough's own, whole (its praise at the end is the point: positive), and the sentiment
    task has mixed reviews labelled by how they end, so that the answer is learnable, not a coin flip."""
    from bertkit.demo.run import SEEDS

    review = {job: (text, expected) for job, text, _, expected in SEEDS[lang]}["sentiment"]
    if lang == "zh":
        assert review == ("抄手很难吃，慎点，巧手大拌菜推荐，真的不错", "positive")
    else:
        assert review[1] == "positive" and "wontons" in review[0] and "really good" in review[0]
    rows = get_task("classify").read(DATA / lang / "seed" / "sentiment" / "train.tsv")
    cues = {"zh": {"negative": "差评|难吃|恶心|凉透|扔了|吃不下|送错", "positive": "好评|推荐|很好吃|满意|赞|香"},
            "en": {"negative": "awful|never again|cold|one star|disgusting|inedible|avoid|wrong",
                   "positive": "delicious|great|five stars|happy|amazing|tasty|worth|love"}}[lang]
    for label, other in (("positive", "negative"), ("negative", "positive")):  # ends one way after the other
        mixed = [e for e in rows if e.label == label and re.search(cues[other], e.text) and re.search(cues[label], e.text)]
        assert len(mixed) >= 150, f"{lang}: {len(mixed)} {label} reviews that also hold a {other} verdict"


def test_chinese_nli_subjects_are_plural_where_the_action_takes_two():
    rows = get_task("pair").read(DATA / "zh" / "seed" / "nli" / "train.tsv")
    odd = [e.text for e in rows if re.match(r"一(个|位|名)", e.text) and "互" in e.text]
    assert not odd, odd[:5]
