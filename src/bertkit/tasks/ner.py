"""Named entity recognition (CoNLL-2003, MSRA) as the paper does it: words -> WordPieces, each word
tagged from its first sub-token (the rest and the specials carry -100), -> BertForTokenClassification.

Long sentences are split, not truncated: a sentence longer than max_seq_length - 2 word pieces is
cut into windows at word boundaries, each starting about half a window after the previous one, and
each word takes its tag from the window where it has the most context on both sides (the rule
run_squad.py uses for overlapping QA windows). No word is lost; a word the tokenizer turns into
nothing (a lone control character) has no sub-token and is predicted "O" (counted in the features).

Tags are learnt and predicted in one scheme, BIO by default (IOB1 files such as CoNLL-2003 are
converted), or BIOES (`NERTask(scheme="BIOES")`, as the paper's Chinese NER example); gold files in
any scheme are converted to it, and scores compare entities, whatever the schemes.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..config import IGNORE
from ..errors import BertkitError
from ..schemes import (
    SCHEMES,
    Entity,
    TagScores,
    check_tag,
    convert,
    detect_scheme,
    entities,
    scheme_of_labels,
    split_tag,
    tag_set,
)
from ..text import has_cjk
from .base import (
    STRING,
    Dataset,
    Family,
    Features,
    InputError,
    ReadReport,
    check_text,
    obj,
    output_rows,
    pad_rows,
)
from .metrics import entity_scores
from .readers import BadRows, bad_row, read_text, text_lines
from .tables import DEFAULT_NAMES


@dataclass(frozen=True)
class TagExample:
    """A sentence as words (or characters) with one tag per word; `spans` index `text` when known."""

    words: tuple[str, ...]
    tags: tuple[str, ...] | None
    line: int  # line of the first word; word i is on line + i in a CoNLL file
    text: str | None = None  # the original text, for user input
    spans: tuple[tuple[int, int], ...] | None = None  # each word's (start, end) in `text`


@dataclass
class NERFeatures(Features):
    """Rows plus, per row, which positions carry a word's tag, which word, and whether the row decides it."""

    positions: list[np.ndarray] = field(default_factory=list)  # per row: token positions of first sub-tokens
    words: list[np.ndarray] = field(default_factory=list)  # per row: the word index at each of those positions
    decides: list[np.ndarray] = field(default_factory=list)  # per row: bool, this window has the word's max context
    scheme: str = "BIO"
    words_without_tokens: int = 0


@dataclass
class TagPrediction:
    example: TagExample
    tags: list[str]  # one per word, in `scheme`
    entities: list[Entity]  # (type, first word, end word exclusive)
    scheme: str


def token_windows(word_starts: np.ndarray, n_tokens: int, budget: int) -> list[tuple[int, int]]:
    """Gives token windows (start, end) of at most `budget` tokens, cut at word starts, about half overlapping.

    `word_starts` are the token indices where words begin (sorted). A single word longer than the
    budget is cut inside; its tail pieces carry no tag, so nothing that matters is lost.
    """
    if n_tokens <= budget:
        return [(0, n_tokens)]
    spans = []
    a = 0
    while True:
        b = a + budget
        if b >= n_tokens:
            spans.append((a, n_tokens))
            return spans
        cut = word_starts[np.searchsorted(word_starts, b, side="right") - 1]
        b = cut if cut > a else b
        spans.append((a, b))
        k = np.searchsorted(word_starts, a + max(1, min(budget // 2, b - a)), side="left")
        if k == len(word_starts):
            return spans  # only tail pieces of the last word remain
        a = int(word_starts[k])


@dataclass
class NERTask:
    """Named entity recognition over words (English) or characters (Chinese).

    `scheme` is the tagging scheme to learn ("BIO" or "BIOES"); None keeps the training file's own
    (IOB1 becoming BIO). `strict` scores only well-formed entities (seqeval's strict mode). `crf` puts a
    linear-chain CRF over the tags (bertkit.crf): trained on whole sentences, decoded by Viterbi.
    Without a CRF each word takes its most probable tag alone, as in BERT's paper; `constrained`
    decodes instead the most probable tag sequence that the scheme allows (no I-X after O, no O
    after B-X in BIOES, ...), so that predictions are well formed in the training scheme.
    """

    name: str = "ner"
    scheme: str | None = None
    max_seq_length: int = 128
    strict: bool = False
    constrained: bool = False
    crf: bool = False
    main_metric: str = "f1"
    architecture: str = "BertForTokenClassification"
    problem_type: str | None = None
    variant: str = ""
    outputs: tuple[str, ...] = ("logits",)
    per_token: bool = True
    class_weighted: bool = False
    metric_names: tuple[str, ...] = ("precision", "recall", "f1")  # also per entity type: "f1/PER", ...

    def __post_init__(self) -> None:
        if self.scheme not in (None, "BIO", "BIOES"):
            raise BertkitError(f"NER trains in BIO or BIOES, not {self.scheme!r} (IOB1 files are converted)")

    @property
    def per_token_loss(self) -> bool:
        return not self.crf  # a CRF's loss is per sentence

    @property
    def soft_targets(self) -> str:
        return "emissions" if self.crf else "classes"  # a CRF student matches the teacher's emission scores

    @property
    def json_fields(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return DEFAULT_NAMES["text"], ()

    @property
    def model_options(self) -> dict[str, Any]:
        return {"problem_type": self.problem_type, **({"crf": True} if self.crf else {})}

    def read(self, path: str | Path, **fmt: Any) -> Dataset:
        """Gives the sentences of a CoNLL-style file; `fmt` goes to `readers.read_conll` (normalize="NFKC", ...)."""
        return read_conll(path, **fmt)

    def labels(self, train: Dataset) -> list[str]:
        """Gives "O" and every tag of the training scheme for each entity type in `train`, sorted by type."""
        scheme = self.scheme or ("BIO" if train.scheme in (None, "IOB1") else train.scheme)
        types = {split_tag(t)[1] for e in train for t in (e.tags or ()) if t != "O"}
        return tag_set(types, scheme)

    def featurize(self, data: Dataset, tok: Any, label2id: dict[str, int] | None, *,
                  max_seq_length: int | None = None) -> NERFeatures:
        """Gives one row per sentence window, with per-token labels when the sentences are tagged.

        `label2id` is the model's (config.label2id); its tags say the scheme (BIOES if it has E-/S-,
        else BIO). Gold tags are first rewritten in that scheme; a tag not among them (a type never
        seen in training) is a BertkitError naming the file, line, tag and the known tags.
        """
        if not label2id:
            raise ValueError("featurize needs label2id (the model's config.label2id) to decode tags")
        budget = (max_seq_length or self.max_seq_length) - 2
        scheme = scheme_of_labels(label2id)
        tagged = len(data) > 0 and data[0].tags is not None
        if tagged:
            data = with_scheme(data, scheme)
        texts = [" ".join(e.words) for e in data]
        encodings = tok.encode_batch(texts, add_special_tokens=False)
        layout = _Layout(data, encodings)
        targets = self._targets(data, label2id) if tagged else None
        cls, sep = tok.cls_token_id, tok.sep_token_id
        out = NERFeatures([], data, np.zeros(0, np.int64), [], tok.pad_token_id, scheme=scheme)
        out.labels = sorted(label2id, key=label2id.__getitem__)
        out.words_without_tokens = len(layout.word_start) - int(layout.first.sum())
        example_index = []
        for i, enc in enumerate(encodings):
            t0, t1 = layout.token_bounds[i], layout.token_bounds[i + 1]
            word_starts = np.flatnonzero(layout.first[t0:t1])  # token index of each word's first piece
            words = layout.word_of[t0:t1][word_starts]  # which word each is (within the sentence)
            spans = token_windows(word_starts, t1 - t0, budget)
            owner = _owners(spans, word_starts)
            for w, (a, b) in enumerate(spans):
                lo, hi = (0, len(word_starts)) if len(spans) == 1 else np.searchsorted(word_starts, (a, b))
                positions = word_starts[lo:hi] - a + 1
                row: dict[str, Any] = {"input_ids": [cls, *enc.ids[a:b], sep], "token_type_ids": [0] * (b - a + 2)}
                if targets is not None:
                    labels = np.full(b - a + 2, IGNORE, dtype=np.int64)
                    labels[positions] = targets[layout.word_bounds[i] + words[lo:hi]]
                    row["labels"] = labels.tolist()
                out.rows.append(row)
                out.positions.append(positions)
                out.words.append(words[lo:hi])
                out.decides.append(owner[lo:hi] == w)
                example_index.append(i)
        out.example_index = np.asarray(example_index, np.int64)
        return out

    def _targets(self, data: Dataset, label2id: dict[str, int]) -> np.ndarray:
        """Gives the label id of every word of `data`, sentence after sentence."""
        tags = list(itertools.chain.from_iterable(e.tags for e in data))
        try:
            return np.fromiter(map(label2id.__getitem__, tags), dtype=np.int64, count=len(tags))
        except KeyError:
            e, k, tag = next((e, k, t) for e in data for k, t in enumerate(e.tags) if t not in label2id)
            raise BertkitError(f"{data.source} line {e.line + k}: tag {tag!r} is not one of "
                               f"{sorted(label2id, key=label2id.__getitem__)} (the tags seen in training)") from None

    def collate(self, rows: list[dict[str, Any]], pad_token_id: int = 0) -> dict[str, np.ndarray]:
        """Gives input_ids, token_type_ids, attention_mask (+ labels, -100 on padding), padded."""
        return pad_rows(rows, pad_token_id)

    def decode(self, features: NERFeatures, outputs: Any, *, crf: TagScores | None = None) -> list[TagPrediction]:
        """Gives each sentence's word tags from the (rows, tokens, labels) logits: Viterbi under a CRF's scores
        (`crf`, from `CRF.tag_scores`), the best sequence the scheme allows (`constrained`), or each word's argmax."""
        rows = output_rows(outputs, ("logits",), features.lengths)
        per_row = [logits[pos] for (logits,), pos in zip(rows, features.positions, strict=True)]  # (words, C)
        if crf is not None:
            ids = _viterbi(crf, per_row)
        elif self.constrained:
            log_probs = [x - np.logaddexp.reduce(x, axis=-1, keepdims=True) for x in per_row]  # (words, C)
            ids = _viterbi(TagScores.constraints(features.labels, features.scheme), log_probs)
        else:
            ids = [x.argmax(-1) if len(x) else np.zeros(0, np.int64) for x in per_row]
        names = np.asarray(features.labels, dtype=object)
        tags = [np.full(len(e.words), "O", dtype=object) for e in features.data]
        for r, row_ids in enumerate(ids):
            keep = features.decides[r]
            tags[features.example_index[r]][features.words[r][keep]] = names[np.asarray(row_ids, np.int64)[keep]]
        return [TagPrediction(e, list(t), entities(t), features.scheme) for e, t in zip(features.data, tags, strict=True)]

    def score(self, data: Dataset, predictions: Sequence[TagPrediction]) -> dict[str, float]:
        """Gives entity precision, recall and f1 (percent), overall and per type ("f1/PER", ...)."""
        gold = [list(e.tags) for e in data]
        strict = predictions[0].scheme if self.strict and predictions else None
        if strict:
            gold = [list(e.tags) for e in with_scheme(data, strict)]
        return entity_scores(gold, [p.tags for p in predictions], strict_scheme=strict)

    def tuned_options(self, features: Features, outputs: Callable[[], Any]) -> dict[str, Any]:
        """Nothing of this task is tuned on dev after training."""
        return {}

    def prediction_json(self, prediction: TagPrediction) -> dict[str, Any]:
        """Gives the words, their tags, and the entities with their text and character span in the text."""
        e = prediction.example
        if e.text is not None and e.spans is not None:
            text, spans = e.text, e.spans
        else:  # a file's sentence: characters join without spaces, words with one
            joiner = "" if all(len(w) == 1 for w in e.words) else " "
            text = joiner.join(e.words)
            ends = np.cumsum([len(w) + len(joiner) for w in e.words]) - len(joiner)
            spans = tuple((int(end) - len(w), int(end)) for w, end in zip(e.words, ends, strict=True))
        found = []
        for kind, a, b in prediction.entities:
            start, end = spans[a][0], spans[b - 1][1]
            found.append({"type": kind, "text": text[start:end], "start": start, "end": end,
                          "word_start": a, "word_end": b})
        return {"text": text, "words": list(e.words), "tags": prediction.tags, "entities": found}

    def inputs_from_texts(self, texts: Sequence[str | Sequence[str]], pairs: Sequence[str] | None = None, *,
                          split: str = "auto", normalize: str | None = None) -> Dataset:
        """Gives untagged sentences from user text: split into words (English) or characters (Chinese), or
        given as words already (a list of strings: the text is the words joined by spaces).

        `split` is "auto" (characters when the text holds CJK ideographs, else CoNLL's tokens), "conll",
        "whitespace" (words split already) or "chars";
        `normalize="NFKC"` normalizes each word as `read(..., normalize="NFKC")` did for training,
        while the spans keep pointing into the original text.
        """
        if pairs is not None:
            raise BertkitError("NER takes single texts, not pairs")
        examples = []
        for i, text in enumerate(texts):
            if isinstance(text, str):
                words, spans = words_of(text, split)
            else:
                words, text = tuple(text), " ".join(text)
                ends = np.cumsum([len(w) + 1 for w in words]) - 1
                spans = tuple((int(end) - len(w), int(end)) for w, end in zip(words, ends, strict=True))
            if normalize:
                words = tuple(unicodedata.normalize(normalize, w) for w in words)
            examples.append(TagExample(words, None, i + 1, text, spans))
        return Dataset(examples, ReadReport("<input>", kept=len(examples)))

    def texts_of(self, example: TagExample) -> tuple[tuple[str, ...], None]:
        return example.words, None

    second = None

    def check_input(self, item: Any, where: str) -> None:
        """A text, or a list of words (no white space in a word)."""
        if not isinstance(item, list):
            check_text(item, where)
            return
        if not item:
            raise InputError(f"{where}: the list of words is empty")
        for k, word in enumerate(item):
            check_text(word, f"{where}[{k}]")
            if any(c.isspace() for c in word):
                raise InputError(f"{where}[{k}]: a word holds white space ({word!r})")

    def split_inputs(self, items: Sequence[Any]) -> tuple[list[Any], list[str] | None]:
        return list(items), None

    def show_input(self, text: str, second: str | None) -> str:
        return text

    def show_prediction(self, prediction: dict[str, Any]) -> str:
        """The entities' texts by type: "PER: Emma, Knightley; LOC: Highbury"."""
        found: dict[str, list[str]] = {}
        for e in prediction.get("entities", []):
            found.setdefault(e["type"], []).append(e["text"])
        return "; ".join(f"{kind}: {', '.join(texts)}" for kind, texts in found.items()) or "(no entities)"

    def matches(self, prediction: dict[str, Any], expected: str) -> bool:
        found = {(e["type"], e["text"]) for e in prediction.get("entities", [])}
        wanted = {(kind.strip(), name.strip()) for part in expected.split(";") if ":" in part
                  for kind, names in [part.split(":", 1)] for name in names.split(",")}
        return found == wanted

    input_schema = {"oneOf": [STRING, {"type": "array", "items": STRING, "minItems": 1,
                                       "description": "words, split already (no white space in a word)"}]}
    prediction_schema = obj({
        "text": {"type": "string"}, "words": {"type": "array", "items": {"type": "string"}},
        "tags": {"type": "array", "items": {"type": "string"}},
        "entities": {"type": "array", "items": obj({"type": {"type": "string"}, "text": {"type": "string"},
                                                    "start": {"type": "integer"}, "end": {"type": "integer"},
                                                    "word_start": {"type": "integer"}, "word_end": {"type": "integer"}})},
    })

    def relevance(self, prediction: dict[str, Any], raw: bool = False) -> float | None:
        return None

    def reranks(self, labels: Sequence[str]) -> bool:
        return False

    def learner(self) -> None:
        """Trained by the task model's own loss."""
        return None


NER = Family("ner", NERTask, frozenset({"scheme", "crf", "constrained"}), "named entity recognition",
             "token-classification")


class _Layout:
    """Where every token and word of a dataset lies, for all sentences at once (joined by single spaces).

    token_bounds / word_bounds: (sentences + 1,) where each sentence's tokens / words begin;
    word_start: (words,) character start of each word in the joined text; word_of: (tokens,) the
    token's word within its sentence; first: (tokens,) whether the token is its word's first piece.
    """

    def __init__(self, data: Dataset, encodings: Sequence[Any]):
        n_words = np.fromiter((len(e.words) for e in data), dtype=np.int64, count=len(data))
        n_tokens = np.fromiter((len(enc.ids) for enc in encodings), dtype=np.int64, count=len(encodings))
        self.word_bounds = np.concatenate([[0], np.cumsum(n_words)])
        self.token_bounds = np.concatenate([[0], np.cumsum(n_tokens)])
        lengths = np.fromiter(map(len, itertools.chain.from_iterable(e.words for e in data)), dtype=np.int64,
                              count=int(self.word_bounds[-1])) + 1  # each word and the space after it
        self.word_start = np.cumsum(lengths) - lengths  # (words,), in all texts joined by " "
        sentence_start = self.word_start[np.minimum(self.word_bounds[:-1], len(self.word_start) - 1)]
        offsets = np.array([a for enc in encodings for a, _ in enc.offsets], dtype=np.int64)
        token_start = offsets + np.repeat(sentence_start, n_tokens)  # (tokens,) in the joined texts
        global_word = np.searchsorted(self.word_start, token_start, side="right") - 1
        self.word_of = global_word - np.repeat(self.word_bounds[:-1], n_tokens)
        self.first = np.ones(len(global_word), dtype=bool)
        self.first[1:] = global_word[1:] != global_word[:-1]


def _owners(spans: list[tuple[int, int]], word_starts: np.ndarray) -> np.ndarray:
    """Gives, per word start, the window where it has the most context (as QA's max-context rule)."""
    if len(spans) == 1:
        return np.zeros(len(word_starts), np.int64)
    score = np.full((len(spans), len(word_starts)), -np.inf)
    for w, (a, b) in enumerate(spans):
        inside = (word_starts >= a) & (word_starts < b)
        j = word_starts[inside]
        score[w, inside] = np.minimum(j - a, b - 1 - j) + 0.01 * (b - a)
    return score.argmax(0)


def _viterbi(scores: TagScores, per_row: list[np.ndarray]) -> list[list[int]]:
    """Gives the best tag ids for each row's word-level logits, rows decoded as one padded batch."""
    W = max((len(x) for x in per_row), default=0)
    if W == 0:
        return [[] for _ in per_row]
    em = np.zeros((len(per_row), W, len(scores.start)), np.float32)
    for r, x in enumerate(per_row):
        em[r, : len(x)] = x
    return scores.viterbi(em, [len(x) for x in per_row])


# ---- reading CoNLL files, splitting user text ---------------------------------------------------------


_BIOES_ALIASES = {"M-": "I-", "L-": "E-", "U-": "S-"}


def read_conll(
    path: str | Path,
    *,
    word_column: int = 0,
    tag_column: int = -1,
    delimiter: str | None = None,
    scheme: str | None = None,
    normalize: str | None = None,
    bad_rows: BadRows = "error",
) -> Dataset:
    """Gives the TagExamples of a CoNLL-style file: a word a line, tag in `tag_column`, blank between sentences.

    `-DOCSTART-` lines are skipped. `delimiter` is a tab when the first word line has one, else any
    whitespace. `scheme` names the file's tag scheme (IOB1, BIO, BIOES); by default it is detected
    (CoNLL-2003 is IOB1). `normalize="NFKC"` maps full-width digits and letters to half-width, as
    MSRA's test file needs to match its training file. BMES's M- and BILOU's L- and U- tags are read
    as BIOES's I-, E- and S-. A line with the wrong number of columns, or a
    tag that is not O / B-X / I-X / E-X / S-X, is an "error" naming file and line, or with
    `bad_rows="skip"` drops its whole sentence, counted.
    """
    path = Path(path)
    lines = text_lines(read_text(path))
    report = ReadReport(str(path))
    sentences: list[TagExample] = []
    words: list[str] = []
    tags: list[str] = []
    first = 0
    broken = False
    n_cols: int | None = None
    valid_tags: set[str] = set()  # tags already checked: a file has few distinct ones

    def close() -> None:
        nonlocal words, tags, broken
        if words and not broken:
            sentences.append(TagExample(tuple(words), tuple(tags), first))
        words, tags, broken = [], [], False

    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            close()
            continue
        if raw.startswith("-DOCSTART-"):
            close()
            continue
        if delimiter is None:
            delimiter = "\t" if "\t" in raw else " "
        cells = raw.split("\t") if delimiter == "\t" else raw.split()
        if n_cols is None:
            n_cols = len(cells)
            if n_cols < 2:
                raise BertkitError(f"{path} line {n}: one column only; expected a word and a tag")
        if not words:
            first = n
        if broken:
            continue
        if len(cells) != n_cols:
            bad_row(report, bad_rows, path, f"line {n}", "wrong number of columns", f": {len(cells)}, expected {n_cols}")
            broken = True
            continue
        tag = cells[tag_column].strip()
        if tag[:2] in _BIOES_ALIASES:  # BMES and BILOU are BIOES by other letters
            tag = _BIOES_ALIASES[tag[:2]] + tag[2:]
        if tag not in valid_tags:
            if not check_tag(tag):
                bad_row(report, bad_rows, path, f"line {n}", "malformed tag", f" {tag!r} (expected O or B-/I-/E-/S-TYPE)")
                broken = True
                continue
            valid_tags.add(tag)
        word = cells[word_column]
        words.append(unicodedata.normalize(normalize, word) if normalize else word)
        tags.append(tag)
    close()
    if not sentences and not report.total_skipped:
        raise BertkitError(f"{path}: holds no sentences")
    detected = detect_scheme(s.tags for s in sentences if s.tags)
    if scheme is not None and scheme not in SCHEMES:
        raise BertkitError(f"unknown tag scheme {scheme!r}; use one of {list(SCHEMES)}")
    report.kept = len(sentences)
    return Dataset(sentences, report, scheme=scheme or detected)


def with_scheme(data: Dataset, scheme: str) -> Dataset:
    """Gives a tagged dataset with its tags rewritten in `scheme` (same entities); itself if already so."""
    if data.scheme == scheme or data.scheme is None:
        return data
    examples = [replace(e, tags=tuple(convert(e.tags, scheme, data.scheme))) if e.tags else e for e in data]
    return Dataset(examples, data.report, scheme=scheme, impossible=data.impossible)


# CoNLL-2003's tokens: abbreviations and dotted initials stay whole, numbers keep their separators,
# hyphenated words stay one, possessive 's and n't stand apart, every other punctuation mark is a token
_CONLL_TOKEN = re.compile(r"""
    (?:[A-Za-z]\.){2,}                                            # U.S., U.N.
  | (?:Mr|Mrs|Ms|Dr|Prof|St|Jr|Sr|Inc|Ltd|Co|Corp|Gen|Sen|Rep|Gov|Jan|Feb|Aug|Sept?|Oct|Nov|Dec)\.(?!\w)
  | [A-Z]\.(?!\w)                                                  # an initial: P. Sampras
  | \d+(?:[.,:/]\d+)*[A-Za-z]*(?:-\w+)*                               # 1,000.5  12:30  3-1  37-run  31st
  | \.\d+                                                          # .596
  | \.{2,}|-{2,}                                                   # ...  --
  | \w+(?=n't)                                                    # do | n't
  | n't
  | '(?:s|S|re|ve|ll|d|m)(?!\w)                                    # 's 're ...
  | \w+(?:[-&]\w+|'(?!(?:s|S|re|ve|ll|d|m)(?!\w))\w+)*               # ex-champion, O'Neill, AT&T
  | [^\w\s]                                                       # any other mark, alone
""", re.VERBOSE)


def words_of(text: str, how: str = "auto") -> tuple[tuple[str, ...], tuple[tuple[int, int], ...]]:
    """Gives the words of `text` and their character spans.

    `how` is "conll" (punctuation split off as CoNLL-2003's tokens are: "came." -> "came", "."; "U.S." and
    "Mr." stay whole), "whitespace" (words given already split), "chars" (every non-space character, as
    MSRA and the paper's Chinese NER), or "auto": characters when the text holds a CJK ideograph, else conll.
    """
    if how == "auto":
        how = "chars" if has_cjk(text) else "conll"
    spans: list[tuple[int, int]] = []
    if how == "chars":
        spans = [(i, i + 1) for i, c in enumerate(text) if not c.isspace()]
    elif how == "conll":
        spans = [m.span() for m in _CONLL_TOKEN.finditer(text)]
    elif how == "whitespace":
        i = 0
        for piece in text.split():
            i = text.index(piece, i)
            spans.append((i, i + len(piece)))
            i += len(piece)
    else:
        raise BertkitError(f"unknown word split {how!r}; use auto, conll, whitespace or chars")
    return tuple(text[a:b] for a, b in spans), tuple(spans)
