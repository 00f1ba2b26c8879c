"""Builds the small data that ships inside bertkit for `bertkit demo` (src/bertkit/data/), deterministically.

    python scripts/build_demo_data.py            # (re)write src/bertkit/data/
    python scripts/build_demo_data.py --check    # exit 1 unless the files there are what this would write

Inputs: the shared data folder (`--shared`, default ../shared/data beside the repository) and jieba
0.42.1 from PyPI (`pip install jieba==0.42.1`), used only to screen Chinese NER sentences. Every choice
below is a fixed rule or a hash of the text with a fixed seed, so two runs give the same bytes (the
.gz files are compared after decompression, since zlib builds may compress differently).

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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "src" / "bertkit" / "data"
DEFAULT_SHARED = REPO.parent / "shared" / "data"
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


def zh_sentences(line: str) -> list[str]:
    """Gives the sentences of a normalized line: a split after 。！？ and any closing quotes."""
    out, start = [], 0
    for m in _ZH_END.finditer(line):
        out.append(line[start : m.end()])
        start = m.end()
    if line[start:]:
        out.append(line[start:])
    return out


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


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


# ---------------------------------------------------------------------------------------------------
# pair: QNLI-style (question, sentence of its paragraph) -> entailment / not_entailment

EN_STOPWORDS = _word_set(
    "a an the of and or in on at to for from by with as is are was were be been being it its this that these "
    "those what which who whom whose when where why how did do does done has have had not no than then there "
    "their his her he she they them we you i into about over after before during under can could would "
    "should may might will shall"
)


def _content_words(text: str, zh: bool) -> set[str]:
    if zh:  # character bigrams of Chinese text stand in for words
        chars = [c for c in text if "\u4e00" <= c <= "\u9fff"]
        return {a + b for a, b in itertools.pairwise(chars)}
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in EN_STOPWORDS}


def _zh_sentence_spans(text: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for m in _ZH_END.finditer(text):
        spans.append((start, m.end()))
        start = m.end()
    if text[start:].strip():
        spans.append((start, len(text)))
    return spans


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
            spans = _zh_sentence_spans(context) if zh else en_sentence_spans(context)
            for qa in para["qas"]:
                question = " ".join(qa["question"].split())
                answers = [a for a in qa["answers"] if a["text"].strip()]
                if not answers or not question:
                    continue
                start, text = _locate(context, answers[0]["text"], answers[0]["answer_start"])
                if start < 0:
                    continue
                hit = [i for i, (a, b) in enumerate(spans) if a <= start and start + len(text) <= b]
                if not hit:
                    continue  # the answer crosses a sentence boundary
                sentence = " ".join(context[slice(*spans[hit[0]])].split())
                q_words = _content_words(question, zh)
                others = [" ".join(context[a:b].split()) for i, (a, b) in enumerate(spans) if i != hit[0]]
                others = [s for s in others
                          if not any(a["text"].strip() in s for a in answers)
                          and _content_words(s, zh) & q_words and len(s) >= (8 if zh else 20)]
                if coin(salt + "-label", qa["id"]) < 0.5:
                    positives.append((question, sentence, "entailment"))
                elif others:
                    negatives.append((question, shuffled(others, salt + qa["id"])[0], "not_entailment"))
    n = min(len(positives), len(negatives))
    rows = shuffled(positives, salt, key=lambda r: r[0])[:n] + shuffled(negatives, salt, key=lambda r: r[0])[:n]
    return shuffled(rows, salt + "-order", key=lambda r: r[0] + r[1])


def _locate(context: str, text: str, given: int) -> tuple[int, str]:
    """Gives (start, text) of the answer's occurrence nearest the given offset; (-1, text) when absent.

    An occurrence standing as a word is preferred to one inside a longer word ("gold" in "golden"): the
    SQuAD copy here gives each answer's first occurrence, and bertkit's reader would move it.
    """
    text = text.strip()
    starts = [m.start() for m in re.finditer(re.escape(text), context)] if text else []
    if not starts:
        return -1, text
    return min(starts, key=lambda s: (_inside_word(context, s, s + len(text)), abs(s - given), s)), text


def _inside_word(context: str, start: int, end: int) -> bool:
    def glued(a: str, b: str) -> bool:
        return a.isascii() and b.isascii() and a.isalnum() and b.isalnum()

    return (start > 0 and glued(context[start - 1], context[start])) or (
        end < len(context) and glued(context[end - 1], context[end]))


# ---------------------------------------------------------------------------------------------------
# qa: SQuAD-format samples with short contexts


def _cut_context(context: str, zh: bool, limit: int) -> str:
    """Gives the longest run of whole sentences from the start of `context` within `limit` characters."""
    spans = _zh_sentence_spans(context) if zh else en_sentence_spans(context)
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
                start, text = _locate(context, a["text"], a["answer_start"])
                if start >= 0 and text:
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

EN_TITLES = _word_set(
    "Mr. Mrs. Dr. St. Messrs. Mme. Mlle. Mr Mrs Dr St Duc Miss Misses Sir Lady Lord Captain Colonel Admiral "
    "Doctor Father Major General Professor Monsieur Madame Aunt Uncle Nurse Dame Prince Princess King Queen Duke Duchess "
    "Viscountess Dowager Baronet Commodore Deacon Bishop Parson Squire Master Mistress Mister Signor Don "
    "Brother Sister Cousin Mate"
)
# Capitalized words that are not PER or LOC here: nationalities, days, months, feasts, exclamations,
# forms of address, God. A sentence may hold them and stay.
EN_NOT_ENTITIES = _word_set(
    "I God Lord Heaven Heavens Providence Christ Jesus Oh O Ah Alas Sir Madam Ma'am Mamma Papa Bible Gospel "
    "Monday Tuesday Wednesday Thursday Friday Saturday Sunday Sabbath January February March April May June "
    "July August September October November December Christmas Michaelmas Easter Lent "
    "English Englishman Englishmen Englishwoman British French Frenchman Frenchmen American Americans German "
    "Germans Italian Italians Irish Irishman Scotch Scottish Dutch Spanish Spaniard Spaniards Roman Romans "
    "Greek Greeks Christian Christians Christendom Catholic Catholics Protestant Quaker Quakers Indian Indians "
    "Japanese Chinese Turkish Turk Turks Persian Persians Egyptian Egyptians Hindoo Hindoos Malay Malays "
    "Russian Russians Venetian Patagonian Tartar Tartars Prussian Cornish Elizabethan Yankee Yankees "
    "Portuguese Danish Swedish Norwegian Arab Arabs Jew Jews Jewish Hebrew Mohammedan Pagan Pagans Gothic "
    "Nantucketer Nantucketers Manxman Parsee Polynesian Polynesians Asiatic European Europeans African "
    "Australian Australians Yorkshireman Guernsey-man Peruvian Philistine Philistines Syrian Hittite Feegees "
    "Southerner Almighty Esq. Bart. Ay Aye Nay Yes No Hallo Halloa Hurrah Hist Avast Ha Hullo Huh"
)


@dataclass(frozen=True)
class Gazetteer:
    """A book's names: PER and LOC phrases, and SKIP phrases (ships, inns, whales, ambiguous names)
    whose presence drops a sentence, since they are names that are neither PER nor LOC."""

    per: str
    loc: str
    skip: str = ""
    plain: str = ""  # capitalized words that are O in this book (the Sperm Whale, the Vicarage)

    def phrases(self) -> dict[tuple[str, ...], str]:
        """Gives each name as a token tuple (en_tokens: "Gray's Inn" is Gray, 's, Inn) -> its kind."""
        out = {}
        for kind, names in (("SKIP", self.skip), ("O", self.plain), ("LOC", self.loc), ("PER", self.per)):
            for name in names.split("|"):
                if name.strip():
                    out[tuple(en_tokens(name))] = kind
        return out


EN_GAZETTEERS = {  # written for bertkit from reading the books; "|" separates names
    "emma": Gazetteer(
        per="Emma|Woodhouse|Woodhouses|Harriet|Smith|Weston|Westons|Elton|Eltons|Knightley|Knightleys|Jane|"
            "Fairfax|Churchill|Churchills|Frank|Bates|Bateses|Martin|Martins|Robert|John|Perry|Isabella|"
            "Goddard|Cole|Coles|Campbell|Campbells|Taylor|Dixon|Dixons|Hawkins|Henry|James|William|Larkins|"
            "Suckling|Sucklings|Nash|Patty|Elizabeth|Bragge|George|Selina|Hodges|Augusta|Gilbert|Stokes|"
            "Wright|Otway|Otways|Cox|Coxes|Wingfield|Smallridge|Ford|Wallis|Bickerton|Hannah|Anne|Serle|"
            "Jeffereys|Hughes|Saunders|Bella|Mitchell|Edward|Perrys|Anna",
        loc="Hartfield|Highbury|Randalls|Donwell|Donwell Abbey|Abbey Mill|Abbey Mill Farm|Abbey-Mill Farm|"
            "Enscombe|Maple Grove|London|Bath|Box Hill|Weymouth|Ireland|Richmond|Brunswick Square|Yorkshire|"
            "Kingston|Bristol|Surry|Surrey|England|South End|Windsor|Swisserland|Switzerland|Vicarage Lane|"
            "Clifton|Cromer|Hartfield House|Balycraig|Langham|Broadway Lane|Mill Farm|Scotland|"
            "West Indies|Manchester|Birmingham|Cobham|Leatherhead|Oxford|Gloucestershire|Kent|Bond-street|"
            "Abbey-Mill|Abbey-Mill Farm|Manchester-street",
        skip="Crown|Astley|Astley's",
        plain="Vicarage|Romance|Good-bye|La|Vicar|Agricultural",
    ),
    "persuasion": Gazetteer(
        per="Anne|Elliot|Elliots|Wentworth|Russell|Walter|Charles|Musgrove|Musgroves|Mary|Louisa|Elizabeth|"
            "Harville|Harvilles|Benwick|Smith|Henrietta|Clay|Croft|Crofts|Hayter|Hayters|Wallis|Shepherd|"
            "Dalrymple|Dalrymples|Frederick|Carteret|Carterets|Shirley|Laura|Rooke|James|Edward|"
            "Richard|Dick|William|Baldwin|Sophy|Hamilton|Jemima|Sarah|Basil|Morley|Atkinson|Brand|Drew|"
            "Robinson|Fanny|Hargrave|Spicer|Harry|Scott|Brigden|Sophys",
        loc="Bath|Uppercross|Kellynch|Kellynch Hall|Kellynch Lodge|Lyme|Camden Place|Cobb|London|Plymouth|"
            "Taunton|England|Somersetshire|Westgate Buildings|Marlborough Buildings|Milsom Street|"
            "Rivers Street|Union Street|Gay Street|Laura Place|Pulteney Street|Bath Street|Belmont|"
            "Winthrop|Monkford|Gibraltar|Portsmouth|Shropshire|North Yarmouth|Deal|Lisbon|Minehead|"
            "Charmouth|Pinny|Up Lyme|Crewkherne|Lansdown Crescent|Uppercross Cottage|Uppercross Hall|"
            "Great House|Bermuda|Bahama|East Indies|Cork|Chichester|Thornberry Park|Yorkshire|Ireland|"
            "Scotland|Wales|Weymouth|Clifton|Sidmouth|Westgate|Marlborough|Camden",
        skip="Laconia|Asp|White Hart|Navy|Baronetage|Octagon Room|Concert Room|Pump Room",
    ),
    "sense_and_sensibility": Gazetteer(
        per="Elinor|Marianne|Dashwood|Dashwoods|Edward|Jennings|Willoughby|Lucy|John|Brandon|Ferrars|"
            "Middleton|Middletons|Palmer|Palmers|Fanny|Steele|Steeles|Robert|Margaret|Charlotte|Smith|"
            "Morton|Harris|Grey|Gray|Pratt|Williams|Eliza|Harry|Thomas|Nancy|Bartlett|Betty|Donavan|"
            "Ellison|Ellisons|Henry|Richard|Clarke|Sparks|Dennison|Annamaria|William|Biddy|Jenning|Careys|"
            "Cartwright|Willoughbys|Thomson|Anne|Sophia",
        loc="Norland|Norland Park|Barton|Barton Park|Barton Cottage|Barton Valley|London|Delaford|Devonshire|"
            "Cleveland|Allenham|Combe|Combe Magna|Exeter|Oxford|Sussex|Somersetshire|England|Longstaple|"
            "Plymouth|Dorsetshire|Whitwell|Dawlish|Berkeley Street|Harley Street|Conduit Street|Bond Street|"
            "Portman Square|Hanover Square|Pall Mall|Sackville Street|Holborn|Westminster|Bath|Kensington|"
            "Kensington Gardens|Stanhill|Honiton|Weymouth|Bartlett's Buildings|Portugal|Lisbon|"
            "East Indies|West Indies|Bristol|Abingdon|Avignon|Harley",
        skip="Gray's Inn|Exeter Exchange",
    ),
    "father_brown": Gazetteer(
        per="Brown|Flambeau|Boulnois|Muscari|Todhunter|Fanshaw|Pendragon|Pendragons|Harrogate|Hirsch|Hood|"
            "Seymour|Usher|Cutler|Kidd|Todd|Cray|Champion|Putnam|Carstairs|MacNab|MacNabs|Bruno|Ezza|Wilson|"
            "Falconroy|Dubosc|Pooley|Parkinson|Pond|Otto|Armagnac|Brun|Dalroy|Ethel|Hawker|Mull|Audrey|Oman|"
            "Calhoun|Malvoli|Valognes|Greywood|Davis|Finn|Watson|Cowdray|Giles|Barlow|Montano|Nutt|Cecil|"
            "Grimm|Hedwig|Glass|Orion|Claude|Philip|Arthur|James|John|Aurora|Aurora Rome|Isidore|Walter|"
            "Ireton|Drugger|Wilson Seymour|Dreyfus|Paul|Marne|Maurice|Ivan|Romeo|Juliet|Westermaier|Eyre|"
            "Eyres|Sagar|Crake|Lucius|Pyle|Dorian|Catarina|Matthew|Lestrange|Chamberlain|Caesar|Oscar|"
            "Leonardo|Byron|Etta|Frank|Henry",
        loc="London|Paris|England|America|Italy|Europe|Cornwall|Devonshire|Scarborough|Australia|Epsom|"
            "Hampstead|Hampstead Heath|Pendragon Park|Pendragon Tower|Grey Cottage|Pacific|Pacific Islands|"
            "Cannibal Islands|Heiligwaldenstein|Grossenmark|Wagga Wagga|Putney|Westminster|Thames|Sicily|"
            "Naples|Germany|France|Spain|Ireland|Chicago|New York|Bayswater|Sussex|Essex|Kensington|Mayfair|"
            "Chelsea|Surrey|Dartmoor|Cumberland|India|Fulham|Wandsworth|Boston|Snowdon|Glencoe|Britain|Kew|"
            "Troy|Ruritania",
        skip="Western Sun|Daily Reformer|Thieves|Collection|Carstairs Collection|Freak Dinner|Last Trick|"
             "Catastrophism|Republic|Empire|Government|Rome|Exmoor|Pilgrim|Paradise|Freemasons|Last-Trick|Hotel",
        plain="Tritons|Mortals|Sun|Murder|Escapes|Voodoo",
    ),
    "moby_dick": Gazetteer(
        per="Ahab|Stubb|Queequeg|Starbuck|Flask|Peleg|Bildad|Pip|Tashtego|Daggoo|Steelkilt|Fedallah|Lakeman|"
            "Radney|Ishmael|Perth|Gabriel|Hussey|Elijah|Derick|Fleece|Mapple|Bulkington|Jonah|Noah|Solomon|"
            "Scoresby|Cuvier|Sebastian|Samuel|Bunger|Macey|Mayhew|Coffin|Peter|Jove|Perseus|Pliny|Hosea|"
            "Vishnoo|Adam|Lazarus|Belshazzar|Tranquo|Cabaco|Owen|Pollard|Boomer|Sleet|Bouton|Charity|Jack|"
            "Archy|Dough Boy|Doughboy|Aunt Charity|Hercules|Prometheus|Linnaeus|Burton|Burtons|Beale|Bennett|"
            "Frederick|Paul|Martha|Washington|Louis|George|John|Mary|Tash|Yojo|Quohog|Coleridge|Abraham|"
            "Nathan|King-Post",
        loc="Nantucket|Greenland|Pacific|Atlantic|England|London|America|Japan|Cape Horn|Cape of Good Hope|"
            "Good Hope|New Bedford|Bedford|Sag Harbor|Lima|Guernsey|Joppa|Tarshish|Nineveh|China|Java|"
            "Sumatra|Tahiti|Africa|Europe|India|Asia|Rome|France|Spain|Holland|Peru|Alabama|Virginia|"
            "New Zealand|New York|New England|New Guinea|New Hampshire|Cape Cod|Gay Head|Martha's Vineyard|"
            "Vineyard|Mediterranean|Indian Ocean|South Sea|South Seas|Antarctic|Arctic|Andes|"
            "Spitzbergen|Manilla|Sunda|Cologne|Thames|Erie|Propontis|Patagonia|Brazil|Mexico|Ohio|"
            "Kentucky|Hudson|Manhattan|Labrador|Canada|Chili|Philippines|Madagascar|"
            "Mozambique|Bashee|Ceylon|Egypt|Italy|Germany|Russia|Norway|Lapland|Iceland|Siberia|"
            "Zealand|Indies|Equator|Alps|Vesuvius|Quebec|Illinois|Texas|Eddystone",
        skip="Moby Dick|Moby|Dick|Pequod|Rachel|Jeroboam|Bachelor|Samuel Enderby|Enderby|Town-Ho|Town Ho|"
             "Rose-bud|Virgin|Delight|Goney|Albatross|Spouter|Spouter-Inn|Try Pots|Heidelburgh Tun|Tun|"
             "Fast Fish|Loose Fish|Jungfrau|"
             "Queen|King|Czar|Emperor|Emperors|Pope|Sultan|Mogul|Captain Ahab's|Sub-Sub|Sub|Lord Warden|"
             "Warden|Deuteronomy|Leviticus|Exodus|Genesis|Job|Revelation|Aries|Cetus|Ramadan",
        plain="Sperm|Right|White|Whale|Whales|Leviathan|Death|Black|Holy|Faith|Nature|Eternity|Life|Cetacean|"
              "Evangelists|Fates|Natural|History|Himmalehan|Grampus|Hyena|Albino|Dives|Rib|Polar",
    ),
}

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
        phrases = EN_GAZETTEERS[book.label].phrases()
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

ZH_GAZETTEERS = {  # reviewed by hand from jieba's proposals; "|" separates names
    "sanguo": Gazetteer(
        per="孔明|玄德|曹操|关公|张飞|吕布|赵云|孙权|刘备|司马懿|魏延|周瑜|姜维|袁绍|马超|黄忠|诸葛亮|邓艾|马岱|"
            "张辽|庞德|刘表|鲁肃|曹仁|董卓|徐晃|孙策|云长|许褚|王平|司马昭|夏侯渊|刘璋|袁术|张苞|陆逊|曹洪|孙乾|"
            "孟达|孟获|曹丕|张翼|曹真|郭淮|刘玄德|李典|廖化|庞统|蔡瑁|张鲁|太史慈|黄盖|韩遂|张昭|周泰|徐盛|荀彧|"
            "刘封|司马师|张嶷|杨仪|孙坚|夏侯霸|郭汜|陈宫|糜竺|程普|贾诩|张任|黄祖|丁奉|马忠|严颜|邓芝|公孙瓒|子龙|"
            "公瑾|马腾|袁尚|马谡|曹休|颜良|程昱|董承|献帝|杨奉|关云长|糜芳|诸葛瑾|曹爽|凌统|赵子龙|刘琦|子敬|"
            "孙夫人|陈泰|李儒|简雍|袁谭|潘璋|高顺|陶谦|华歆|周郎|阿斗|张松|吴懿|吴班|贾充|黄皓|王允|徐庶|刘岱|"
            "蒋钦|张绣|马良|曹睿|张济|纪灵|傅士仁|陈登|刘晔|郭图|袁熙|刘琮|夏侯尚|樊稠|刘繇|王朗|华雄|陈武|"
            "高翔|张宝|郭嘉|李严|陈式|仲达|孙桓|吕范|蒋琬|朱然|侯成|甘夫人|伊籍|吴兰|杨松|毋丘俭|董袭|周仓|"
            "蔡夫人|雷铜|公孙渊|张翼德|李肃|魏续|冯习|崔谅|吉平|吕旷|曹植|刘禅|蒋干|邓贤|左慈|郝昭|戴陵|卢植|"
            "刘景升|吕翔|顾雍|阚泽|钟繇|秦朗|孙峻|文钦|傅佥|皇甫嵩|孟德|宋宪|华佗|糜夫人|单福|朱桓|韩玄|赵范|"
            "乔国老|杨怀|耿纪|马遵|满宠|曹豹|臧霸|陈震|韩浩|张允|杨修|贾逵|傅彤|胡遵|司马望|孙皓|刘焉|淳于琼|"
            "蒯越|郝萌|韩福|张郃|张邰|黄公覆|法正|孟优|夏侯惇|关兴|甘宁|夏侯楙|翼德|杨阜|卧龙|凤雏|刘皇叔|"
            "刘豫州|刘使君|关羽|钟会|诸葛恪|诸葛诞|司马炎|孙亮|孙休|诸葛瞻|伯约|李傕|曹嵩|吕蒙|羊祜|杜预|王濬|"
            "孔融|刘辟|龚都|刘度|金旋|马休|马铁|沮授|审配|逢纪|许攸|关平|孙尚香|貂蝉|王子服|种辑|吴硕|马玩|梁兴|"
            "成宜|侯选|程银|李堪|刘巴|黄权|李恢|费祎|董允|谯周|宗预|霍峻|向宠|李蒙|刘贤|许汜|高沛|泠苞",
        loc="荆州|东吴|汉中|江东|徐州|成都|许都|洛阳|祁山|西川|襄阳|长安|江南|樊城|中原|冀州|江夏|蜀中|南郡|"
            "河北|兖州|汝南|益州|泸水|淮南|剑阁|青州|南阳|长沙|陇西|豫州|辽东|阳平关|江陵|定军山|雍州|长江|山东|"
            "长坂|绵竹|濮阳|黎阳|南郑|桃园|常山|北海|渭水|泰山|武昌|潼关|宛城|东川|阆中|洮阳|渭南|颍川|永安|广陵|"
            "扬州|柳城|桂阳|巴西|涪城|皖城|上庸|襄平|并州|西城|小沛|许昌|西凉|官渡|陈仓|荆襄|寿春|乌巢|柴桑|"
            "白帝城|华容|赤壁|街亭|建业|合淝|汉水|新野|夏口|博望|南安|天水|五丈原|下邳|魏国|蜀国|吴国|汉川|西蜀|"
            "幽州|凉州|交州|零陵|武陵|汉津|虎牢关|汜水关|葭萌关|秣陵|巴郡|江州|邺郡|许田|长坂坡|落凤坡|"
            "米仓山|天荡山|褒城|成都府|涪关|雒城|祁山寨|铁笼山|剑门关",
        plain="汉中王|张南",
    ),
    "shuihu": Gazetteer(
        per="宋江|李逵|武松|林冲|吴用|卢俊义|戴宗|燕青|晁盖|石秀|花荣|呼延灼|鲁智深|杨志|公孙胜|王庆|秦明|"
            "朱仝|李俊|杨雄|张顺|张清|宋公明|柴进|徐宁|关胜|琼英|刘唐|雷横|王婆|史进|方腊|乔道清|黄信|童贯|"
            "解珍|解宝|施恩|朱武|董平|孙立|朱贵|杨林|田虎|索超|阮小七|顾大嫂|汤隆|张横|李应|李衮|李师师|张青|"
            "阮小二|白胜|穆弘|石勇|黄文炳|项充|高廉|樊瑞|孙安|吕方|欧鹏|孙新|李忠|郭盛|鲁达|韩滔|安道全|王伦|"
            "阮小五|马麟|郝思文|陈达|魏定国|鲍旭|杜兴|孔亮|孔明|蒋门神|蔡京|邓飞|智深|何九叔|杨春|叶清|孙二娘|"
            "宋清|童威|杜迁|唐斌|宋万|李固|李云|蔡福|宣赞|周通|王英|薛永|邹渊|史文恭|李成|扈三娘|石宝|马灵|"
            "童猛|李助|裴宣|李立|邬梨|曹正|董超|阎婆|金大坚|郁保四|宋太公|段景住|穆春|蔡九|朱富|凌振|王定六|"
            "郑天寿|殷天锡|王进|刘高|丁得孙|闻达|龚旺|卞祥|范全|唐牛儿|耿恭|祝彪|彭圯|蔡庆|山士奇|龚端|萧嘉穗|"
            "毛太公|杨戬|钮文忠|邓元觉|李小二|邹闰|张叔夜|庞万春|郑屠|周谨|侯健|费保|孟康|迎儿|栾廷玉|皇甫端|"
            "张三|赵能|柴皇城|焦挺|毕胜|周昂|祝龙|全羽|段三娘|蒋敬|陶宗旺|阎婆惜|王焕|刘梦龙|武大郎|白秀英|"
            "田彪|崔野|胡俊|方杰|李吉|陆谦|袁朗|田豹|李鬼|邹润|王文德|王文斌|燕顺|高俅|宿元景|薛霸|潘金莲|"
            "西门庆|郓哥|武大|时迁|张文远|扈成|祝虎|祝万|单廷圭|韩伯龙|"
            "孙定|张千|李万|程万里|蒋忠|刘敏|崔道成|毛仲义|李荣|党世雄|闻焕章|乔冽|廖立|项元镇|牛邦喜",
        loc="梁山泊|东京|济州|山东|江州|蓟州|辽国|郓城县|青州|沧州|北京|河北|杭州|乌龙岭|润州|宛州|清溪|"
            "苏州|五台山|歙州|盖州|霸州|二龙山|檀州|壶关|开封府|景阳冈|东平|凌州|楚州|孟州|郓城|华州|阳谷县|"
            "华山|关西|清河县|登州|汾阳|常州|揭阳|泰安|陵川|襄垣|扬州|淮西|玉田县|西京|华阴县|太原|湖州|燕京|"
            "祝家庄|高唐州|金沙滩|东溪村|梁山|少华山|桃花山|江南|大名府|东昌府|曾头市|独龙冈|快活林|野猪林|"
            "飞云浦|延安府|延安|南丰|晋宁|威胜|宣州|睦州|秀州|独松关|昱岭关|清风寨|清风山|白虎山|芒砀山|"
            "饮马川|黄门山|对影山|枯树山|无为军|浔阳江|扬子江|渭州|华阴|史家村|石碣村|阳谷|清河|东平府|"
            "蓟州城|江州城|沂州|沂水县|蔡州|孟州城|十字坡|黄泥冈|桃花村|李家庄|扈家庄|庐州|宋家村|房州|"
            "无锡县|江阴|太湖",
        skip="泰山",  # in 水浒传 泰山 also means a father-in-law
        plain="镇关西|高太尉|宿太尉|洪太尉|梁中书|鲁提辖|孙提辖|林教头",  # a title on a surname is not a name here
    ),
}
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
    for run in book.pretrain:
        for line in run:
            counts.update(w for w, f in posseg.cut(line) if f in _ZH_NAME_FLAGS and len(w) >= 2)
    for line in book.held_out:
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
        gazetteer = ZH_GAZETTEERS[book.label]
        phrases = {"".join(k): v for k, v in gazetteer.phrases().items()}
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
        names = {sep.join(words[a:b]) for a, b, _ in _entities(tags)}
        if not names and coin(salt + "-empty", key) >= NER_EMPTY_KEPT:
            continue
        held = any(coin(salt + "-name", name) < NER_HELD_NAMES for name in names)
        (dev if held or coin(salt + "-dev", key) < NER_DEV_SHARE else train).append((words, tags))
    n_train, n_dev = SIZES[f"ner_{lang}"]
    if len(train) < n_train or len(dev) < n_dev:
        raise SystemExit(f"{salt}: {len(train)} / {len(dev)} NER sentences, {n_train} / {n_dev} needed")
    order = lambda wt: sep.join(wt[0])  # noqa: E731
    return shuffled(train, salt, key=order)[:n_train], shuffled(dev, salt, key=order)[:n_dev]


def _entities(tags: Sequence[str]) -> set[tuple[int, int, str]]:
    """Gives the (start, end, type) spans of a BIO tag sequence."""
    spans, start = set(), None
    for i, tag in enumerate([*tags, "O"]):
        if start is not None and not tag.startswith("I-"):
            spans.add((start, i, tags[start][2:]))
            start = None
        if tag.startswith("B-"):
            start = i
    return spans


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

    files["DATA_LICENSES"] = data_licenses(files).encode()
    files["README.md"] = readme(stats).encode()
    return files


def _size(data: bytes) -> str:
    return f"{len(data) / 1024:,.0f} KiB"


def data_licenses(files: dict[str, bytes]) -> str:
    """Gives the DATA_LICENSES text: every shipped file with its source, licence, derivation and attribution."""
    gutenberg = ", ".join(f"{t} ({f})" for f, t in GUTENBERG.values())
    entries = {
        "en/pretrain/gutenberg.txt.gz": (
            f"Project Gutenberg texts as distributed in NLTK's gutenberg corpus: {gutenberg}.",
            "Public domain.",
            "Each book cut into blocks of about 10,000 characters at paragraph breaks; every fifth block is "
            "held out (the classify and ner sentences come from those); the rest kept as they are, each run "
            "opened by the book's title line. Project Gutenberg's licence header is not part of NLTK's copies.",
        ),
        "en/pretrain/wikipedia.txt.gz": (
            "SQuAD v1.1 development set (Rajpurkar et al., 2016), https://rajpurkar.github.io/SQuAD-explorer/, "
            "paragraphs of English Wikipedia articles.",
            "CC BY-SA 4.0. Attribution: SQuAD v1.1 by Pranav Rajpurkar, Jian Zhang, Konstantin Lopyrev and "
            "Percy Liang; text from English Wikipedia contributors.",
            "The paragraphs of the first 38 articles (the training side of the qa and pair tasks), whitespace "
            "normalized, each article opened by its title. This derived file is CC BY-SA 4.0 too.",
        ),
        "en/classify/train.tsv, en/classify/dev.tsv": (
            "The Gutenberg books above.",
            "Public domain.",
            "Sentences (8-40 words) of the held-out blocks, a fixed number per book chosen by a seeded hash; "
            "the label is the book the sentence comes from.",
        ),
        "en/pair/train.tsv, en/pair/dev.tsv": (
            "SQuAD v1.1 development set (as above).",
            "CC BY-SA 4.0, attribution as above. These derived files are CC BY-SA 4.0 too.",
            "QNLI-style pairs built as GLUE's QNLI was: (question, sentence of its paragraph), entailment when "
            "the sentence holds the annotated answer span, not_entailment for another sentence of the "
            "paragraph that holds no gold answer and shares a content word with the question. Train from "
            "articles 1-38, dev from articles 39-48.",
        ),
        "en/qa/train.json, en/qa/dev.json": (
            "SQuAD v1.1 development set (as above).",
            "CC BY-SA 4.0, attribution as above. These derived files are CC BY-SA 4.0 too.",
            "Whole paragraphs sampled by a seeded hash, each context cut to its first sentences "
            f"(at most {QA_CONTEXT_CHARS['en']} characters); questions whose answers fall outside are dropped. "
            "Train from articles 1-38, dev from articles 39-48.",
        ),
        "en/ner/train.txt, en/ner/dev.txt": (
            "The Gutenberg books above (Emma, Persuasion, Sense and Sensibility, The Wisdom of Father Brown, "
            "Moby Dick).",
            "Public domain; the labels are bertkit's own (Apache-2.0).",
            "Silver labels: sentences of the held-out blocks tagged PER/LOC by gazetteers of each book's "
            "characters and places written for bertkit (scripts/build_demo_data.py) and a title rule "
            "(Mr., Lady, Captain ... + capitalized words = PER); sentences with a capitalized word the lists "
            "do not account for are dropped; a fifth of the names occur only in dev. See README.md for the "
            "method and its limits.",
        ),
        "zh/pretrain/novels.txt.gz": (
            "三国演义 (Luo Guanzhong), 水浒传 (Shi Nai'an), 红楼梦 (Cao Xueqin, Gao E), plain-text editions "
            "as gathered in bertkit's shared data.",
            "Public domain.",
            "Punctuation mapped to one full-width convention and 後/於/麽 to 后/于/么; sentences with garbled "
            "characters dropped; each novel cut into blocks of about 10,000 characters, of every five the "
            f"blocks {', '.join(str(k + 1) for k in ZH_PRETRAIN_BLOCKS)} kept here and block 5 held out for "
            "classify and ner.",
        ),
        "zh/pretrain/wikipedia.txt.gz": (
            "CMRC 2018 (Cui et al., 2019), https://github.com/ymcui/cmrc2018, development and trial sets: "
            "paragraphs of Chinese Wikipedia articles.",
            "CC BY-SA 4.0. Attribution: CMRC 2018 by Yiming Cui, Ting Liu, Wanxiang Che, Li Xiao, Zhipeng "
            "Chen, Wentao Ma, Shijin Wang and Guoping Hu; text from Chinese Wikipedia contributors.",
            "The paragraphs of the training side of the qa and pair tasks (about 4/5 of the articles, chosen "
            "by a seeded hash of the article id), runs of whitespace made one space, each opened by its title. "
            "This derived file is CC BY-SA 4.0 too.",
        ),
        "zh/classify/train.tsv, zh/classify/dev.tsv": (
            "The novels above.",
            "Public domain.",
            "Sentences (10-50 characters) of the held-out blocks, a fixed number per novel chosen by a seeded "
            "hash; the label is the novel (sanguo 三国演义, shuihu 水浒传, honglou 红楼梦).",
        ),
        "zh/pair/train.tsv, zh/pair/dev.tsv": (
            "CMRC 2018 (as above).",
            "CC BY-SA 4.0, attribution as above. These derived files are CC BY-SA 4.0 too.",
            "QNLI-style pairs, built as for English; a negative shares a character bigram with the question. "
            "Train and dev from disjoint articles.",
        ),
        "zh/qa/train.json, zh/qa/dev.json": (
            "CMRC 2018 (as above).",
            "CC BY-SA 4.0, attribution as above. These derived files are CC BY-SA 4.0 too.",
            "Whole paragraphs sampled by a seeded hash, each context cut to its first sentences "
            f"(at most {QA_CONTEXT_CHARS['zh']} characters); answer offsets moved to the nearest occurrence "
            "of the answer text; answers not in the cut context dropped. Train and dev from disjoint articles.",
        ),
        "zh/ner/train.txt, zh/ner/dev.txt": (
            "三国演义 and 水浒传 (as above); jieba 0.42.1 (MIT, https://github.com/fxsjy/jieba) to propose "
            "and screen names.",
            "Public domain text; the labels are bertkit's own (Apache-2.0).",
            "Silver labels, one character a line: names proposed by jieba.posseg (nr, ns) over each novel, "
            "reviewed and typed PER/LOC by hand (scripts/build_demo_data.py), matched longest-first in the "
            "held-out sentences; sentences where jieba sees a name outside the reviewed lists are dropped; a "
            "fifth of the names occur only in dev. See README.md for the method and its limits.",
        ),
        "README.md, DATA_LICENSES": (
            "Written for bertkit.", "Apache-2.0, as bertkit.", "Generated by scripts/build_demo_data.py.",
        ),
    }
    listed = {name for key in entries for name in key.split(", ")}
    missing = sorted((set(files) | {"DATA_LICENSES", "README.md"}) - listed)
    if missing:
        raise AssertionError(f"files without a licence entry: {missing}")
    out = [
        "Data shipped with bertkit (src/bertkit/data/) for `bertkit demo`",
        "",
        "Every file below, with where it comes from, its licence, and how it was made. Files derived from",
        "CC BY-SA 4.0 material are distributed under CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/),",
        "with the attribution given; the rest is public domain text or bertkit's own work (Apache-2.0).",
        "All of it is rebuilt by scripts/build_demo_data.py from the sources named.",
        "",
    ]
    for key, (source, licence, how) in entries.items():
        sizes = ", ".join(f"{name} {_size(files[name])}" for name in key.split(", ") if name in files)
        out += [f"File: {key}", f"Source: {source}", f"License: {licence}", f"Derivation: {how}"]
        out += [f"Size: {sizes}"] if sizes else []
        out.append("")
    return "\n".join(out)


def readme(stats: dict[str, Stats]) -> str:
    """Gives README.md: the tasks, their label sets and sizes, and how the silver labels were made."""
    def row(key: str, task: str, what: str) -> str:
        s = stats[key]
        labels = ", ".join(s.labels) if s.labels else "answer spans"
        return f"| {key} | {task} | {what} | {s.rows['train']:,} / {s.rows['dev']:,} | {labels} |"

    return "\n".join([
        "# Built-in demo data",
        "",
        "Small, redistributable data for `bertkit demo`: pre-training text and the four task families in",
        "English (`en/`) and Chinese (`zh/`). Sources, licences and attribution: `DATA_LICENSES`. Rebuilt by",
        "`scripts/build_demo_data.py` (`--check` verifies these files).",
        "",
        "- `pretrain/*.txt.gz`: prose, blank lines between paragraphs, a title line before each document run.",
        "  en: six Gutenberg books (4/5 of each) and the SQuAD training articles' Wikipedia paragraphs; zh:",
        "  三国演义, 水浒传, 红楼梦 (2/5 of each) and the CMRC 2018 training paragraphs.",
        "- Sentences of the classify and ner tasks come from blocks held out of the pre-training text; QA and",
        "  pair dev articles are not in it either.",
        "",
        "| data | task | what | train / dev | labels |",
        "|---|---|---|---|---|",
        row("en/classify", "classify", "which of six books a sentence comes from"),
        row("en/pair", "pair", "QNLI-style: does the sentence hold the answer to the question (SQuAD)"),
        row("en/qa", "qa", "SQuAD v1.1 questions, short contexts"),
        row("en/ner", "ner", "persons and places in sentences of five novels (silver)"),
        row("zh/classify", "classify", "which of three novels a sentence comes from"),
        row("zh/pair", "pair", "QNLI-style, from CMRC 2018"),
        row("zh/qa", "qa", "CMRC 2018 questions, short contexts"),
        row("zh/ner", "ner", "persons and places in sentences of 三国演义 and 水浒传, a character a line (silver)"),
        "",
        "Formats: TSV with a header (`sentence\\tlabel`, `sentence1\\tsentence2\\tlabel`), SQuAD v1.1 JSON,",
        "CoNLL columns (`token TAG`, BIO, blank line between sentences).",
        "",
        "## How the NER labels were made, and their limits",
        "",
        "These are silver labels: no person annotated these sentences.",
        "",
        "- English: for each book, lists of its characters and places written by hand (in the build script),",
        "  matched longest-first; a run of capitalized words after a title (Mr., Mrs., Lady, Captain, ...) is",
        "  a person; adjacent person words form one entity. A sentence keeps only if every capitalized word",
        "  is accounted for (a listed name, a word like God, English, Monday, or a sentence-initial word the",
        "  book also writes in lowercase); otherwise it is dropped rather than taught as O. As in CoNLL-2003,",
        "  a title is not part of the name: in `Mr. Knightley`, `Mr.` is O and `Knightley` is B-PER.",
        "  Limits: ships, inns, whales and the like are not entities here (sentences naming them are",
        "  dropped); nationalities are O (there is no MISC or ORG); a listed word used as a common noun at",
        "  the start of a sentence would be mislabelled.",
        "- Chinese: jieba 0.42.1's part-of-speech tagger proposed names (nr, ns) over each novel; every name",
        "  it proposed 15 times or more was reviewed by hand, typed PER or LOC or rejected (jieba calls 上马",
        "  and 哥哥 places). The lists are matched longest-first, one tag per character. A sentence is",
        "  dropped when jieba sees a name there that the review did not cover. Limits: one-character",
        "  references (瑜 for 周瑜, 飞 for 张飞) and nicknames (黑旋风) are O; courtesy names are PER only",
        "  when listed; a listed name inside a longer word (汉中 in 汉中王) is tagged.",
        "- Neither has ORG: the novels name few organizations, and jieba found almost none (nt).",
        "- The split: a fifth of the names (by a seeded hash of the name) occur only in dev, so that about",
        "  half of the dev entities are names never seen in training. Since the gold comes from name lists,",
        "  looking up the training names would otherwise score over 95 F1; the held-out names ask what a",
        "  model learnt about names in context (run `scripts/build_demo_data.py --baselines`).",
        "",
    ])


# ---------------------------------------------------------------------------------------------------
# Baselines: do the labels carry signal a simple model finds, without being trivial?


def _read_tsv(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()[1:]]


def _features(texts: list[list[str]], vocab: dict[str, int]):
    import numpy as np

    x = np.zeros((len(texts), len(vocab)), np.float32)
    for i, words in enumerate(texts):
        for w in words:
            if w in vocab:
                x[i, vocab[w]] += 1
    return np.log1p(x)


def _logistic_regression(x_train, y_train, x_dev, k: int, l2: float = 1e-3, steps: int = 300):
    """Gives dev predictions of a softmax regression trained full-batch with Adam (numpy only)."""
    import numpy as np

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
    import numpy as np

    labels = sorted({y for _, y in train})
    counts = collections.Counter(w for words, _ in train for w in set(words))
    vocab = {w: i for i, w in enumerate(sorted(w for w, n in counts.items() if n >= 2))}
    y_train = np.array([labels.index(y) for _, y in train])
    y_dev = np.array([labels.index(y) for _, y in dev])
    pred = _logistic_regression(_features([w for w, _ in train], vocab), y_train,
                                _features([w for w, _ in dev], vocab), len(labels))
    majority = collections.Counter(y_train.tolist()).most_common(1)[0][0]
    return 100 * float(np.mean(y_dev == majority)), 100 * float(np.mean(pred == y_dev))


def _words(text: str, zh: bool) -> list[str]:
    if zh:
        chars = [c for c in text if not c.isspace()]
        return chars + [a + b for a, b in itertools.pairwise(chars)]
    return re.findall(r"[a-z0-9]+", text.lower())


def _pair_words(question: str, sentence: str, zh: bool) -> list[str]:
    """Gives the question's words (marked) and the sentence's: a bag that cannot see their overlap."""
    return ["q:" + w for w in _words(question, zh)] + _words(sentence, zh)


def _overlap(question: str, sentence: str, zh: bool) -> list[float]:
    """Gives overlap features: shared content words, their share of the question's, sentence length."""
    q, s = _content_words(question, zh), _content_words(sentence, zh)
    return [len(q & s), len(q & s) / max(1, len(q)), len(s) / 50]


def baselines(out: Path) -> list[str]:
    """Gives report lines: majority and simple-model scores on the dev files of classify, pair and ner."""
    import numpy as np

    lines = []
    for lang in ("en", "zh"):
        zh = lang == "zh"
        train, dev = (_read_tsv(out / lang / "classify" / f"{s}.tsv") for s in ("train", "dev"))
        maj, bow = _bow_accuracy([(_words(t, zh), y) for t, y in train], [(_words(t, zh), y) for t, y in dev])
        lines.append(f"{lang} classify: majority {maj:.1f}%, bag-of-words logistic regression {bow:.1f}%")

        train, dev = (_read_tsv(out / lang / "pair" / f"{s}.tsv") for s in ("train", "dev"))
        maj, bow = _bow_accuracy([(_pair_words(q, s, zh), y) for q, s, y in train],
                                 [(_pair_words(q, s, zh), y) for q, s, y in dev])
        x_train = np.array([_overlap(q, s, zh) for q, s, _ in train], np.float32)
        x_dev = np.array([_overlap(q, s, zh) for q, s, _ in dev], np.float32)
        mu, sd = x_train.mean(0), x_train.std(0) + 1e-6
        y_train = np.array([y == "entailment" for *_, y in train], int)
        y_dev = np.array([y == "entailment" for *_, y in dev], int)
        pred = _logistic_regression((x_train - mu) / sd, y_train, (x_dev - mu) / sd, 2, l2=0.0, steps=500)
        lines.append(f"{lang} pair: majority {maj:.1f}%, bag-of-words (question and sentence words, no "
                     f"interaction) {bow:.1f}%, word-overlap logistic regression {100 * np.mean(pred == y_dev):.1f}%")

        sentences = {}
        for split in ("train", "dev"):
            text = (out / lang / "ner" / f"{split}.txt").read_text(encoding="utf-8").strip()
            sentences[split] = [[line.split(" ") for line in block.split("\n")] for block in text.split("\n\n")]
        lines.append(f"{lang} ner: {_lexicon_f1(sentences['train'], sentences['dev'])}")
    return lines


def _lexicon_f1(train: list[list[list[str]]], dev: list[list[list[str]]]) -> str:
    """Gives a line on a memorizing baseline: each dev entity string seen in train gets its train type."""
    seen: dict[tuple[str, ...], collections.Counter] = collections.defaultdict(collections.Counter)
    for sent in train:
        words = [w for w, _ in sent]
        for a, b, kind in _entities([t for _, t in sent]):
            seen[tuple(words[a:b])][kind] += 1
    longest = max(len(k) for k in seen)
    tp = n_gold = n_pred = unseen = 0
    for sent in dev:
        words = [w for w, _ in sent]
        gold = _entities([t for _, t in sent])
        pred, i = set(), 0
        while i < len(words):
            for size in range(min(longest, len(words) - i), 0, -1):
                key = tuple(words[i : i + size])
                if key in seen:
                    pred.add((i, i + size, seen[key].most_common(1)[0][0]))
                    i += size
                    break
            else:
                i += 1
        tp += len(gold & pred)
        n_gold += len(gold)
        n_pred += len(pred)
        unseen += sum(tuple(words[a:b]) not in seen for a, b, _ in gold)
    p, r = tp / max(1, n_pred), tp / max(1, n_gold)
    return (f"{n_gold} dev entities, {100 * unseen / n_gold:.1f}% never seen in train; train-lexicon lookup "
            f"P {100 * p:.1f} R {100 * r:.1f} F1 {200 * p * r / max(1e-9, p + r):.1f}")


# ---------------------------------------------------------------------------------------------------
# Main: write, or check


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
                        help="only print majority and simple-model scores of the files in --out (needs numpy)")
    args = parser.parse_args(argv)
    if args.baselines:
        print("\n".join(baselines(args.out)))
        return 0
    files = build(args.shared)
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
