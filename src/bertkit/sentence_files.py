"""sentence-transformers' files in a model folder: how the folder turns token vectors into one sentence vector.

A folder saved by sentence-transformers (or an embedder trained by bertkit) says its pooling in `modules.json`
and its Pooling module's `config.json`, and whether vectors are normalized (a Normalize module); bertkit's
`embed` and `serve` take these, so that a folder gives the vectors sentence-transformers gives, with no flag.

    found = read_sentence_config(folder)        # SentenceConfig(pooling="mean", normalize=True, ...) or None
    write_sentence_config(folder, SentenceConfig("mean", normalize=True, max_seq_length=256))

Both of its layouts are read: sentence-transformers 3-5 (`sentence_transformers.models.Pooling`, a flag per
pooling mode, `max_seq_length` in `sentence_bert_config.json`) and 6 (`...modules.pooling.Pooling`, one
`pooling_mode`, the length in `tokenizer_config.json`). bertkit writes the first, which every version loads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import BertkitError
from .fileio import atomic_write_text, parse_json

MODULES = "modules.json"
POOLING_DIR, NORMALIZE_DIR = "1_Pooling", "2_Normalize"
_MODES = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token"}  # the modes bertkit pools by
_OTHER_MODES = ("pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens",
                "pooling_mode_lasttoken")


@dataclass(frozen=True)
class SentenceConfig:
    pooling: str  # "mean" or "cls"
    normalize: bool = False
    max_seq_length: int | None = None  # None: the tokenizer's or the model's own limit


def _json(path: Path) -> Any:
    return parse_json(path, path.name)


def _pooling_mode(path: Path) -> str:
    config = _json(path)
    if not isinstance(config, dict):
        raise BertkitError(f"{path}: expected a JSON object")
    if "pooling_mode" in config:  # sentence-transformers 6: one name
        mode = config["pooling_mode"]
        if mode not in _MODES:
            raise BertkitError(f"{path}: field 'pooling_mode' is {mode!r}; bertkit pools by {' or '.join(_MODES)}")
        return mode
    chosen = [mode for mode, flag in _MODES.items() if config.get(flag)]
    others = [flag for flag in _OTHER_MODES if config.get(flag)]
    if others or len(chosen) != 1:
        field = others[0] if others else " and ".join(_MODES[m] for m in chosen) or "pooling_mode_*"
        raise BertkitError(f"{path}: field '{field}': bertkit pools by exactly one of {' or '.join(_MODES)}")
    return chosen[0]


def read_sentence_config(folder: Path) -> SentenceConfig | None:
    """Gives the pooling, normalization and length a sentence-transformers folder declares; None without
    modules.json. A module bertkit cannot run the same way (Dense, a second model, ...) is an error by name."""
    path = folder / MODULES
    if not path.is_file():
        return None
    modules = _json(path)
    if not isinstance(modules, list) or not all(isinstance(m, dict) and isinstance(m.get("type"), str) for m in modules):
        raise BertkitError(f"{path}: expected a list of modules, each with a 'type'")
    kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise BertkitError(f"{path}: modules {' -> '.join(kinds)}; bertkit runs Transformer -> Pooling "
                           "(-> Normalize) only")
    mode = _pooling_mode(folder / str(modules[1].get("path", POOLING_DIR)) / "config.json")
    length = None
    bert_config = folder / "sentence_bert_config.json"
    if bert_config.is_file():
        length = _json(bert_config).get("max_seq_length")
        if length is not None and (not isinstance(length, int) or isinstance(length, bool) or length < 1):
            raise BertkitError(f"{bert_config}: field 'max_seq_length' is {length!r}, not a positive integer")
    return SentenceConfig(mode, normalize=len(kinds) == 3, max_seq_length=length)


def copy_sentence_files(source: Path, folder: Path) -> None:
    """Copies a folder's sentence-transformers files (if it has them) into `folder` (an exported copy of its model)."""
    import shutil

    if not (source / MODULES).is_file():
        return
    for name in ("sentence_bert_config.json", "config_sentence_transformers.json", POOLING_DIR, NORMALIZE_DIR, MODULES):
        path = source / name
        if path.is_dir():
            shutil.copytree(path, folder / name, dirs_exist_ok=True)
        elif path.is_file():
            shutil.copy(path, folder / name)


def write_sentence_config(folder: Path, config: SentenceConfig, hidden_size: int, version: str) -> None:
    """Writes the files that make `folder` (a saved BERT) load in sentence_transformers.SentenceTransformer with
    `config`'s pooling and normalization."""
    if config.pooling not in _MODES:
        raise BertkitError(f"sentence-transformers has no {config.pooling!r} pooling: save with mean or cls")
    if config.max_seq_length is None:
        raise ValueError("sentence-transformers' files need the length the model was trained at (max_seq_length)")
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": POOLING_DIR, "type": "sentence_transformers.models.Pooling"}]
    if config.normalize:
        modules.append({"idx": 2, "name": "2", "path": NORMALIZE_DIR, "type": "sentence_transformers.models.Normalize"})
        (folder / NORMALIZE_DIR).mkdir(parents=True, exist_ok=True)
    pooling = {"word_embedding_dimension": hidden_size, **{flag: mode == config.pooling for mode, flag in _MODES.items()},
               **dict.fromkeys(_OTHER_MODES, False), "include_prompt": True}
    (folder / POOLING_DIR).mkdir(parents=True, exist_ok=True)

    def write(name: str, value: Any) -> None:
        atomic_write_text(folder / name, json.dumps(value, indent=2) + "\n")

    write(f"{POOLING_DIR}/config.json", pooling)
    write("sentence_bert_config.json", {"max_seq_length": config.max_seq_length, "do_lower_case": False})
    write("config_sentence_transformers.json", {"__version__": {"bertkit": version}, "prompts": {},
                                                "default_prompt_name": None, "similarity_fn_name": "cosine"})
    write(MODULES, modules)  # last: a folder with modules.json has the rest
