"""Prediction and evaluation with a fine-tuned model folder, from Python or `bertkit predict/evaluate`.

    nli = bertkit.pipeline("runs/ocnli/model")
    nli(["两个女人互相拥抱。"], ["两个女人在表达爱意。"])    # [{"label": ..., "probabilities": {...}}]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .checkpoint import architecture_of, check_model_folder
from .errors import BertkitError
from .finetune import TASK_FILE, decode_options, evaluate_task, infer
from .tasks import get_task
from .tokenizer import Tokenizer


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
