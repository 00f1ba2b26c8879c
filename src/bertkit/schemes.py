"""Tag schemes for NER (IOB1, BIO, BIOES): entities out of tags, tags out of entities, conversions, and
decoding the best tag sequence under transition scores (a CRF's, or only the scheme's rules).

An entity is (type, start, end) with `end` exclusive. `entities` reads any scheme with conlleval's
chunk rules (what seqeval's default mode does), so it accepts the malformed sequences a model may
predict; `strict_entities` keeps only chunks well formed in a named scheme (seqeval's strict mode).
Converting goes through entities, so IOB1 -> BIO -> BIOES -> BIO -> IOB1 gives back what it started from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

SCHEMES = ("IOB1", "BIO", "BIOES")
Entity = tuple[str, int, int]  # (type, start, end), end exclusive

_TAG = re.compile(r"O|[BIES]-\S+")


def check_tag(tag: str) -> bool:
    """Tells whether `tag` is O or a prefix B/I/E/S, a hyphen and a type."""
    return _TAG.fullmatch(tag) is not None


def split_tag(tag: str) -> tuple[str, str]:
    """Gives (prefix, type): "B-PER" -> ("B", "PER"), "O" -> ("O", "")."""
    return (tag, "") if tag == "O" else (tag[0], tag[2:])


def detect_scheme(sequences: Iterable[Sequence[str]]) -> str:
    """Gives the scheme of tag sequences: BIOES if E-/S- occur; IOB1 if more chunks open with I- than with B-.

    IOB1 writes B- only where two chunks of one type touch, so its B- are few; a BIO file with a
    handful of stray chunk-opening I- (MSRA's training file has 6) stays BIO.
    """
    i_starts = b_starts = 0
    for tags in sequences:
        prev_type = ""
        for tag in tags:
            prefix, kind = _parts(tag)
            if prefix in "ES":
                return "BIOES"
            i_starts += prefix == "I" and kind != prev_type
            b_starts += prefix == "B"
            prev_type = kind
    return "IOB1" if i_starts > b_starts else "BIO"


def scheme_of_labels(labels: Iterable[str]) -> str:
    """Gives the scheme a model's label set was trained in: BIOES if it has E-/S- tags, else BIO."""
    return "BIOES" if any(split_tag(t)[0] in "ES" for t in labels) else "BIO"


_PARTS: dict[str, tuple[str, str]] = {}  # tag -> (prefix, type); tag sets are small


def _parts(tag: str) -> tuple[str, str]:
    parts = _PARTS.get(tag)
    if parts is None:
        parts = _PARTS[tag] = split_tag(tag)
    return parts


def entities(tags: Sequence[str]) -> list[Entity]:
    """Gives the chunks of `tags` by conlleval's rules, whatever the scheme (IOB1, BIO, BIOES).

    conlleval ends a chunk after E- or S-, before B-, S- or O, and where the type changes; it starts
    one at B- or S-, at I-/E- after O, E- or S-, and where the type changes.
    """
    found: list[Entity] = []
    prev, prev_type, begin = "O", "", 0
    for i, tag in enumerate(tags):
        if tag == "O":
            if prev != "O":
                found.append((prev_type, begin, i))
                prev, prev_type = "O", ""
            continue
        prefix, kind = _parts(tag)
        if prev != "O" and (prev in "ES" or prefix in "BS" or prev_type != kind):
            found.append((prev_type, begin, i))
        if prefix in "BS" or prev in "ESO" or prev_type != kind:
            begin = i
        prev, prev_type = prefix, kind
    if prev != "O":
        found.append((prev_type, begin, len(tags)))
    return found


def strict_entities(tags: Sequence[str], scheme: str) -> list[Entity]:
    """Gives only the chunks well formed in `scheme`: BIO's B I*, BIOES's S or B I* E, of one type.

    A broken chunk (BIOES "B-X I-X O", or any chunk opened by I- in BIO) yields nothing, as in
    seqeval's strict mode.
    """
    if scheme not in ("BIO", "BIOES"):
        raise ValueError(f"strict entities need BIO or BIOES, not {scheme}")
    inside = "I" if scheme == "BIO" else "IE"
    found: list[Entity] = []
    i, n = 0, len(tags)
    while i < n:
        prefix, kind = _parts(tags[i])
        if prefix == "S" and scheme == "BIOES":
            found.append((kind, i, i + 1))
        elif prefix == "B":
            j, last = i + 1, "B"
            while j < n and last in "BI":
                p, k = _parts(tags[j])
                if k != kind or p not in inside:
                    break
                last, j = p, j + 1
            if scheme == "BIO" or last == "E":
                found.append((kind, i, j))
            i = j
            continue
        i += 1
    return found


def to_tags(chunks: Iterable[Entity], length: int, scheme: str) -> list[str]:
    """Gives the tags of `length` tokens holding `chunks` (non-overlapping) in `scheme`."""
    tags = ["O"] * length
    last_end, last_type = -1, ""
    for kind, start, end in sorted(chunks, key=lambda c: c[1]):
        for k in range(start, end):
            tags[k] = f"I-{kind}"
        if scheme == "BIO":
            tags[start] = f"B-{kind}"
        elif scheme == "BIOES":
            if end - start == 1:
                tags[start] = f"S-{kind}"
            else:
                tags[start], tags[end - 1] = f"B-{kind}", f"E-{kind}"
        elif scheme == "IOB1":
            if last_end == start and last_type == kind:  # IOB1 marks B- only where two chunks touch
                tags[start] = f"B-{kind}"
        else:
            raise ValueError(f"unknown tag scheme {scheme!r}; use one of {list(SCHEMES)}")
        last_end, last_type = end, kind
    return tags


def convert(tags: Sequence[str], to: str, source: str | None = None) -> list[str]:
    """Gives `tags` rewritten in scheme `to`; the same sequence when `source` is `to` already."""
    if source == to:
        return list(tags)
    return to_tags(entities(tags), len(tags), to)


def tag_set(types: Iterable[str], scheme: str) -> list[str]:
    """Gives every tag of `scheme` for the entity `types`: O first, then by type, prefixes in B I E S order."""
    prefixes = {"IOB1": "BI", "BIO": "BI", "BIOES": "BIES"}[scheme]
    return ["O"] + [f"{p}-{t}" for t in sorted(set(types)) for p in prefixes]


def allowed_transitions(labels: Sequence[str], scheme: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gives which tags may start a sentence, follow each tag, and end one, as bool arrays (C,), (C, C), (C,).

    BIO: I-X only after B-X or I-X. BIOES: after B-X/I-X only I-X or E-X; after O/E/S only O, B or S.
    """
    parts = [split_tag(t) for t in labels]
    C = len(labels)
    start, end = np.ones(C, bool), np.ones(C, bool)
    follow = np.ones((C, C), bool)
    for j, (p, _) in enumerate(parts):
        if scheme == "BIO":
            start[j] = p != "I"
        elif scheme == "BIOES":
            start[j] = p in "OBS"
            end[j] = p in "OES"
    for i, (p1, k1) in enumerate(parts):
        for j, (p2, k2) in enumerate(parts):
            if scheme == "BIO":
                follow[i, j] = p2 != "I" or (p1 in "BI" and k1 == k2)
            elif scheme == "BIOES":
                open_chunk = p1 in "BI"
                follow[i, j] = (p2 in "IE" and k1 == k2) if open_chunk else p2 in "OBS"
    return start, follow, end


FORBIDDEN = -10000.0  # added to a forbidden transition's score; finite, so no inf - inf in the sums


@dataclass(frozen=True)
class TagScores:
    """Linear-chain scores over C tags: start (C,), transitions (C, C), i followed by j, and end (C,).

    What decoding needs of a CRF: its learned scores with the scheme's forbidden transitions already
    added (bertkit.crf.CRF.tag_scores), or the scheme's rules alone (`constraints`).
    """

    start: np.ndarray
    transitions: np.ndarray
    end: np.ndarray

    @classmethod
    def constraints(cls, labels: Sequence[str], scheme: str | None = None) -> TagScores:
        """Gives no preference but the scheme's rules: decoding per-word log-probabilities under them gives the
        most probable tag sequence the scheme allows."""
        start_ok, follow_ok, end_ok = allowed_transitions(labels, scheme or scheme_of_labels(labels))
        return cls(*((~ok).astype(np.float32) * FORBIDDEN for ok in (start_ok, follow_ok, end_ok)))

    def viterbi(self, emissions: np.ndarray, lengths: Sequence[int]) -> list[list[int]]:
        """Gives the best tag sequence of each row of `emissions` (B, T, C), as long as the row's length."""
        em = np.asarray(emissions, dtype=np.float32)
        B, T, _ = em.shape
        live = np.arange(T)[None, :] < np.asarray(lengths)[:, None]  # (B, T)
        score = self.start + em[:, 0]  # (B, C)
        back = np.zeros((B, max(T - 1, 0), em.shape[2]), dtype=np.int64)
        for t in range(1, T):
            candidates = score[:, :, None] + self.transitions[None]  # (B, C previous, C next)
            back[:, t - 1] = candidates.argmax(1)
            score = np.where(live[:, t, None], candidates.max(1) + em[:, t], score)
        last = (score + self.end).argmax(1)
        paths = []
        for b, n in enumerate(lengths):
            path = [int(last[b])] if n else []
            for t in range(n - 1, 0, -1):
                path.append(int(back[b, t - 1, path[-1]]))
            paths.append(path[::-1])
        return paths
