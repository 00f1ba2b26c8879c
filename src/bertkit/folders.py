"""Model folders, read without loading a model: what a folder holds and what it was fine-tuned for.

A model folder has Hugging Face's layout: `config.json` (which names the model class), the weights
(`model.safetensors` or `pytorch_model.bin`) or, once exported, `model.onnx` (bertkit.export), the
tokenizer files, and for a fine-tuned model `bertkit_task.json`: the task, its labels and options.
Nothing here imports torch, so that an exported model serves without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import BertkitError
from .fileio import read_json
from .hub import resolve_model

TASK_FILE = "bertkit_task.json"  # written beside config.json by `bertkit finetune`: what a model was fine-tuned for
ONNX_NAME = "model.onnx"  # written by `bertkit export`


def check_model_folder(directory: str | Path, revision: str | None = None) -> Path:
    """Gives `directory` as a Path if it is a folder, or the folder of a Hugging Face model name
    (bertkit.hub); else a BertkitError saying what it is instead."""
    directory = resolve_model(directory, revision)
    if directory.is_file():
        raise BertkitError(f"{directory}: is a file, not a model folder")
    if not directory.is_dir():
        raise BertkitError(f"{directory}: no such model folder")
    return directory


def architecture_of(directory: str | Path) -> str | None:
    """Gives the model class named in a folder's config.json ("BertForPreTraining", ...), if any."""
    path = check_model_folder(directory) / "config.json"
    if not path.is_file():
        raise BertkitError(f"{directory}: no config.json (is this a model folder?)")
    names = read_json(path).get("architectures") or [None]
    return names[0]


def read_task_file(model_dir: Path) -> dict[str, Any]:
    path = check_model_folder(model_dir) / TASK_FILE
    if not path.is_file():
        kind = architecture_of(model_dir)
        raise BertkitError(f"{model_dir}: no {TASK_FILE}: this {kind or 'model'} was not fine-tuned by `bertkit finetune`")
    return read_json(path)


def is_exported(directory: str | Path) -> bool:
    """Tells whether a model folder holds an exported model (model.onnx) rather than PyTorch weights."""
    return (Path(directory) / ONNX_NAME).is_file()
