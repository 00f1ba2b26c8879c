"""What `bertkit serve` serves, and the request bodies it takes: a fine-tuned model's task (POST /v1/predict,
and /v1/rerank for a pair model used as a cross-encoder), or any model as an embedder (POST /v1/embeddings,
in OpenAI's format).

A served model reads and tokenizes a request's inputs once (`prepare`, off the event loop: the features, and
the tokens the batcher's budget spends), then runs the features of a group of requests together and gives
each request its results (`run`); it warms up with its largest batch. Each body checker gives the inputs it
holds or raises BadRequest with the status and one line naming what is wrong and where.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .config import BertConfig
from .errors import BertkitError
from .folders import TASK_FILE
from .tasks import Features, InputError, Task
from .tasks.base import check_text, json_kind


class BadRequest(Exception):
    """A request the server refuses: its status and the one-line reason it gives back."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Prepared:
    """A request's inputs as its model takes them (tokenized once), and what the batcher counts of them."""

    features: Any
    size: int  # inputs
    tokens: int  # tokens of its rows (a long input's windows, or truncated), specials included


# ---- the models --------------------------------------------------------------------------------------------

class TaskModel:
    """A fine-tuned model folder (PyTorch or exported) through its `Pipeline`: inputs -> prediction JSON."""

    def __init__(self, model_dir: Path, device: str, precision: str, max_batch_size: int, max_batch_tokens: int):
        from .predict import Pipeline

        self.pipe = Pipeline(model_dir, device=device, precision=precision, batch_size=max_batch_size,
                             max_tokens=max_batch_tokens)
        self.task: Task = self.pipe.task
        self.max_length = getattr(self.task, "max_seq_length", 512)
        self.routes = ("/v1/predict", *(("/v1/rerank",) if self._reranks() else ()))

    def _reranks(self) -> bool:
        """Whether the task scores (query, text) pairs: a pair model, with a label that means relevant."""
        try:
            return self.task.relevance({"score": 0.0, "probabilities": dict.fromkeys(self.pipe.labels, 0.5)}) is not None
        except BertkitError:
            return False

    def info(self) -> dict[str, Any]:
        return {"task": self.task.name, "labels": self.pipe.labels, "backend": self.pipe.backend.name,
                "max_seq_length": self.max_length}

    def prepare(self, inputs: list[Any]) -> Prepared:
        """The inputs featurized as `Pipeline.predict` featurizes them; their tokens are their rows'."""
        texts, seconds = self.task.split_inputs(inputs)
        data = self.task.inputs_from_texts(texts, seconds, **self.pipe.meta.get("input_options", {}))
        features = self.task.featurize(data, self.pipe.tokenizer, self.pipe.label2id)
        return Prepared(features, len(inputs), int(features.lengths.sum()))

    def run(self, requests: list[Features]) -> list[list[dict[str, Any]]]:
        """Each request's predictions, its rows run in forward passes with the other requests' rows."""
        from .predict import infer

        first = requests[0]
        rows = [row for features in requests for row in features.rows]
        # `infer` reads only the rows (and the pad id): the group's rows, each request decoded on its own below
        group = Features(rows, first.data, np.zeros(len(rows), np.int64), first.labels, first.pad_token_id)
        outputs = infer(self.pipe.backend, self.task, group, self.pipe.batch_size, max_tokens=self.pipe.max_tokens)
        crf = {"crf": self.pipe.backend.crf} if self.pipe.backend.crf is not None else {}
        answers, at = [], 0
        for features in requests:
            own = {name: x[at : at + len(features.rows)] for name, x in outputs.items()}
            answers.append([self.task.prediction_json(p) for p in self.task.decode(features, own, **crf)])
            at += len(features.rows)
        return answers

    def warm_up(self, batch_size: int) -> None:
        """One forward pass at the largest shape served: `batch_size` inputs of the longest length."""
        long = " ".join(["warm"] * 2 * self.max_length)  # truncated (or cut into windows) at the longest length
        if self.task.second is None:
            self.pipe([long] * batch_size)
        else:  # a short first text, a long second one (a question's context)
            self.pipe(["warm up"] * batch_size, [long] * batch_size)


class EncoderModel:
    """Any model folder's encoder (or an exported encoder) as an embedder: texts -> (vectors, tokens)."""

    routes = ("/v1/embeddings",)

    def __init__(self, model_dir: Path, pooling: str, normalize: bool, device: str, max_batch_size: int,
                 max_batch_tokens: int):
        from .embed import Embedder

        self.embedder = Embedder(model_dir, pooling=pooling, normalize=normalize, batch_size=max_batch_size,
                                 device=device, max_tokens=max_batch_tokens)
        self.pooling, self.normalize = pooling, normalize
        self.dimensions = BertConfig.load(model_dir).hidden_size  # a vector's size, known before any request runs

    def info(self) -> dict[str, Any]:
        return {"task": "embed", "pooling": self.pooling, "normalize": self.normalize,
                "backend": self.embedder.backend.name, "max_seq_length": self.embedder.max_length}

    def prepare(self, texts: list[str]) -> Prepared:
        """The texts tokenized as `Embedder.embed` tokenizes them (truncated at the longest length)."""
        rows = self.embedder.tokenizer.encode_batch(texts, max_length=self.embedder.max_length, truncation=True)
        return Prepared(rows, len(texts), sum(len(r.ids) for r in rows))

    def run(self, requests: list[list[Any]]) -> list[tuple[np.ndarray, list[int]]]:
        """Each request's vectors, (n, hidden) float32, and its texts' tokens; the group's rows run together in
        length-sorted forward passes, as `Embedder.embed` runs a list of texts."""
        from .runtime import batches

        e = self.embedder
        rows = [row for encoded in requests for row in encoded]
        lengths = np.fromiter((len(r.ids) for r in rows), dtype=np.int64, count=len(rows))
        vectors = np.zeros((len(rows), self.dimensions), np.float32)
        for idx in batches(lengths, e.batch_size, e.backend.pads, e.max_tokens):
            batch = e._pad([rows[i] for i in idx])
            vectors[idx] = e._pool(e.backend.run(batch, e.outputs)[e.outputs[0]], batch["attention_mask"])
        if e.normalize:
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        answers, at = [], 0
        for encoded in requests:
            answers.append((vectors[at : at + len(encoded)], lengths[at : at + len(encoded)].tolist()))
            at += len(encoded)
        return answers

    def warm_up(self, batch_size: int) -> None:
        self.embedder.embed([" ".join(["warm"] * 2 * self.embedder.max_length)] * batch_size)


def load(model_dir: Path, pooling: str | None, normalize: bool, device: str, precision: str, max_batch_size: int,
         max_batch_tokens: int) -> TaskModel | EncoderModel:
    """The served model: a fine-tuned folder serves its task; any folder with --pooling (and a pre-trained one,
    which has no task) serves as an embedder."""
    if pooling is None and (model_dir / TASK_FILE).is_file():
        return TaskModel(model_dir, device, precision, max_batch_size, max_batch_tokens)
    if precision != "fp32":
        raise BertkitError("an embedder serves in fp32 (--precision is for task models)")
    return EncoderModel(model_dir, pooling or "mean", normalize, device, max_batch_size, max_batch_tokens)


# ---- the bodies ----------------------------------------------------------------------------------------------

def parse(body: bytes) -> Any:
    """The JSON a body holds, or BadRequest (400) saying why it is not JSON."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadRequest(400, f"the body is not UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise BadRequest(400, f"the body is not valid JSON ({e})") from None


def fields(payload: Any, required: set[str], optional: set[str] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
    """A JSON object with the required fields and no unknown ones, or BadRequest (422)."""
    names = sorted(required)
    if not isinstance(payload, dict) or not required <= set(payload):
        shown = " and ".join(f'"{n}"' for n in names)
        raise BadRequest(422, f"the body must be a JSON object with {shown}")
    unknown = sorted(set(payload) - required - optional)
    if unknown:
        known = ", ".join(f'"{n}"' for n in sorted(required | optional))
        raise BadRequest(422, f"unknown field(s) {', '.join(map(repr, unknown))}: the body holds only {known}")
    return payload


def items(value: Any, name: str, max_inputs: int) -> list[Any]:
    """A non-empty list of at most max_inputs items, or BadRequest (422)."""
    if not isinstance(value, list):
        raise BadRequest(422, f'"{name}" must be a list, got {json_kind(value)}')
    if not value:
        raise BadRequest(422, f'"{name}" is empty')
    if len(value) > max_inputs:
        raise BadRequest(422, f'"{name}" holds {len(value)} items, at most {max_inputs} per request')
    return value


def predict_inputs(payload: Any, task: Task, max_inputs: int) -> list[Any]:
    """/v1/predict: {"inputs": [...]}, each input as the task takes it."""
    if not isinstance(payload, dict) or "inputs" not in payload:
        raise BadRequest(422, 'the body must be a JSON object with "inputs": a list')
    inputs = items(fields(payload, {"inputs"})["inputs"], "inputs", max_inputs)
    _check(task, inputs, "inputs")
    return inputs


def rerank_request(payload: Any, task: Task, max_inputs: int) -> dict[str, Any]:
    """/v1/rerank, in text-embeddings-inference's shape: {"query": q, "texts": [...], "top_n"?: k,
    "raw_scores"?: bool, "return_text"?: bool, "truncate"?: bool}; gives it with its [query, text] inputs."""
    body = fields(payload, {"query", "texts"}, {"top_n", "raw_scores", "return_text", "truncate"})
    texts = items(body["texts"], "texts", max_inputs)
    try:
        check_text(body["query"], "query")
        for i, text in enumerate(texts):
            check_text(text, f"texts[{i}]")
    except InputError as e:
        raise BadRequest(422, str(e)) from None
    top_n = body.get("top_n")
    if top_n is not None and (not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1):
        raise BadRequest(422, f'"top_n" must be a positive integer, got {json_kind(top_n)}')
    for flag in ("raw_scores", "return_text", "truncate"):
        if not isinstance(body.get(flag, False), bool):
            raise BadRequest(422, f'"{flag}" must be true or false, got {json_kind(body[flag])}')
    return {**body, "inputs": [[body["query"], t] for t in texts]}


def rerank_answer(request: dict[str, Any], predictions: list[dict[str, Any]], task: Task) -> list[dict[str, Any]]:
    """[{"index": i, "score": s}, ...] best first (the top_n best); raw_scores: log-odds instead of probabilities."""
    scores = [float(task.relevance(p)) for p in predictions]  # type: ignore[arg-type]
    if request.get("raw_scores") and "score" not in predictions[0]:
        scores = [float(np.log(max(s, 1e-12) / max(1 - s, 1e-12))) for s in scores]
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[: request.get("top_n") or len(scores)]
    return [{"index": i, "score": scores[i], **({"text": request["texts"][i]} if request.get("return_text") else {})}
            for i in order]


def embeddings_request(payload: Any, max_inputs: int, dimensions: int) -> dict[str, Any]:
    """/v1/embeddings, in OpenAI's shape: {"input": str | [str], "model"?: ..., "encoding_format"?: "float" |
    "base64", "dimensions"?: n, "user"?: ...}; gives it with its texts. `dimensions` is the model's vector size:
    the only one asked for may be that one (checked here, before the request runs)."""
    body = fields(payload, {"input"}, {"model", "encoding_format", "dimensions", "user"})
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    texts = items(texts, "input", max_inputs)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise BadRequest(422, f"input[{i}]: expected a string (token ids are not taken), got {json_kind(text)}")
        if not text.strip():
            raise BadRequest(422, f"input[{i}]: the text is empty")
    if body.get("encoding_format", "float") not in ("float", "base64"):
        raise BadRequest(422, f'"encoding_format" must be "float" or "base64", got {body["encoding_format"]!r}')
    if body.get("dimensions") is not None and body["dimensions"] != dimensions:
        raise BadRequest(422, f'"dimensions" {body["dimensions"]}: this model gives vectors of {dimensions}')
    return {**body, "texts": texts}


def embeddings_answer(request: dict[str, Any], result: tuple[np.ndarray, list[int]], model: str) -> dict[str, Any]:
    """OpenAI's embeddings response: the vectors (float32 arrays, for orjson to write without Python floats; or
    base64 of little-endian float32), their tokens."""
    vectors, counts = result
    base64_ = request.get("encoding_format") == "base64"
    data = [{"object": "embedding", "index": i,
             "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if base64_ else v}
            for i, v in enumerate(vectors)]
    tokens = sum(counts)
    return {"object": "list", "data": data, "model": request.get("model") or model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def _check(task: Task, inputs: list[Any], name: str) -> None:
    try:
        for i, item in enumerate(inputs):
            task.check_input(item, f"{name}[{i}]")
    except InputError as e:
        raise BadRequest(422, str(e)) from None
