"""The request bodies `bertkit serve` takes and the answers it gives: each checker gives the inputs a body holds
or raises BadRequest with the status and one line naming what is wrong and where; each answer is JSON-ready
(an embedder's vectors stay numpy arrays, for orjson to write)."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np

from ..tasks import InputError, Task
from ..tasks.base import check_text, json_kind


class BadRequest(Exception):
    """A request the server refuses: its status and the one-line reason it gives back."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status



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
    scores = [float(task.relevance(p, raw=bool(request.get("raw_scores")))) for p in predictions]  # type: ignore[arg-type]
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[: request.get("top_n") or len(scores)]
    return [{"index": i, "score": scores[i], **({"text": request["texts"][i]} if request.get("return_text") else {})}
            for i in order]


def embeddings_request(payload: Any, max_inputs: int, dimensions: int) -> dict[str, Any]:
    """/v1/embeddings, in OpenAI's shape: {"input": str | [str], "model"?: ..., "encoding_format"?: "float" |
    "base64", "dimensions"?: n, "user"?: ...}; gives it with its texts. `dimensions` is the model's vector size:
    one asked for may be that or fewer, 1 at least (checked here, before the request runs): the vectors' leading
    dimensions, scaled back to length 1 (a Matryoshka-trained embedder keeps most of its quality so)."""
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
    asked = body.get("dimensions")
    if asked is not None and (not isinstance(asked, int) or isinstance(asked, bool) or not 1 <= asked <= dimensions):
        raise BadRequest(422, f'"dimensions" {json.dumps(asked)}: this model gives vectors of {dimensions}; ask for 1 '
                              f'to {dimensions}')
    return {**body, "texts": texts}


def embeddings_answer(request: dict[str, Any], result: tuple[np.ndarray, list[int]], model: str) -> dict[str, Any]:
    """OpenAI's embeddings response: the vectors (float32 arrays, for orjson to write without Python floats; or
    base64 of little-endian float32), their tokens."""
    vectors, counts = result
    if request.get("dimensions") is not None and request["dimensions"] < vectors.shape[1]:
        vectors = vectors[:, : request["dimensions"]]
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
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
