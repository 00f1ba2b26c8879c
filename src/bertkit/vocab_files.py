"""A tokenizer's files, read with errors that name the file and the field: Google's `vocab.txt`, transformers'
`tokenizer_config.json`, and the `tokenizers` library's `tokenizer.json`, which is all a folder saved by
transformers 5 or sentence-transformers holds.

    vocab, options = read_tokenizer_folder(Path("all-MiniLM-L6-v2"))   # -> Tokenizer(vocab, **options)

`tokenizer.json` is taken when it describes BERT's tokenizer (a WordPiece model with `##` pieces, BERT's
normalizer and pre-tokenizer), which bertkit runs with Google's exact rules; anything else is refused by name.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from .errors import BertkitError
from .fileio import parse_json, read_utf8

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
MAX_CHARS_PER_WORD = 100  # Google's limit: longer words become [UNK]
_UNLIMITED = 10**20  # transformers treats a model_max_length above this as "no limit"


def read_vocab_txt(path: Path) -> dict[str, int]:
    """Gives token -> id (id = line number - 1), read as transformers' load_vocab reads it."""
    text = read_utf8(path, "vocab.txt", bom=True)  # a BOM stays part of the first token, as in transformers
    tokens = [line.rstrip("\n") for line in io.StringIO(text, newline=None).readlines()]
    vocab: dict[str, int] = {}
    for i, token in enumerate(tokens):
        if token in vocab:
            raise BertkitError(f"{path} line {i + 1}: duplicate token {token!r} (first on line {vocab[token] + 1})")
        vocab[token] = i
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        bom = " (the file starts with a byte-order mark)" if tokens and tokens[0].startswith("\ufeff") else ""
        raise BertkitError(f"{path}: vocabulary lacks the special token(s) {' '.join(missing)}{bom}")
    return vocab


def _json_object(path: Path, what: str) -> dict[str, Any]:
    found = parse_json(path, what)
    if not isinstance(found, dict):
        raise BertkitError(f"{path}: expected a JSON object")
    return found


def _field(config: dict[str, Any], path: Path, field: str, kind: type, default: Any) -> Any:
    """Gives config[field] (or `default`), which must be None or of type `kind`."""
    value = config.get(field, default)
    wrong_type = not isinstance(value, kind) or (kind is int and isinstance(value, bool))
    if value is not None and wrong_type:
        raise BertkitError(f"{path}: field '{field}' has the wrong type ({value!r})")
    return value


def _check_specials(config: dict[str, Any], path: Path) -> None:
    for field, expected in (("unk_token", UNK), ("cls_token", CLS), ("sep_token", SEP),
                            ("pad_token", PAD), ("mask_token", MASK)):
        value = config.get(field, expected)
        content = value.get("content") if isinstance(value, dict) else value
        if content != expected:
            raise BertkitError(f"{path}: field '{field}' is {content!r}; bertkit supports only {expected}")


def read_tokenizer_json(path: Path) -> tuple[dict[str, int], dict[str, Any]]:
    """Gives the vocabulary and the BasicTokenizer's options of a `tokenizers` file describing BERT's tokenizer."""
    doc = _json_object(path, "tokenizer.json")

    def part(name: str, expected: tuple[str, ...]) -> dict[str, Any]:
        found = doc.get(name)
        kind = found.get("type") if isinstance(found, dict) else found
        if kind not in expected:
            raise BertkitError(f"{path}: field '{name}' is {kind!r}, not BERT's tokenizer ({' or '.join(expected)}); "
                               "bertkit runs BERT's WordPiece only")
        return found  # type: ignore[return-value]

    model = part("model", ("WordPiece",))
    normalizer = part("normalizer", ("BertNormalizer",))
    part("pre_tokenizer", ("BertPreTokenizer",))
    for field, expected in (("unk_token", UNK), ("continuing_subword_prefix", "##"),
                            ("max_input_chars_per_word", MAX_CHARS_PER_WORD)):
        if model.get(field, expected) != expected:
            raise BertkitError(f"{path}: field 'model.{field}' is {model[field]!r}; bertkit supports only {expected!r}")
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
        raise BertkitError(f"{path}: field 'model.vocab' is not a map of tokens to ids")
    vocab = dict(vocab)
    for i, added in enumerate(doc.get("added_tokens") or []):  # the specials, usually already in the vocabulary
        if not isinstance(added, dict) or not isinstance(added.get("content"), str) or not isinstance(added.get("id"), int):
            raise BertkitError(f"{path}: field 'added_tokens[{i}]' needs a string 'content' and an integer 'id'")
        if vocab.setdefault(added["content"], added["id"]) != added["id"]:
            raise BertkitError(f"{path}: field 'added_tokens[{i}]': {added['content']!r} has id {added['id']} "
                               f"but {vocab[added['content']]} in the vocabulary")
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise BertkitError(f"{path}: field 'model.vocab': ids must be 0..n-1, each once")
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise BertkitError(f"{path}: vocabulary lacks the special token(s) {' '.join(missing)}")
    options = {"do_lower_case": _field(normalizer, path, "lowercase", bool, True),
               "strip_accents": _field(normalizer, path, "strip_accents", bool, None),
               "tokenize_chinese_chars": _field(normalizer, path, "handle_chinese_chars", bool, True)}
    return vocab, options


def read_tokenizer_folder(folder: Path) -> tuple[dict[str, int], dict[str, Any]]:
    """Gives the vocabulary and the Tokenizer options of a model or vocabulary folder: vocab.txt, else
    tokenizer.json; tokenizer_config.json, where present, has the last word on the options (as in transformers)."""
    if not folder.is_dir():
        raise BertkitError(f"{folder}: {'is a file, not a folder with vocab.txt' if folder.is_file() else 'no such folder'}")
    config_path, config = folder / "tokenizer_config.json", {}
    if config_path.is_file():
        config = _json_object(config_path, "tokenizer config")
    _check_specials(config, config_path)
    if (folder / "vocab.txt").is_file():
        vocab, options = read_vocab_txt(folder / "vocab.txt"), {}
    elif (folder / "tokenizer.json").is_file():
        vocab, options = read_tokenizer_json(folder / "tokenizer.json")
    else:
        raise BertkitError(f"{folder}: no tokenizer: neither vocab.txt nor tokenizer.json")
    for field, default in (("do_lower_case", True), ("strip_accents", None), ("tokenize_chinese_chars", True)):
        options[field] = _field(config, config_path, field, bool, options.get(field, default))
    max_length = _field(config, config_path, "model_max_length", int, None)
    options["model_max_length"] = None if max_length is None or max_length > _UNLIMITED else max_length
    return vocab, options


def vocab_size_of(folder: Path) -> tuple[str, int] | None:
    """Gives the file holding a folder's vocabulary and how many tokens it has (vocab.txt's lines, or
    tokenizer.json's tokens), or None without either."""
    if (folder / "vocab.txt").is_file():
        with open(folder / "vocab.txt", "rb") as f:
            return "vocab.txt", sum(1 for _ in f)
    if (folder / "tokenizer.json").is_file():
        return "tokenizer.json", len(read_tokenizer_json(folder / "tokenizer.json")[0])
    return None
