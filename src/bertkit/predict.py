"""Inference with a task model: logits for featurized rows (`infer`), scores (`evaluate_task`), and the
`Pipeline` that `bertkit predict`, `bertkit evaluate`, the server and Python use on a fine-tuned model folder,
PyTorch or exported alike (bertkit.runtime).

    nli = bertkit.pipeline("runs/ocnli/model")
    nli(["两个女人互相拥抱。"], ["两个女人在表达爱意。"])    # [{"label": ..., "probabilities": {...}}]

Fine-tuning evaluates on dev through the same `evaluate_task`. Nothing here imports the training loop,
and nothing imports torch unless the model is a PyTorch one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from .config import BertConfig
from .errors import BertkitError
from .folders import TASK_FILE, architecture_of, read_task_file
from .hub import resolve_model
from .runtime import Backend, TorchBackend, batches, load_backend
from .tasks import Features, Task, get_task
from .tokenizer import Tokenizer

__all__ = ["TASK_FILE", "Pipeline", "evaluate_task", "infer", "pipeline"]


# ---- inference -------------------------------------------------------------------------------------

def as_backend(model: Any, precision: str = "fp32") -> Backend:
    """Gives a Backend as it is, and a PyTorch model wrapped in one."""
    return model if hasattr(model, "run") else TorchBackend(model, precision)


def infer(model: Any, task: Task, features: Features, batch_size: int = 64, precision: str = "fp32",
          progress: bool = False, max_tokens: int | None = None) -> dict[str, np.ndarray]:
    """Gives the model's logits for every feature row, in row order; per-token ones padded to the longest row.

    `model` is a Backend or a PyTorch task model. Rows run longest first so that each batch holds rows of
    similar length: [PAD] costs nothing inside the PyTorch encoder, but attention still sees the batch's
    longest row, and an exported model computes every position. `max_tokens` bounds a batch's padded tokens too.
    """
    backend = as_backend(model, precision)
    lengths = features.lengths
    T = int(lengths.max()) if len(lengths) else 0
    result: dict[str, np.ndarray] = {}
    for idx in tqdm(batches(lengths, batch_size, backend.pads, max_tokens), disable=not progress, desc="predict", unit="batch",
                    leave=False):
        out = backend.run(task.collate([features.rows[i] for i in idx], features.pad_token_id), task.outputs)
        for name, x in out.items():  # (B, t, ...) per token, else (B, ...)
            if name not in result:
                rest = x.shape[2:] if task.per_token else x.shape[1:]
                shape = (len(lengths), T, *rest) if task.per_token else (len(lengths), *rest)
                result[name] = np.zeros(shape, np.float32)
            if task.per_token:
                result[name][idx, : x.shape[1]] = x
            else:
                result[name][idx] = x
    return result


def evaluate_task(model: Any, task: Task, features: Features, batch_size: int = 64, precision: str = "fp32",
                  progress: bool = False) -> tuple[dict[str, float], list[Any]]:
    """Gives the task's scores on `features` (percent) and the predictions they were computed from."""
    backend = as_backend(model, precision)
    outputs = infer(backend, task, features, batch_size, progress=progress)
    predictions = task.decode(features, outputs, **({"crf": backend.crf} if backend.crf is not None else {}))
    return task.score(features.data, predictions), predictions


# ---- a fine-tuned model folder -------------------------------------------------------------------------


class Pipeline:
    """A fine-tuned model with its tokenizer and task: texts in, JSON-ready predictions out, batched."""

    def __init__(self, model_dir: str | Path, device: str = "auto", precision: str = "fp32", batch_size: int = 32,
                 max_tokens: int | None = None):
        model_dir = Path(model_dir)
        meta = read_task_file(model_dir)
        self.meta = meta
        self.task = get_task(meta["task"], **meta.get("task_options", {}))
        saved = architecture_of(model_dir)
        if saved != self.task.architecture:
            raise BertkitError(f"{model_dir}: {TASK_FILE} says task {meta['task']!r}, but config.json holds a {saved}")
        self.tokenizer = Tokenizer.from_pretrained(model_dir)
        self.config = BertConfig.load(model_dir)
        self.backend = load_backend(model_dir, device, precision)
        self.labels = [self.config.id2label[i] for i in range(self.config.num_labels)]
        self.label2id = {label: i for i, label in enumerate(self.labels)}
        self.batch_size, self.max_tokens = batch_size, max_tokens  # a forward pass's rows, and padded tokens, at most

    @property
    def model(self) -> Any:
        """The PyTorch model (a PyTorch folder only; an exported one has `backend` alone)."""
        if not isinstance(self.backend, TorchBackend):
            raise BertkitError(f"this pipeline runs an exported model in {self.backend.name}: it has no PyTorch model")
        return self.backend.model

    def __call__(self, texts: str | Sequence[str], pairs: str | Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Gives one prediction per text: a label with probabilities, an answer with its span, or entities."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        if isinstance(pairs, str):
            pairs = [pairs]
        data = self.task.inputs_from_texts(texts, list(pairs) if pairs is not None else None,
                                           **self.meta.get("input_options", {}))
        features = self.task.featurize(data, self.tokenizer, self.label2id)
        outputs = infer(self.backend, self.task, features, self.batch_size, max_tokens=self.max_tokens)
        crf = {"crf": self.backend.crf} if self.backend.crf is not None else {}
        return [self.task.prediction_json(p) for p in self.task.decode(features, outputs, **crf)]

    def predict(self, inputs: Sequence[Any]) -> list[dict[str, Any]]:
        """Gives one prediction per input, each input as the server's `inputs` hold it: a text (classify, ner),
        a [text, pair] list (pair), {"question": ..., "context": ...} (qa), or a list of words (ner)."""
        return self(*self.task.split_inputs(inputs))

    def evaluate(self, path: str | Path, **read_options: Any) -> dict[str, Any]:
        """Gives the task's scores on a labelled file (percent), with what the reader skipped."""
        # read as training read it (NER trained on NFKC text, say), as `predict` reads user text
        data = self.task.read(path, **{**self.meta.get("input_options", {}), **read_options})
        features = self.task.featurize(data, self.tokenizer, self.label2id)
        scores, _ = evaluate_task(self.backend, self.task, features, self.batch_size)
        return {"file": str(path), "examples": len(data), "skipped": data.report.total_skipped, **scores}


def predict_lines(pipe: Pipeline, lines: list[str], *, pairs: list[str] | None = None, sep: str | None = None,
                  jsonl: bool = False, words: bool = False, source: str = "<input>") -> list[dict[str, Any]]:
    """`bertkit predict`'s answers: one for every input line, in order, an error row {"line", "error"} for a blank or
    malformed one. A pair or qa model takes "first<TAB>second" lines (or another `sep`), or the second texts in
    `pairs` (one for all, or one each); `jsonl` lines hold the fields training files use (sentence1/sentence2,
    question/context, text, ...); `words`: NER inputs split on spaces as they are."""
    second = pipe.task.second  # what an input's second text is (a pair's second sentence, a question's context), if any
    two = second is not None
    texts, seconds, errors = list(lines), None, {}  # errors: input index -> why it gives no prediction
    if jsonl:
        texts, seconds, errors = _jsonl_inputs(lines, pipe.task, source)
    elif pairs is not None:
        seconds = pairs * len(texts) if len(pairs) == 1 else list(pairs)
    elif two:
        sep = sep or "\t"
        split = [t.split(sep, 1) for t in texts]
        errors = {i: f"expected two texts separated by {sep!r}" for i, p in enumerate(split) if texts[i].strip() and len(p) != 2}
        texts, seconds = [p[0] if len(p) == 2 else "" for p in split], [p[1] if len(p) == 2 else "" for p in split]
    errors |= {i: "empty input" for i, t in enumerate(texts) if not t.strip() and i not in errors}
    keep = [i for i in range(len(texts)) if i not in errors]
    inputs = [texts[i].split() if words else texts[i] for i in keep]
    answers = dict(zip(keep, pipe(inputs, [seconds[i] for i in keep] if seconds is not None else None) if keep else [],
                       strict=True))
    return [answers.get(i) or {"line": i + 1, "error": errors[i]} for i in range(len(texts))]


def _jsonl_inputs(lines: list[str], task: Task, source: str) -> tuple[list[str], list[str] | None, dict[int, str]]:
    """Texts (and second texts or contexts) from JSON lines, with the field names the task's training files use."""
    second_name = task.second
    text_names, second_names = task.json_fields
    texts, seconds, errors = [], [], {}
    for i, line in enumerate(lines):
        try:
            obj = json.loads(line) if line.strip() else {}
        except json.JSONDecodeError as e:
            raise BertkitError(f"{source} line {i + 1}: not JSON ({e.msg})") from None
        lowered = {k.lower(): v for k, v in obj.items()} if isinstance(obj, dict) else {}
        text = next((lowered[n] for n in text_names if n in lowered), None)
        second = next((lowered[n] for n in second_names if n in lowered), None)
        if line.strip() and text is None:
            errors[i] = f"no text field (one of {', '.join(text_names[:4])}{', ...' if len(text_names) > 4 else ''})"
        elif line.strip() and second_name is not None and second is None:
            errors[i] = f"no {second_name} field"
        texts.append(str(text or ""))
        seconds.append(str(second or ""))
    return texts, seconds if second_name is not None else None, errors


def pipeline(model_dir: str | Path, task: str | None = None, *, revision: str | None = None, **options: Any) -> Any:
    """Gives what runs a model folder (or a Hugging Face model name, at `revision`): a `Pipeline` for one from
    `bertkit finetune` (or `bertkit export`); with task="fill-mask", a `bertkit.fillmask.FillMask` on a
    pre-trained one; with task="embed", a `bertkit.embed.Embedder` on any."""
    model_dir = resolve_model(model_dir, revision)
    if task in (None, "predict"):
        return Pipeline(model_dir, **options)
    if task == "fill-mask":
        from .fillmask import FillMask

        return FillMask(model_dir, **options)
    if task == "embed":
        from .embed import Embedder

        return Embedder(model_dir, **options)
    raise BertkitError(f"task {task!r} is not one of fill-mask, embed (or none: a fine-tuned model's own task)")
