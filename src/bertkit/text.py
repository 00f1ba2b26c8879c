"""Which characters are Chinese: CJK ideographs in Google's ranges, the one definition bertkit uses.

The tokenizer isolates these characters as words of their own (as Google's `_is_chinese_char`);
the corpus reader splits Chinese sentences and joins Chinese lines by them; `prepare` tells a
Chinese corpus from the share of them; NER splits Chinese text into them; QA scores a Chinese
context with CMRC 2018's metric.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Google's "Chinese character" ranges (tokenization.py `_is_chinese_char`), copied exactly.
CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)
CJK_CLASS = "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in CJK_RANGES)  # the inside of a regex [...] class
_CJK = re.compile(f"[{CJK_CLASS}]")


def has_cjk(text: str | Iterable[str]) -> bool:
    """Tells whether a text (or any of several) holds a CJK ideograph."""
    texts = [text] if isinstance(text, str) else text
    return any(_CJK.search(t) is not None for t in texts)


def cjk_share(text: str) -> float:
    """Gives the share of CJK ideographs among the text's characters that are not white space (0 if none)."""
    letters = sum(1 for c in text if not c.isspace())
    return len(_CJK.findall(text)) / letters if letters else 0.0
