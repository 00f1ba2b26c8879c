"""The server's OpenAPI 3.1 document (GET /openapi.json) and a Swagger UI page (GET /docs): the routes the
loaded model serves, each with its request and response schemas for that model's task (bertkit.tasks gives
a task's input and prediction schemas)."""

from __future__ import annotations

import json
from typing import Any

from ..tasks import Task
from ..tasks.base import STRING, obj

ERROR = obj({"error": {"type": "string"}})
NUMBER, INTEGER, BOOLEAN = {"type": "number"}, {"type": "integer"}, {"type": "boolean"}
FAILURES = {  # status -> when a /v1 route answers it
    "400": "the body is not UTF-8 JSON", "401": "no or wrong API key (Authorization: Bearer KEY)",
    "413": "the body is over --max-body-bytes", "422": "the body is JSON but not what the route takes",
    "429": "--max-concurrent-requests are queued or running: retry after Retry-After seconds",
    "500": "internal error (its id is in the server's log)",
    "503": "warming up, queued past --request-timeout (it never ran), or stalled (a forward pass ran past it)",
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _post(summary: str, request: dict[str, Any], response: dict[str, Any], secured: bool) -> dict[str, Any]:
    responses = {"200": _json(response, "OK"), **{code: _json(ERROR, why) for code, why in FAILURES.items()
                                                   if code != "401" or secured}}
    return {"post": {"summary": summary, "requestBody": {"required": True, "content": {"application/json": {"schema": request}}},
                     "responses": responses, **({"security": [{"bearer": []}]} if secured else {})}}


def document(routes: tuple[str, ...], task: Task | None, info: dict[str, Any], max_inputs: int,
             secured: bool) -> dict[str, Any]:
    """The OpenAPI document of a server: its routes (`routes`: the /v1 routes of the loaded model)."""
    paths: dict[str, Any] = {}
    if "/v1/predict" in routes and task is not None:
        inputs = {"type": "array", "items": task.input_schema, "minItems": 1, "maxItems": max_inputs}
        paths["/v1/predict"] = _post(f"Predict with the {task.name} model", obj({"inputs": inputs}),
                                     obj({"predictions": {"type": "array", "items": task.prediction_schema}}), secured)
    if "/v1/rerank" in routes:
        texts = {"type": "array", "items": STRING, "minItems": 1, "maxItems": max_inputs}
        request = obj({"query": STRING, "texts": texts}, {"top_n": {"type": "integer", "minimum": 1},
                      "raw_scores": BOOLEAN, "return_text": BOOLEAN, "truncate": BOOLEAN})
        answer = {"type": "array", "items": obj({"index": INTEGER, "score": NUMBER}, {"text": {"type": "string"}})}
        paths["/v1/rerank"] = _post("Rank texts by relevance to a query (text-embeddings-inference's shape)",
                                    request, answer, secured)
    if "/v1/embeddings" in routes:
        one = {"oneOf": [STRING, {"type": "array", "items": STRING, "minItems": 1, "maxItems": max_inputs}]}
        request = obj({"input": one}, {"model": {"type": "string"}, "encoding_format": {"enum": ["float", "base64"]},
                                       "dimensions": INTEGER, "user": {"type": "string"}})
        vector = {"oneOf": [{"type": "array", "items": NUMBER}, {"type": "string", "contentEncoding": "base64"}]}
        item = obj({"object": {"const": "embedding"}, "index": INTEGER, "embedding": vector})
        answer = obj({"object": {"const": "list"}, "data": {"type": "array", "items": item}, "model": {"type": "string"},
                      "usage": obj({"prompt_tokens": INTEGER, "total_tokens": INTEGER})})
        paths["/v1/embeddings"] = _post("Sentence embeddings (OpenAI's embeddings API)", request, answer, secured)
    model = {"get": {"summary": "What is served: the task, its labels, the backend, the routes", "responses": {
        "200": _json({"type": "object"}, "OK"), **({"401": _json(ERROR, FAILURES["401"])} if secured else {})},
        **({"security": [{"bearer": []}]} if secured else {})}}
    paths["/v1/model"] = model
    paths["/health"] = {"get": {"summary": "200 once the model is loaded and warmed up; 503 before, or while a "
                                           "forward pass runs past --request-timeout", "responses": {
        "200": _json(obj({"status": {"const": "ok"}}), "ready"),
        "503": _json(obj({"status": {"enum": ["warming up", "stalled"]}}, {"detail": {"type": "string"}}),
                     "warming up, or stalled")}}}
    paths["/metrics"] = {"get": {"summary": "Prometheus metrics", "responses": {
        "200": {"description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}}}}}
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "bertkit serve", "version": "1",
                 # info's "model" is the folder's name: no answer shows a filesystem path
                 "description": f"{info.get('task')} model {info.get('model')} ({info.get('backend')})"},
        "paths": paths,
    }
    if secured:
        doc["components"] = {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}
    return doc


def swagger_page(title: str = "bertkit serve") -> str:
    """Swagger UI (from a CDN: the page needs the browser online) over /openapi.json."""
    return ("<!doctype html><html><head><meta charset='utf-8'><title>" + title + "</title>"
            "<link rel='stylesheet' href='https://unpkg.com/swagger-ui-dist@5/swagger-ui.css'></head><body>"
            "<div id='ui'></div><script src='https://unpkg.com/swagger-ui-dist@5/swagger-ui-bundle.js'></script>"
            "<script>SwaggerUIBundle({url: " + json.dumps("/openapi.json") + ", dom_id: '#ui'});</script></body></html>")
