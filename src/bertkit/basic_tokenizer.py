"""Google's BasicTokenizer as a Rust `tokenizers` normalizer and pre-tokenizer, exact to the reference.

What the reference (transformers' `BertTokenizerLegacy`, a port of Google's tokenization.py) does
before WordPiece, and how this module makes the Rust building blocks do the same:

1. Drop what the reference drops: U+0000, U+FFFD and every category-C character (Cc, Cf, Co, Cs
   *and Cn*, i.e. unassigned) except tab/newline/carriage return. Rust keeps unassigned code points.
2. Turn whitespace into " ": tab/newline/CR, Zs, and U+2028/U+2029 (which `str.split()` splits on).
3. NFC, as the reference does (Rust has no NFC step: a cased vocab then misses é written as e+U+0301,
   CJK compatibility ideographs and composition exclusions such as U+0958).
4. Uncased: Greek final sigma, which Python's `str.lower()` applies and Rust's per-character
   lowercase does not, then lowercase; with accent stripping, NFD and drop Mn.
5. Split on whitespace, then isolate punctuation (ASCII 33-47, 58-64, 91-96, 123-126 and Unicode P*)
   and CJK ideographs (Google's ranges; Rust's range has a typo, 0x2B920 for 0x2B820).

Character classes come from Python's own `unicodedata` (the reference's tables), not from the Rust
crates, whose Unicode tables are older: Rust misses punctuation and marks added in Unicode 10-14 and
still classes U+166D as punctuation.

Known residue. Rust's normalization tables are Unicode 10-era: 98 combining marks added in Unicode
11-14 (Nko, Arabic Quranic marks, Sogdian, ...) lack their combining class there, so NFC neither
reorders them nor composes across them; this shows only without accent stripping and only next to
another combining mark. U+11938 (Dives Akuru) is not decomposed. And a whitespace-separated word
that becomes a special token only after cleaning (e.g. "[MA\\x00SK]") is one for the reference.
"""

from __future__ import annotations

import functools
import itertools
import unicodedata
from collections.abc import Callable, Iterable, Iterator

from tokenizers import Regex, normalizers, pre_tokenizers

from .text import CJK_RANGES


def _regex_class(ranges: Iterable[tuple[int, int]]) -> str:
    """Gives an Oniguruma character class for inclusive code point ranges (merged, sorted)."""
    merged: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return "[" + "".join(f"\\x{{{lo:X}}}-\\x{{{hi:X}}}" for lo, hi in merged) + "]"


@functools.cache
def _category_runs() -> tuple[tuple[int, int, str], ...]:
    """Gives (first, last, category) for each run of code points sharing a Unicode category."""
    categories = map(unicodedata.category, map(chr, range(0x110000)))
    runs, start = [], 0
    for category, group in itertools.groupby(categories):
        end = start + sum(1 for _ in group)
        runs.append((start, end - 1, category))
        start = end
    return tuple(runs)


def _ranges_in(predicate: Callable[[str], bool]) -> list[tuple[int, int]]:
    """Gives the code point ranges whose Unicode category satisfies `predicate`."""
    return [(lo, hi) for lo, hi, category in _category_runs() if predicate(category)]


@functools.cache
def _drop_class() -> str:
    """Characters the reference deletes: NUL, U+FFFD, and category C except tab, LF and CR."""
    ranges = _ranges_in(lambda c: c.startswith("C"))
    for kept in (0x09, 0x0A, 0x0D):
        ranges = list(_split_out(ranges, kept))
    return _regex_class([*ranges, (0xFFFD, 0xFFFD)])


@functools.cache
def _space_class() -> str:
    """Whitespace other than " ": tab, LF, CR and category Z (str.split() also splits on Zl, Zp)."""
    ranges = [*_ranges_in(lambda c: c.startswith("Z")), (0x09, 0x0A), (0x0D, 0x0D)]
    return _regex_class(_split_out(ranges, 0x20))  # replacing " " by " " would only cost time


def _split_out(ranges: Iterable[tuple[int, int]], cp: int) -> Iterator[tuple[int, int]]:
    """Yields the ranges without the code point `cp`."""
    for lo, hi in ranges:
        if lo <= cp <= hi:
            if lo < cp:
                yield lo, cp - 1
            if cp < hi:
                yield cp + 1, hi
        else:
            yield lo, hi


@functools.cache
def _isolate_class(tokenize_chinese_chars: bool) -> str:
    """Characters that become words of their own: punctuation, and CJK ideographs when asked."""
    ascii_punct = [(33, 47), (58, 64), (91, 96), (123, 126)]
    cjk = list(CJK_RANGES) if tokenize_chinese_chars else []
    return _regex_class([*_ranges_in(lambda c: c.startswith("P")), *ascii_punct, *cjk])


@functools.cache
def _mark_class() -> str:
    return _regex_class(_ranges_in(lambda c: c == "Mn"))


@functools.cache
def _final_sigma_pattern() -> str:
    """Gives a regex matching each capital sigma that Python's str.lower() turns into final sigma.

    CPython's rule: Σ is final when, skipping case-ignorable characters, the previous character is
    cased and the next one is not. The classes are probed from str.lower() itself, so they follow
    this Python's Unicode version (Oniguruma's \\p{Cased} differs, e.g. on U+1171E).
    """
    cased, ignorable = [], []
    skip = {"Cc", "Cf", "Cn", "Co", "Cs", "Zs", "Zl", "Zp"}  # removed or whitespace before lowercasing
    for lo, hi, category in _category_runs():
        if category in skip:
            continue
        for cp in range(lo, hi + 1):
            ch = chr(cp)
            if (ch + "Σ").lower()[-1] == "ς":  # the previous character decides alone: cased
                cased.append((cp, cp))
            elif ("A" + ch + "Σ").lower()[-1] == "ς":  # skipped over to reach "A": case-ignorable
                ignorable.append((cp, cp))
    c, i = _regex_class(cased), _regex_class(ignorable)
    return f"{c}{i}*\\K\\x{{3A3}}(?!{i}*{c})"


def normalizer(lowercase: bool, strip_accents: bool) -> normalizers.Normalizer:
    """Gives the text clean-up the reference applies before splitting words (steps 1-4 above)."""
    steps = [
        normalizers.Replace(Regex(_drop_class()), ""),
        normalizers.Replace(Regex(_space_class()), " "),
        normalizers.NFC(),
    ]
    if lowercase:
        steps += [normalizers.Replace(Regex(_final_sigma_pattern()), "ς"), normalizers.Lowercase()]
    if strip_accents:
        steps += [normalizers.NFD(), normalizers.Replace(Regex(_mark_class()), "")]
    return normalizers.Sequence(steps)


def pre_tokenizer(tokenize_chinese_chars: bool) -> pre_tokenizers.PreTokenizer:
    """Gives the word split of step 5: on whitespace, then punctuation and (when asked) CJK ideographs alone."""
    isolate = pre_tokenizers.Split(Regex(_isolate_class(tokenize_chinese_chars)), behavior="isolated")
    return pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), isolate])
