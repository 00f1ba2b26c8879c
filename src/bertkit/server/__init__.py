"""`bertkit serve`: a model, PyTorch or exported, behind HTTP: dynamic micro-batching, backpressure, API keys.

    bertkit serve --model exported/sst2 --port 8000 --api-key "$KEY"
    curl -s localhost:8000/v1/predict -H "Authorization: Bearer $KEY" -d '{"inputs": ["a gorgeous film"]}'
    bertkit serve --model ../shared/data/models/all-MiniLM-L6-v2 --pooling mean --normalize   # an embedder

| route               | answers                                                                                    |
|---------------------|--------------------------------------------------------------------------------------------|
| POST /v1/predict    | a fine-tuned model: `{"inputs": [...]}` -> `{"predictions": [...]}`, what `bertkit predict` prints |
| POST /v1/rerank     | a pair model as a cross-encoder: `{"query", "texts", "top_n"}` -> `[{"index", "score"}]`, best first |
| POST /v1/embeddings | an embedder, in OpenAI's format (its `openai` client works against it)                      |
| GET /v1/model       | the task, labels, backend, sequence length, routes and limits                               |
| GET /health         | 200 once the model is loaded and warmed up (one forward at the largest batch), 503 before  |
| GET /metrics        | Prometheus text: requests by route and code, inputs, batch sizes, latency, requests in flight |
| GET /openapi.json   | the routes with this model's request and response schemas; GET /docs shows them (Swagger UI) |

Backpressure: at most `--max-concurrent-requests` requests are queued or running; one more is refused at once
with 429 and Retry-After, before its body is read, so memory stays bounded under any flood. So is one that
would wait out its timeout: when the work queued would take most of `--request-timeout` at the pace measured
so far (half of it: the pace slows as load grows). A request still queued after `--request-timeout` seconds is
answered 503 and never runs; a forward pass that runs longer than that (a model that hangs) turns /health to 503
"stalled" and its requests are answered 503, while SIGTERM still ends the process. With `--api-key` (or BERTKIT_API_KEY)
every /v1 route needs `Authorization: Bearer KEY` (compared in constant time; never logged); /health and
/metrics stay open. Requests are grouped by `batcher` (at most `--max-batch-size` inputs and
`--max-batch-tokens` tokens a group; the model cuts each group into forward passes within both). Bad
requests get a 4xx with `{"error": "..."}` (docs/bad-inputs.md); a failure inside gets 500 with
`internal error (id ...)`, the details in the log under that id. SIGTERM stops taking requests, finishes
those in flight, then exits 0. `--workers N` runs N processes on one port, the cores shared among them;
each takes connections only once warmed up, so that a cold worker never answers 503 while a warm one could,
and gets its settings (the API key among them) through multiprocessing's pipe, in neither its environment nor
its command line. No answer names a filesystem path: the model is named by its folder's name.

The event loop only moves bytes: a request's body is parsed, checked and tokenized once in a worker thread
(`prepare`), its features go through the batcher into the forward pass, and its answer is written by orjson
(numpy arrays as they are, no Python lists of floats) in the forward pass's thread.

Starlette on uvicorn: the ASGI toolkit and server FastAPI itself stands on, well kept and small; a few routes
with hand-written validation need neither FastAPI's pydantic models nor its dependency tree. The serve extra
brings httptools and uvloop, which uvicorn takes when installed (its "standard" set).

A module a job, in the order data flows: `settings` (the command's options), `bodies` (what each route takes
and answers), `adapters` (the served model: a task model or an embedder, its inputs prepared once and run in
groups), `batcher` (requests grouped into forward passes, in a daemon thread), `openapi` (the OpenAPI
document), `app` (the ASGI app: admission, timeouts, metrics), `process` (uvicorn, SIGTERM, --workers).
"""

from .app import create_app
from .process import serve
from .settings import ServeSettings

__all__ = ["ServeSettings", "create_app", "serve"]
