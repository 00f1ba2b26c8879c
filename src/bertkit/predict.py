"""Inference with a task model: logits for featurized rows (`infer`), scores (`evaluate_task`), and the
`Pipeline` that `bertkit predict`, `bertkit evaluate` and Python use on a fine-tuned model folder.

    nli = bertkit.pipeline("runs/ocnli/model")
    nli(["两个女人互相拥抱。"], ["两个女人在表达爱意。"])    # [{"label": ..., "probabilities": {...}}]

Fine-tuning evaluates on dev through the same `evaluate_task`; nothing here imports the training loop.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from .errors import BertkitError
from .hf import architecture_of, check_model_folder
from .tasks import Features, Task, get_task
from .tokenizer import Tokenizer

TASK_FILE = "bertkit_task.json"  # written beside config.json by `bertkit finetune`: what a model was fine-tuned for


# ---- inference -------------------------------------------------------------------------------------

@torch.inference_mode()
def infer(model: nn.Module, task: Task, features: Features, batch_size: int = 64, device: torch.device | None = None,
          precision: str = "fp32", progress: bool = False) -> dict[str, np.ndarray]:
    """Gives the model's logits for every feature row, in row order; per-token ones padded to the longest row.

    Rows run longest first so that each batch holds rows of similar length: [PAD] costs nothing inside
    the encoder, but attention still sees the batch's longest row.
    """
    device = device or next(model.parameters()).device
    lengths = features.lengths
    order = np.argsort(-lengths, kind="stable")
    T = int(lengths.max()) if len(lengths) else 0
    was_training = model.training
    model.eval()
    result: dict[str, np.ndarray] = {}
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    for lo in tqdm(range(0, len(order), batch_size), disable=not progress, desc="predict", unit="batch", leave=False):
        idx = order[lo : lo + batch_size]
        batch = task.collate([features.rows[i] for i in idx], features.pad_token_id)
        batch = {k: v.to(device) for k, v in batch.items() if k in ("input_ids", "token_type_ids", "attention_mask")}
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            out = model(**batch)
        for name in task.outputs:
            x = getattr(out, name).float().cpu().numpy()  # (B, t, ...) per token, else (B, ...)
            if name not in result:
                rest = x.shape[2:] if task.per_token else x.shape[1:]
                shape = (len(lengths), T, *rest) if task.per_token else (len(lengths), *rest)
                result[name] = np.zeros(shape, np.float32)
            if task.per_token:
                result[name][idx, : x.shape[1]] = x
            else:
                result[name][idx] = x
    model.train(was_training)
    return result


def decode_options(model: nn.Module) -> dict[str, Any]:
    """A tagger with a CRF decodes the best whole tag sequence (Viterbi) rather than each tag alone."""
    crf = getattr(model, "crf", None)
    return {"crf": crf} if crf is not None else {}


def evaluate_task(model: nn.Module, task: Task, features: Features, batch_size: int = 64, precision: str = "fp32",
                  progress: bool = False) -> tuple[dict[str, float], list[Any]]:
    """Gives the task's scores on `features` (percent) and the predictions they were computed from."""
    outputs = infer(model, task, features, batch_size, precision=precision, progress=progress)
    predictions = task.decode(features, outputs, **decode_options(model))
    return task.score(features.data, predictions), predictions


# ---- a fine-tuned model folder -------------------------------------------------------------------------


class Pipeline:
    """A fine-tuned model with its tokenizer and task: texts in, JSON-ready predictions out, batched."""

    def __init__(self, model_dir: str | Path, device: str = "auto", precision: str = "fp32", batch_size: int = 32):
        model_dir = Path(model_dir)
        meta = read_task_file(model_dir)
        self.meta = meta
        self.task = get_task(meta["task"], **meta.get("task_options", {}))
        saved = architecture_of(model_dir)
        if saved != self.task.model_class.hf_architecture:
            raise BertkitError(f"{model_dir}: {TASK_FILE} says task {meta['task']!r}, but config.json holds a {saved}")
        self.tokenizer = Tokenizer.from_pretrained(model_dir)
        self.device = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else ("cpu" if device == "auto" else device))
        self.model = self.task.model_class.from_pretrained(model_dir).to(self.device).eval()
        self.labels = [self.model.config.id2label[i] for i in range(self.model.config.num_labels)]
        self.label2id = {label: i for i, label in enumerate(self.labels)}
        self.precision, self.batch_size = precision, batch_size

    def __call__(self, texts: str | Sequence[str], pairs: str | Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Gives one prediction per text: a label with probabilities, an answer with its span, or entities."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        if isinstance(pairs, str):
            pairs = [pairs]
        data = self.task.inputs_from_texts(texts, list(pairs) if pairs is not None else None,
                                           **self.meta.get("input_options", {}))
        features = self.task.featurize(data, self.tokenizer, self.label2id)
        outputs = infer(self.model, self.task, features, self.batch_size, self.device, self.precision)
        return [self.task.prediction_json(p) for p in self.task.decode(features, outputs, **decode_options(self.model))]

    def evaluate(self, path: str | Path, **read_options: Any) -> dict[str, Any]:
        """Gives the task's scores on a labelled file (percent), with what the reader skipped."""
        data = self.task.read(path, **read_options)
        features = self.task.featurize(data, self.tokenizer, self.label2id)
        scores, _ = evaluate_task(self.model, self.task, features, self.batch_size, self.precision)
        return {"file": str(path), "examples": len(data), "skipped": data.report.total_skipped, **scores}


def read_task_file(model_dir: Path) -> dict[str, Any]:
    path = check_model_folder(model_dir) / TASK_FILE
    if not path.is_file():
        kind = architecture_of(model_dir)
        raise BertkitError(f"{model_dir}: no {TASK_FILE}: this {kind or 'model'} was not fine-tuned by `bertkit finetune`")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise BertkitError(f"{path}: not valid JSON ({e})") from None


def pipeline(model_dir: str | Path, **options: Any) -> Pipeline:
    """Gives a Pipeline for a model folder written by `bertkit finetune`."""
    return Pipeline(model_dir, **options)
