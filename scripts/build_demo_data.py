"""Builds the small data that ships inside bertkit for `bertkit demo` (src/bertkit/data/), deterministically.

    python scripts/build_demo_data.py            # (re)write src/bertkit/data/
    python scripts/build_demo_data.py --check    # exit 1 unless the files there are what this would write
    python scripts/build_demo_data.py --baselines  # simple-model scores of those files (demo_baselines.py)

Inputs: the shared data folder (`--shared`, default ../shared/data beside the repository), jieba
0.42.1 from PyPI (`pip install jieba==0.42.1`), used only to screen Chinese NER sentences, and the
hand-made files in scripts/demo_data/. Every choice below is a fixed rule or a hash of the text with a
fixed seed, so two runs give the same bytes (the .gz files are compared after decompression, since
zlib builds may compress differently).

What is built, per language (en, zh):

| folder    | task                                             | from                                              |
|-----------|--------------------------------------------------|---------------------------------------------------|
| pretrain/ | pre-training text (.txt.gz)                      | Gutenberg books / Chinese novels + Wikipedia text |
| classify/ | which book (en, 6) / novel (zh, 3) a sentence is | passages the pre-training text leaves out         |
| pair/     | QNLI-style: does the sentence answer the question | SQuAD v1.1 dev / CMRC 2018                       |
| qa/       | extractive QA, contexts cut to a short prefix    | SQuAD v1.1 dev / CMRC 2018                        |
| ner/      | PER and LOC, silver labels from hand-made lists  | passages the pre-training text leaves out         |

Each book or novel is cut into blocks of about 10,000 characters; every fifth block is held out of the
pre-training text and the classify and NER sentences come only from held-out blocks, so that fine-tuning
never sees a sentence the model was pre-trained on. QA and pair split SQuAD by article and CMRC by
paragraph; the pre-training Wikipedia text holds only the training side. DATA_LICENSES and README.md
are written from the same numbers.

The hand-made inputs are plain UTF-8 text in scripts/demo_data/, so that a change to a name or a
sentence of the licence is a one-line diff that needs no Python:

- gazetteers-en.tsv (written for bertkit from reading the books) and gazetteers-zh.tsv (reviewed by
  hand from jieba's proposals): the NER name lists, one name a line as `book<TAB>kind<TAB>name`, kind
  PER, LOC, SKIP or O. One name a line, not a list a line, so that a diff names the name that changed
  and `grep` finds a name with its book and kind; names hold spaces but never tabs.
- en-titles.txt, en-not-entities.txt, en-stopwords.txt: English word lists, one word a line.
- DATA_LICENSES.template and README.template.md: the text of those two files, with `$name`
  placeholders (string.Template) that the build fills with its numbers.

Lines starting with # (and blank lines) in the lists, and a leading <!-- ... --> in the templates,
are comments that say what each file is.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import hashlib
import io
import itertools
import json
import re
import sys
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import TypeVar

from demo_baselines import baselines  # beside this script

from bertkit.schemes import entities
from bertkit.tasks.qa import locate, whole_word

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "src" / "bertkit" / "data"
DEFAULT_SHARED = REPO.parent / "shared" / "data"
HAND_MADE = Path(__file__).resolve().parent / "demo_data"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from seed_tasks import seed_rows  # noqa: E402  (scripts/ is not a package)

SEED = "bertkit-demo-v1"
JIEBA_VERSION = "0.42.1"

BLOCK_CHARS = 10_000  # a chapter-sized piece of a book
HELD_OUT = 4  # block i is held out for the tasks when i % 5 == HELD_OUT

# ---------------------------------------------------------------------------------------------------
# Sources

GUTENBERG = {  # label -> (file, title line); all six are clean UTF-8 (chesterton-ball, shakespeare-caesar are not)
    "emma": ("austen-emma.txt", "Emma by Jane Austen (1816)"),
    "persuasion": ("austen-persuasion.txt", "Persuasion by Jane Austen (1818)"),
    "sense_and_sensibility": ("austen-sense.txt", "Sense and Sensibility by Jane Austen (1811)"),
    "father_brown": ("chesterton-brown.txt", "The Wisdom of Father Brown by G. K. Chesterton (1914)"),
    "thursday": ("chesterton-thursday.txt", "The Man Who Was Thursday by G. K. Chesterton (1908)"),
    "moby_dick": ("melville-moby_dick.txt", "Moby Dick by Herman Melville (1851)"),
}
# 西游记 is left out: the shared copy has lost every comma (，) of the novel.
NOVELS = {"sanguo": "三国演义", "shuihu": "水浒传", "honglou": "红楼梦"}
ZH_PRETRAIN_BLOCKS = (0, 1)  # of every five blocks of a novel: 40% of the text, to keep the package small

# Words that mark a sentence unfit to show in a demo (the 1850-1914 books use racial slurs).
EN_BLOCKLIST = re.compile(r"\bnigger|\bnegro", re.IGNORECASE)

SIZES = {  # (train, dev) per task; classify is per class
    "classify_en": (330, 70),
    "classify_zh": (660, 140),
    "pair": (2000, 400),
    "qa": (1500, 400),
    "ner_en": (1800, 400),
    "ner_zh": (2000, 400),
}
NER_EMPTY_KEPT = 0.3  # sentences without an entity kept, so that O is learnt without swamping the names
NER_HELD_NAMES = 0.2  # share of names (entity strings) that occur in NER dev only
NER_DEV_SHARE = 0.1  # share of the other sentences that go to dev too
QA_CONTEXT_CHARS = {"en": 700, "zh": 220}  # a context and its question fit one 256-token window


# ---------------------------------------------------------------------------------------------------
# Hand-made inputs (scripts/demo_data/)


def _lines(name: str) -> Iterable[tuple[int, str]]:
    for n, line in enumerate((HAND_MADE / name).read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip() and not line.startswith("#"):
            yield n, line


def word_list(name: str) -> frozenset[str]:
    """Gives the words of a word list: one a line."""
    return frozenset(line.strip() for _, line in _lines(name))


GAZETTEER_KINDS = ("SKIP", "O", "LOC", "PER")  # where two names match alike, the later kind wins


def gazetteers(file: str, books: Collection[str]) -> dict[str, dict[str, list[str]]]:
    """Gives book -> kind -> names of a gazetteer file (`book<TAB>kind<TAB>name` lines)."""
    out: dict[str, dict[str, list[str]]] = {}
    for n, line in _lines(file):
        cells = line.split("\t")
        if not (len(cells) == 3 and cells[0] in books and cells[1] in GAZETTEER_KINDS and cells[2].strip()):
            raise SystemExit(f"{HAND_MADE / file} line {n}: expected book<TAB>kind<TAB>name, book one of "
                             f"{', '.join(books)}, kind one of {', '.join(GAZETTEER_KINDS)}")
        book, kind, name = cells
        out.setdefault(book, {}).setdefault(kind, []).append(name)
    return out


K = TypeVar("K")


def phrases_of(gazetteer: dict[str, list[str]], key: Callable[[str], K]) -> dict[K, str]:
    """Gives each name of a book's gazetteer, as `key` makes it, -> its kind."""
    return {key(name): kind for kind in GAZETTEER_KINDS for name in gazetteer.get(kind, [])}


def template_text(name: str) -> str:
    """Gives the text of a template, its leading <!-- comment --> dropped."""
    text = (HAND_MADE / name).read_text(encoding="utf-8")
    return text.split("-->\n", 1)[1] if text.startswith("<!--") else text


# ---------------------------------------------------------------------------------------------------
# Deterministic order: a keyed hash, the same on every machine and Python version


def _hash(*parts: str) -> int:
    return int.from_bytes(hashlib.blake2b("\0".join((SEED, *parts)).encode(), digest_size=8).digest(), "big")


def shuffled(items: Iterable, salt: str, key: Callable[[object], str] = str) -> list:
    """Gives `items` in an order fixed by a hash of each item's key (ties broken by the key)."""
    return sorted(items, key=lambda x: (_hash(salt, key(x)), key(x)))


def coin(salt: str, text: str) -> float:
    """Gives a number in [0, 1) fixed by `text`: a seeded coin flip that does not depend on order."""
    return _hash(salt, text) / 2**64


# ---------------------------------------------------------------------------------------------------
# Text: paragraphs, blocks, sentences


def paragraphs(text: str) -> list[str]:
    """Gives the blank-line-separated paragraphs of a text, each with its lines as they were."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [p.strip("\n") for p in re.split(r"\n[ \t]*\n", text) if p.strip()]


def blocks(paras: Sequence[str]) -> list[list[str]]:
    """Gives consecutive runs of paragraphs of at least BLOCK_CHARS characters (the last may be shorter)."""
    out: list[list[str]] = [[]]
    size = 0
    for p in paras:
        out[-1].append(p)
        size += len(p)
        if size >= BLOCK_CHARS:
            out.append([])
            size = 0
    return [b for b in out if b]


EN_ABBREVIATIONS = {"Mr", "Mrs", "Dr", "St", "Messrs", "Mme", "Mlle", "Col", "Capt", "Rev", "Prof", "viz", "etc"}
_EN_END = re.compile(r"[.!?]+[\"”’')\]]*\s+")
_EN_NEXT = re.compile(r"[\"“‘'(\[]*[A-Z0-9]")


def en_sentence_spans(text: str) -> list[tuple[int, int]]:
    """Gives (start, end) of each sentence of English prose: a split after . ! ? before a capital."""
    spans, start = [], 0
    for m in _EN_END.finditer(text):
        words = text[start : m.start()].split()
        last = words[-1] if words else ""
        if text[m.start()] == "." and (last in EN_ABBREVIATIONS or re.fullmatch(r"[A-Z]", last)):
            continue  # "Mr. Knightley", "G. K. Chesterton"
        if not _EN_NEXT.match(text, m.end()):
            continue
        spans.append((start, m.end()))
        start = m.end()
    if text[start:].strip():
        spans.append((start, len(text)))
    return [(a, b - (len(text[a:b]) - len(text[a:b].rstrip()))) for a, b in spans]


def en_clean(paragraph: str) -> str:
    """Gives a paragraph on one line: Gutenberg's _italics_ marks dropped, runs of spaces made one."""
    return " ".join(paragraph.replace("_", "").split())


def en_sentences(paragraph: str) -> list[str]:
    text = en_clean(paragraph)
    return [text[a:b] for a, b in en_sentence_spans(text)]


# Chinese: the novels mix half-width and full-width punctuation, ASCII quotes and a few traditional
# forms, each novel in its own way; left alone, a classifier would learn the typography, not the
# language. Everything is mapped to one convention first.
_ZH_MAP = str.maketrans({
    ",": "，", "?": "？", "!": "！", ":": "：", ";": "；", "．": "。", ".": "。", "∶": "：",
    "「": "“", "」": "”", "『": "‘", "』": "’", "－": "—", "後": "后", "於": "于", "麽": "么",
})  # fmt: skip
# The characters a clean sentence of the novels is made of; narrower than bertkit.text's CJK ranges on
# purpose (no compatibility or supplementary ideographs), since garbled bytes decode to those too.
_ZH_OK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff“”‘’，。！？：；、《》（）—…·0-9]+")
_ZH_END = re.compile(r"[。！？]+[”’]*")
_ZH_CHAPTER = re.compile(r"第[一二三四五六七八九十百零〇]+回")


def zh_normalize(line: str) -> str:
    """Gives a line of a novel with spaces removed and punctuation in one (full-width) convention."""
    out, double_open, single_open = [], False, False
    for ch in "".join(line.split()):
        if ch == '"':  # ASCII double quotes alternate open/close within a line
            out.append("”" if double_open else "“")
            double_open = not double_open
        elif ch == "`":  # 红楼梦 writes inner quotes as `...-
            out.append("‘")
            single_open = True
        elif ch == "-":
            out.append("’" if single_open else "—")
            single_open = False
        else:
            out.append(ch)
    return "".join(out).translate(_ZH_MAP)


def zh_sentence_spans(text: str) -> list[tuple[int, int]]:
    """Gives (start, end) of each sentence of Chinese text: a split after 。！？ and any closing quotes."""
    spans, start = [], 0
    for m in _ZH_END.finditer(text):
        spans.append((start, m.end()))
        start = m.end()
    if text[start:].strip():
        spans.append((start, len(text)))
    return spans


def sentence_spans(text: str, zh: bool) -> list[tuple[int, int]]:
    return zh_sentence_spans(text) if zh else en_sentence_spans(text)


def zh_sentences(line: str) -> list[str]:
    return [line[a:b] for a, b in zh_sentence_spans(line)]


def zh_clean_paragraphs(text: str) -> list[str]:
    """Gives a novel's paragraphs (one a line), normalized, without sentences that hold garbled bytes.

    The shared copies carry mojibake (Cyrillic, kana, box drawing) and editors' notes in 【】 or □;
    a sentence with any character outside CJK, Chinese punctuation and digits is dropped.
    """
    out = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if _ZH_CHAPTER.match(line.strip()) and _ZH_OK.fullmatch("".join(line.split())):
            out.append(" ".join(line.split()))  # 第一回 宴桃园豪杰三结义 斩黄巾英雄首立功
            continue
        kept = [s for s in zh_sentences(zh_normalize(line)) if _ZH_OK.fullmatch(s)]
        if kept:
            out.append("".join(kept))
    return out


# ---------------------------------------------------------------------------------------------------
# Sources read once


@dataclass
class Book:
    """A book or novel cut into blocks: the pre-training side and the held-out side, as paragraphs."""

    label: str
    title: str
    pretrain: list[list[str]]  # runs of consecutive paragraphs (a held-out block ends a run)
    held_out: list[str]


def _split_blocks(label: str, title: str, paras: list[str], keep: Callable[[int], bool]) -> Book:
    runs: list[list[str]] = []
    held: list[str] = []
    previous = -2
    for i, block in enumerate(blocks(paras)):
        if i % 5 == HELD_OUT:
            held.extend(block)
        elif keep(i % 5):
            if previous != i - 1:
                runs.append([])
            runs[-1].extend(block)
            previous = i
    return Book(label, title, runs, held)


def read_gutenberg(shared: Path) -> list[Book]:
    books = []
    for label, (name, title) in GUTENBERG.items():
        text = (shared / "pretrain" / "en" / "gutenberg" / name).read_text(encoding="utf-8")
        paras = paragraphs(text)[1:]  # the first line is NLTK's "[Title by Author Year]"
        books.append(_split_blocks(label, title, paras, lambda _: True))
    return books


def read_novels(shared: Path) -> list[Book]:
    books = []
    for label, name in NOVELS.items():
        text = (shared / "pretrain" / "zh" / f"{name}.txt").read_text(encoding="utf-8")
        paras = zh_clean_paragraphs(text)[1:]  # the first line is the title
        books.append(_split_blocks(label, name, paras, lambda k: k in ZH_PRETRAIN_BLOCKS))
    return books


def read_squad(shared: Path) -> tuple[list[dict], list[dict]]:
    """Gives SQuAD v1.1 dev's articles split as DATA.md says: the first 38 for training, the last 10 for dev."""
    data = json.loads((shared / "squad_v1.1" / "dev-v1.1.json").read_text(encoding="utf-8"))["data"]
    return data[:38], data[38:]


def read_cmrc(shared: Path) -> tuple[list[dict], list[dict]]:
    """Gives CMRC 2018's articles (dev and trial, one paragraph each) split by a hash: about 1/5 dev."""
    articles = []
    for name in ("trial.json", "dev.json"):
        articles += json.loads((shared / "cmrc2018" / name).read_text(encoding="utf-8"))["data"]
    dev = [a for a in articles if coin("cmrc-split", a["id"]) < 0.2]
    train = [a for a in articles if coin("cmrc-split", a["id"]) >= 0.2]
    return train, dev


# ---------------------------------------------------------------------------------------------------
# Pre-training text


def pretrain_books(books: list[Book]) -> str:
    """Gives the books' pre-training runs, each opened by the book's title line (a document boundary)."""
    return "\n\n".join("\n\n".join([book.title, *run]) for book in books for run in book.pretrain) + "\n"


def pretrain_wikipedia(articles: list[dict]) -> str:
    """Gives the articles' paragraphs as prose, each article opened by its title (a heading line)."""
    parts = []
    for article in articles:
        paras = [" ".join(p["context"].split()) for p in article["paragraphs"]]
        parts.append("\n\n".join([article["title"].replace("_", " "), *paras]))
    return "\n\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------------------
# classify: which book / novel a sentence comes from


def classify_rows(books: list[Book], zh: bool) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Gives (train, dev) rows of (sentence, label): a fixed number of held-out sentences per book."""
    n_train, n_dev = SIZES["classify_zh" if zh else "classify_en"]
    train, dev = [], []
    for book in books:
        if zh:
            sentences = [s for p in book.held_out for s in zh_sentences(p)]
            fit = [s for s in sentences if 10 <= len(s) <= 50 and not _ZH_CHAPTER.match(s) and " " not in s]
        else:
            sentences = [s for p in book.held_out for s in en_sentences(p)]
            fit = [s for s in sentences
                   if 8 <= len(s.split()) <= 40 and re.search("[a-z]", s) and not EN_BLOCKLIST.search(s)]
        picked = shuffled(set(fit), f"classify-{book.label}")
        if len(picked) < n_train + n_dev:
            raise SystemExit(f"{book.label}: {len(picked)} sentences, {n_train + n_dev} needed")
        dev += [(s, book.label) for s in picked[:n_dev]]
        train += [(s, book.label) for s in picked[n_dev : n_dev + n_train]]
    return shuffled(train, "classify-order", key=lambda r: r[0]), shuffled(dev, "classify-order", key=lambda r: r[0])


# ---------------------------------------------------------------------------------------------------
# pair: QNLI-style (question, sentence of its paragraph) -> entailment / not_entailment

EN_STOPWORDS = word_list("en-stopwords.txt")


def content_words(text: str, zh: bool) -> set[str]:
    """Gives the words of a text that count as shared with another: no stopwords (EN), bigrams (ZH)."""
    if zh:  # bigrams of the common ideographs (U+4E00-9FFF, not all of bertkit.text's) stand in for words
        chars = [c for c in text if "\u4e00" <= c <= "\u9fff"]
        return {a + b for a, b in itertools.pairwise(chars)}
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in EN_STOPWORDS}


def pair_rows(articles: list[dict], zh: bool, salt: str) -> list[tuple[str, str, str]]:
    """Gives (question, sentence, label) rows, one per question, half of each label.

    As GLUE's QNLI: the positive sentence holds the question's (first) answer span; a negative is another
    sentence of the same paragraph that holds no gold answer text yet shares a content word (EN) or a
    character bigram (ZH) with the question, so that word overlap alone does not decide the label.
    """
    positives, negatives = [], []
    for article in articles:
        for para in article["paragraphs"]:
            context = para["context"]
            spans = sentence_spans(context, zh)
            for qa in para["qas"]:
                question = " ".join(qa["question"].split())
                answers = [a for a in qa["answers"] if a["text"].strip()]
                if not answers or not question:
                    continue
                text = answers[0]["text"].strip()
                start = answer_start(context, text, answers[0]["answer_start"])
                if start < 0:
                    continue
                hit = [i for i, (a, b) in enumerate(spans) if a <= start and start + len(text) <= b]
                if not hit:
                    continue  # the answer crosses a sentence boundary
                sentence = " ".join(context[slice(*spans[hit[0]])].split())
                q_words = content_words(question, zh)
                others = [" ".join(context[a:b].split()) for i, (a, b) in enumerate(spans) if i != hit[0]]
                others = [s for s in others
                          if not any(a["text"].strip() in s for a in answers)
                          and content_words(s, zh) & q_words and len(s) >= (8 if zh else 20)]
                if coin(salt + "-label", qa["id"]) < 0.5:
                    positives.append((question, sentence, "entailment"))
                elif others:
                    negatives.append((question, shuffled(others, salt + qa["id"])[0], "not_entailment"))
    n = min(len(positives), len(negatives))
    rows = shuffled(positives, salt, key=lambda r: r[0])[:n] + shuffled(negatives, salt, key=lambda r: r[0])[:n]
    return shuffled(rows, salt + "-order", key=lambda r: r[0] + r[1])


def answer_start(context: str, text: str, given: int) -> int:
    """Gives where bertkit's SQuAD reader puts an answer's text: at or nearest `given`; -1 if absent.

    An occurrence standing as a word beats one inside a longer word ("gold" in "golden"): the SQuAD copy
    here gives each answer's first occurrence, and the reader would move it (`whole_words`).
    """
    start = locate(context, text, given) if text else -1
    return whole_word(context, text, start) if start >= 0 else -1


# ---------------------------------------------------------------------------------------------------
# qa: SQuAD-format samples with short contexts


def _cut_context(context: str, zh: bool, limit: int) -> str:
    """Gives the longest run of whole sentences from the start of `context` within `limit` characters."""
    spans = sentence_spans(context, zh)
    end = 0
    for _, b in spans:
        if b > limit:
            break
        end = b
    return context[:end] if end else ""


def qa_articles(articles: list[dict], zh: bool, n_questions: int, salt: str) -> dict:
    """Gives a SQuAD v1.1 document of whole paragraphs (shuffled by hash) until `n_questions` are in.

    Each context is cut to its first sentences (QA_CONTEXT_CHARS); a question stays when its answers'
    texts are found in the cut context, each answer's offset moved to the occurrence nearest the one
    given (CMRC 2018 has wrong offsets); answers not found are dropped, and the question with them
    when none is left.
    """
    limit = QA_CONTEXT_CHARS["zh" if zh else "en"]
    paragraphs_ = [(a["title"], p) for a in articles for p in a["paragraphs"]]
    out: dict[str, list[dict]] = {}
    count = 0
    for title, para in shuffled(paragraphs_, salt, key=lambda tp: tp[1]["context"]):
        if count >= n_questions:
            break
        context = _cut_context(para["context"], zh, limit)
        if not context:
            continue
        qas = []
        for qa in para["qas"]:
            answers = []
            for a in qa["answers"]:
                text = a["text"].strip()
                start = answer_start(context, text, a["answer_start"])
                if start >= 0:
                    answers.append({"text": text, "answer_start": start})
            if answers:
                qas.append({"id": qa["id"], "question": " ".join(qa["question"].split()), "answers": answers})
        if qas:
            out.setdefault(title, []).append({"context": context, "qas": qas})
            count += len(qas)
    data = [{"title": t, "paragraphs": ps} for t, ps in out.items()]
    return {"version": "1.1", "data": data}


# ---------------------------------------------------------------------------------------------------
# ner, English: hand-made gazetteers over held-out sentences, and a rule for titles

EN_TITLES = word_list("en-titles.txt")  # a run of capitalized words after one is a person
EN_NOT_ENTITIES = word_list("en-not-entities.txt")  # capitalized words that may stand in a sentence as O
EN_GAZETTEERS = gazetteers("gazetteers-en.tsv", GUTENBERG)  # book -> PER, LOC, SKIP and O names

_EN_TOKEN = re.compile(r"(?:Mr|Mrs|Dr|St|Messrs|Mme|Mlle|Esq|Bart)\.|[A-Za-z]+(?:[-'’][A-Za-z]+)*|\d+(?:[.,:]\d+)*|--+|\S")
_OPENERS = {'"', "“", "‘", "'", "(", "[", "--", "---", ":", ";", "!", "?"}


def en_tokens(sentence: str) -> list[str]:
    """Gives a sentence's words and punctuation, with a possessive 's (or 'S, ’s) split off as CoNLL does."""
    out = []
    for tok in _EN_TOKEN.findall(sentence):
        m = re.fullmatch(r"(.+?)(['’][sS])", tok)
        if m and m.group(1).isalpha():
            out += [m.group(1), m.group(2)]
        else:
            out.append(tok)
    return out


def en_tag(tokens: list[str], phrases: dict[tuple[str, ...], str], lowercase: set[str],
           longest: int) -> list[str] | None:
    """Gives BIO tags (PER, LOC) for a tokenized sentence, or None when it holds a name not accounted for.

    A token is PER or LOC when it is part of a gazetteer phrase (longest match first), PER when it
    follows a title (Mr., Lady, Captain, ...) in a run of capitalized words, and O when it is lowercase,
    punctuation, in EN_NOT_ENTITIES, or a capitalized word at the start of a sentence or of quoted
    speech whose lowercase form the book also uses ("The", "Yet"). Any other capitalized word is a name
    the gazetteer lacks: the sentence is dropped rather than taught as O. A SKIP phrase drops it too.
    Adjacent PER tokens form one entity ("Harriet" + "Smith").
    """
    n = len(tokens)
    kinds: list[str | None] = [None] * n
    i = 0
    while i < n:
        for size in range(min(longest, n - i), 0, -1):
            kind = phrases.get(tuple(tokens[i : i + size]))
            if kind is not None:
                if kind == "SKIP":
                    return None
                for j in range(i, i + size):
                    kinds[j] = kind if j == i else kind + "+"
                i += size
                break
        else:
            i += 1
    for i, tok in enumerate(tokens):  # a run of capitalized words after a title is a person
        if tok in EN_TITLES and i + 1 < n and _is_name_like(tokens[i + 1]):
            j = i + 1
            while j < n and _is_name_like(tokens[j]) and kinds[j] not in ("LOC", "LOC+"):
                kinds[j] = "PER" if j == i + 1 else "PER+"
                j += 1
    if en_unknown(tokens, kinds, lowercase) is not None:
        return None
    tags = []
    for i, kind in enumerate(kinds):
        if kind is None or kind.startswith("O"):
            tags.append("O")
        elif kind.endswith("+") or (kind == "PER" and i > 0 and kinds[i - 1] in ("PER", "PER+")):
            tags.append("I-" + kind.rstrip("+"))
        else:
            tags.append("B-" + kind)
    return tags


def en_unknown(tokens: list[str], kinds: list[str | None], lowercase: set[str]) -> str | None:
    """Gives the first capitalized word that is neither tagged nor known not to be a name, or None."""
    for i, tok in enumerate(tokens):
        if kinds[i] is not None or not tok[:1].isupper():
            continue
        if tok in EN_NOT_ENTITIES or tok in EN_TITLES or tok.startswith(("I'", "I’")):
            continue
        if tok.isupper() and tok.lower() in lowercase:  # EMPHASIS in capitals
            continue
        opener = i == 0 or tokens[i - 1] in _OPENERS or (i == 1 and not tokens[0][:1].isalnum())
        if opener and tok.lower() in lowercase:
            continue
        return tok
    return None


def _is_name_like(tok: str) -> bool:
    return tok[:1].isupper() and tok.isalpha() and tok not in EN_TITLES and tok not in EN_NOT_ENTITIES and tok != "I"


def en_ner_sentences(books: list[Book]) -> list[tuple[list[str], list[str]]]:
    """Gives (tokens, tags) for every held-out sentence of the NER books that the gazetteer accounts for."""
    out = []
    for book in books:
        if book.label not in EN_GAZETTEERS:
            continue
        phrases = phrases_of(EN_GAZETTEERS[book.label], lambda name: tuple(en_tokens(name)))
        longest = max(len(p) for p in phrases)
        every = [s for run in book.pretrain for p in run for s in en_sentences(p)]
        every += [s for p in book.held_out for s in en_sentences(p)]
        lowercase = {w for s in every for w in re.findall(r"[a-z]+(?:'[a-z]+)*", s)}
        for sentence in (s for p in book.held_out for s in en_sentences(p)):
            if EN_BLOCKLIST.search(sentence) or not 5 <= len(sentence.split()) <= 50:
                continue
            tokens = en_tokens(sentence)
            tags = en_tag(tokens, phrases, lowercase, longest)
            if tags is not None:
                out.append((tokens, tags))
    return out


# ---------------------------------------------------------------------------------------------------
# ner, Chinese: hand-checked name lists (proposed by jieba) over held-out sentences of two novels

ZH_GAZETTEERS = gazetteers("gazetteers-zh.tsv", NOVELS)
ZH_CANDIDATE_MIN = 15  # jieba names seen this often in a novel were all reviewed by hand
_ZH_NAME_FLAGS = ("nr", "nrfg", "nrt", "ns")
_ZH_SPEECH = set("曰道笑叹见来引亦入必等之的说大正问听便与在乃遂忙却令急可即自又已也将先谓闻同出回")


def _jieba():
    try:
        import jieba
        import jieba.posseg
    except ImportError:
        raise SystemExit(f"the Chinese NER data needs jieba: pip install jieba=={JIEBA_VERSION}") from None
    if jieba.__version__ != JIEBA_VERSION:
        raise SystemExit(f"jieba {jieba.__version__} is installed; the data was built with {JIEBA_VERSION}")
    jieba.setLogLevel(60)
    return jieba.posseg


def zh_reviewed_candidates(book: Book, posseg) -> set[str]:
    """Gives the words jieba tags as names (nr, ns, ...) at least ZH_CANDIDATE_MIN times in a novel.

    These were all reviewed by hand: those that are names are in the gazetteer, the rest (上马, 闻言,
    哥哥, ...) are jieba's mistakes. A "name" glued to a following verb (吕布见, 孔明曰) counts as the name.
    """
    counts: collections.Counter[str] = collections.Counter()
    for line in itertools.chain(*book.pretrain, book.held_out):
        counts.update(w for w, f in posseg.cut(line) if f in _ZH_NAME_FLAGS and len(w) >= 2)
    for word in sorted(counts, key=len, reverse=True):
        if len(word) >= 3 and word[-1] in _ZH_SPEECH and word[:-1] in counts:
            counts[word[:-1]] += counts.pop(word)
    return {w for w, n in counts.items() if n >= ZH_CANDIDATE_MIN}


def zh_tag(sentence: str, phrases: dict[str, str], longest: int) -> list[str]:
    """Gives a BIO tag per character: gazetteer names matched longest-first, left to right."""
    tags = ["O"] * len(sentence)
    i = 0
    while i < len(sentence):
        for size in range(min(longest, len(sentence) - i), 1, -1):
            kind = phrases.get(sentence[i : i + size])
            if kind is not None:  # an "O" phrase (汉中王) keeps a name inside it (汉中) untagged
                if kind in ("PER", "LOC"):
                    tags[i : i + size] = ["B-" + kind] + ["I-" + kind] * (size - 1)
                i += size
                break
        else:
            i += 1
    return tags


def zh_ner_sentences(books: list[Book]) -> list[tuple[list[str], list[str]]]:
    """Gives (characters, tags) for held-out sentences where jieba sees no name outside the gazetteer.

    A sentence is dropped when jieba tags a word of two or more characters as a name (nr, nrfg, nrt,
    ns) that overlaps no gazetteer match and is not a reviewed candidate (reviewed and rejected): a rare
    name the lists lack would otherwise be taught as O. A SKIP phrase drops the sentence too.
    """
    posseg = _jieba()
    out = []
    for book in books:
        if book.label not in ZH_GAZETTEERS:
            continue
        phrases = phrases_of(ZH_GAZETTEERS[book.label], str)
        longest = max(len(p) for p in phrases)
        reviewed = zh_reviewed_candidates(book, posseg)
        for sentence in (s for p in book.held_out for s in zh_sentences(p)):
            if not 8 <= len(sentence) <= 100 or _ZH_CHAPTER.match(sentence) or " " in sentence:
                continue
            if any(name in sentence for name, kind in phrases.items() if kind == "SKIP"):
                continue
            tags = zh_tag(sentence, phrases, longest)
            covered = [t != "O" for t in tags]
            start, unknown = 0, False
            for word, flag in posseg.cut(sentence):
                end = start + len(word)
                if (flag in _ZH_NAME_FLAGS and len(word) >= 2 and word not in reviewed
                        and not any(covered[start:end])):
                    unknown = True
                    break
                start = end
            if not unknown:
                out.append((list(sentence), tags))
    return out


def ner_split(sentences: list[tuple[list[str], list[str]]], lang: str) -> tuple[list, list]:
    """Gives (train, dev) sentences such that a share of the names (NER_HELD_NAMES) never occurs in train.

    With the same names on both sides a lookup of the training names scores over 95 F1 on gold that
    came from name lists: dev would test memory, not what a model learnt about names in context. So
    each name (entity string) is held out or not by a seeded hash; a sentence naming a held-out name
    goes to dev, as does a random NER_DEV_SHARE of the others; train is the rest. Sentences without an
    entity are kept at NER_EMPTY_KEPT.
    """
    salt, sep = f"ner-{lang}", "" if lang == "zh" else " "
    unique = {sep.join(w): (w, t) for w, t in sentences}
    train, dev = [], []
    for key, (words, tags) in unique.items():
        names = {sep.join(words[a:b]) for _, a, b in entities(tags)}
        if not names and coin(salt + "-empty", key) >= NER_EMPTY_KEPT:
            continue
        held = any(coin(salt + "-name", name) < NER_HELD_NAMES for name in names)
        (dev if held or coin(salt + "-dev", key) < NER_DEV_SHARE else train).append((words, tags))
    n_train, n_dev = SIZES[f"ner_{lang}"]
    if len(train) < n_train or len(dev) < n_dev:
        raise SystemExit(f"{salt}: {len(train)} / {len(dev)} NER sentences, {n_train} / {n_dev} needed")
    order = lambda wt: sep.join(wt[0])  # noqa: E731
    return shuffled(train, salt, key=order)[:n_train], shuffled(dev, salt, key=order)[:n_dev]


# ---------------------------------------------------------------------------------------------------
# Writing


def tsv(header: Sequence[str], rows: Iterable[Sequence[str]]) -> bytes:
    lines = ["\t".join(header)]
    for row in rows:
        for cell in row:
            if "\t" in cell or "\n" in cell or not cell.strip():
                raise ValueError(f"row {row!r}: a cell is empty or holds a tab or a line break")
        lines.append("\t".join(row))
    return ("\n".join(lines) + "\n").encode()


def conll(sentences: Iterable[tuple[Sequence[str], Sequence[str]]]) -> bytes:
    blocks_ = ["\n".join(f"{w} {t}" for w, t in zip(words, tags, strict=True)) for words, tags in sentences]
    return ("\n\n".join(blocks_) + "\n").encode()


def squad_json(doc: dict) -> bytes:
    # one paragraph a line: compact, yet a diff shows which paragraph changed
    lines = ['{"version": "1.1", "data": [']
    for a, article in enumerate(doc["data"]):
        lines.append(json.dumps({"title": article["title"]}, ensure_ascii=False)[:-1] + ', "paragraphs": [')
        for p, para in enumerate(article["paragraphs"]):
            comma = "," if p + 1 < len(article["paragraphs"]) else ""
            lines.append(json.dumps(para, ensure_ascii=False) + comma)
        lines.append("]}" + ("," if a + 1 < len(doc["data"]) else ""))
    lines.append("]}")
    return ("\n".join(lines) + "\n").encode()


def gz(text: str) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as f:
        f.write(text.encode())
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------------
# Building everything


@dataclass
class Stats:
    """What DATA_LICENSES and README.md report about one task file pair."""

    rows: dict[str, int]
    labels: list[str]


def build(shared: Path) -> dict[str, bytes]:
    """Gives every file of src/bertkit/data/ as relative path -> bytes."""
    files: dict[str, bytes] = {}
    stats: dict[str, Stats] = {}
    squad_train, squad_dev = read_squad(shared)
    cmrc_train, cmrc_dev = read_cmrc(shared)

    for lang, books, (wiki_train, wiki_dev) in (
        ("en", read_gutenberg(shared), (squad_train, squad_dev)),
        ("zh", read_novels(shared), (cmrc_train, cmrc_dev)),
    ):
        zh = lang == "zh"
        files[f"{lang}/pretrain/{'novels' if zh else 'gutenberg'}.txt.gz"] = gz(pretrain_books(books))
        files[f"{lang}/pretrain/wikipedia.txt.gz"] = gz(pretrain_wikipedia(wiki_train))

        train, dev = classify_rows(books, zh)
        files[f"{lang}/classify/train.tsv"] = tsv(("sentence", "label"), train)
        files[f"{lang}/classify/dev.tsv"] = tsv(("sentence", "label"), dev)
        stats[f"{lang}/classify"] = Stats({"train": len(train), "dev": len(dev)}, sorted({y for _, y in train}))

        n_train, n_dev = SIZES["pair"]
        train = pair_rows(wiki_train, zh, f"pair-{lang}-train")[:n_train]
        dev = pair_rows(wiki_dev, zh, f"pair-{lang}-dev")[:n_dev]
        files[f"{lang}/pair/train.tsv"] = tsv(("sentence1", "sentence2", "label"), train)
        files[f"{lang}/pair/dev.tsv"] = tsv(("sentence1", "sentence2", "label"), dev)
        stats[f"{lang}/pair"] = Stats({"train": len(train), "dev": len(dev)}, sorted({r[2] for r in train}))

        n_train, n_dev = SIZES["qa"]
        qa_train = qa_articles(wiki_train, zh, n_train, f"qa-{lang}-train")
        qa_dev = qa_articles(wiki_dev, zh, n_dev, f"qa-{lang}-dev")
        files[f"{lang}/qa/train.json"] = squad_json(qa_train)
        files[f"{lang}/qa/dev.json"] = squad_json(qa_dev)
        count = [sum(len(p["qas"]) for a in d["data"] for p in a["paragraphs"]) for d in (qa_train, qa_dev)]
        stats[f"{lang}/qa"] = Stats({"train": count[0], "dev": count[1]}, [])

        sentences = zh_ner_sentences(books) if zh else en_ner_sentences(books)
        train, dev = ner_split(sentences, lang)
        files[f"{lang}/ner/train.txt"] = conll(train)
        files[f"{lang}/ner/dev.txt"] = conll(dev)
        labels = sorted({t for _, tags in train for t in tags})
        stats[f"{lang}/ner"] = Stats({"train": len(train), "dev": len(dev)}, labels)

        seeds = seed_rows(lang)  # the template tasks the paper walkthrough's examples are answered on
        for split, rows in zip(("train", "dev"), seeds["sentiment"], strict=True):
            files[f"{lang}/seed/sentiment/{split}.tsv"] = tsv(("sentence", "label"), rows)
        for split, rows in zip(("train", "dev"), seeds["nli"], strict=True):
            files[f"{lang}/seed/nli/{split}.tsv"] = tsv(("sentence1", "sentence2", "label"), rows)
        for split, rows in zip(("train", "dev"), seeds["entities"], strict=True):
            files[f"{lang}/seed/entities/{split}.txt"] = conll(rows)
        for name, (train, dev) in seeds.items():
            labels = sorted({t for _, tags in train for t in tags}) if name == "entities" else sorted({r[-1] for r in train})
            stats[f"{lang}/seed/{name}"] = Stats({"train": len(train), "dev": len(dev)}, labels)

    files["DATA_LICENSES"] = data_licenses(files).encode()
    files["README.md"] = readme(stats).encode()
    return files


def _size(data: bytes) -> str:
    return f"{len(data) / 1024:,.0f} KiB"


def data_licenses(files: dict[str, bytes]) -> str:
    """Gives the DATA_LICENSES text: every shipped file with its source, licence, derivation and attribution.

    Each entry of the template opens with a `File: a, b` line; its `$sizes` become those files' sizes.
    """
    values = {
        "gutenberg_books": ", ".join(f"{t} ({f})" for f, t in GUTENBERG.values()),
        "qa_chars_en": QA_CONTEXT_CHARS["en"],
        "qa_chars_zh": QA_CONTEXT_CHARS["zh"],
        "zh_pretrain_blocks": ", ".join(str(k + 1) for k in ZH_PRETRAIN_BLOCKS),
    }
    entries, listed = [], set()
    for entry in template_text("DATA_LICENSES.template").split("\n\n"):
        first = entry.split("\n", 1)[0]
        names = first.removeprefix("File: ").split(", ") if first.startswith("File: ") else []
        listed.update(names)
        sizes = ", ".join(f"{name} {_size(files[name])}" for name in names if name in files)
        entries.append(Template(entry).substitute(values, sizes=sizes))
    missing = sorted((set(files) | {"DATA_LICENSES", "README.md"}) - listed)
    if missing:
        raise AssertionError(f"files without a licence entry: {missing}")
    return "\n\n".join(entries)


def readme(stats: dict[str, Stats]) -> str:
    """Gives README.md: the tasks, their label sets and sizes, and how the silver labels were made."""
    values = {}
    for key, s in stats.items():  # "en/classify" -> $en_classify_size, $en_classify_labels
        values[key.replace("/", "_") + "_size"] = f"{s.rows['train']:,} / {s.rows['dev']:,}"
        values[key.replace("/", "_") + "_labels"] = ", ".join(s.labels) if s.labels else "answer spans"
    return Template(template_text("README.template.md")).substitute(values)


# ---------------------------------------------------------------------------------------------------
# Main: write, or check


def baselines_json(files: dict[str, bytes]) -> bytes:
    """Gives baselines.json: the simple baselines' dev scores on the built files (scripts/demo_baselines.py)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for name, data in files.items():
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / name).write_bytes(data)
        _, scores = baselines(Path(tmp), content_words)
    return (json.dumps(scores, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def _same(path: Path, data: bytes) -> bool:
    if not path.is_file():
        return False
    old = path.read_bytes()
    if path.suffix == ".gz":
        return gzip.decompress(old) == gzip.decompress(data)
    return old == data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shared", type=Path, default=DEFAULT_SHARED, help="the shared data folder")
    parser.add_argument("--out", type=Path, default=OUT, help="where the data goes (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="verify the files in --out instead of writing")
    parser.add_argument("--baselines", action="store_true",
                        help="only print simple-model scores of the files in --out (scripts/demo_baselines.py)")
    args = parser.parse_args(argv)
    if args.baselines:
        print("\n".join(baselines(args.out, content_words)[0]))
        return 0
    files = build(args.shared)
    files["baselines.json"] = baselines_json(files)
    present = {str(p.relative_to(args.out)) for p in args.out.rglob("*") if p.is_file()} if args.out.is_dir() else set()
    if args.check:
        wrong = sorted(name for name, data in files.items() if not _same(args.out / name, data))
        extra = sorted(present - set(files))
        for name in wrong:
            print(f"differs or missing: {args.out / name}", file=sys.stderr)
        for name in extra:
            print(f"not built by this script: {args.out / name}", file=sys.stderr)
        if wrong or extra:
            return 1
        print(f"{len(files)} files in {args.out} are as built")
        return 0
    for name in sorted(present - set(files)):
        (args.out / name).unlink()
    for name, data in files.items():
        path = args.out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not _same(path, data):
            path.write_bytes(data)
    total = sum(len(d) for d in files.values())
    print(f"wrote {len(files)} files, {total / 2**20:.2f} MiB, to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
