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
so far (half of it: the pace slows as load grows). A request still queued after `--request-timeout` seconds is answered 503 and never runs. With `--api-key` (or BERTKIT_API_KEY)
every /v1 route needs `Authorization: Bearer KEY` (compared in constant time; never logged); /health and
/metrics stay open. Requests are grouped by `bertkit.batcher` (at most `--max-batch-size` inputs and
`--max-batch-tokens` tokens a group; the model cuts each group into forward passes within both). Bad
requests get a 4xx with `{"error": "..."}` (docs/bad-inputs.md); a failure inside gets 500 with
`internal error (id ...)`, the details in the log under that id. SIGTERM stops taking requests, finishes
those in flight, then exits 0. `--workers N` runs N processes on one port, the cores shared among them;
each takes connections only once warmed up, so that a cold worker never answers 503 while a warm one could.

Starlette on uvicorn: the ASGI toolkit and server FastAPI itself stands on, well kept and small; a few routes
with hand-written validation need neither FastAPI's pydantic models nor its dependency tree. The serve extra
brings httptools and uvloop, which uvicorn takes when installed (its "standard" set).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import math
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import settings
from .batcher import Batcher, Job
from .errors import BertkitError
from .openapi import document, swagger_page
from .served import (
    BadRequest,
    EncoderModel,
    TaskModel,
    embeddings_answer,
    embeddings_request,
    load,
    parse,
    predict_inputs,
    rerank_answer,
    rerank_request,
)
from .settings import DEVICES, Settings, non_negative, one_of, option, positive

try:  # the serve extra; without it `bertkit serve` says what to install
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
except ImportError:  # pragma: no cover
    ClientDisconnect = Request = HTMLResponse = JSONResponse = Response = None  # type: ignore[assignment,misc]

log = logging.getLogger("bertkit")

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
API_KEY_VARIABLE = "BERTKIT_API_KEY"


@dataclass(frozen=True)
class ServeSettings(Settings):
    model: Path = option(help="a model folder (fine-tuned: its task; any, with --pooling: an embedder) or an "
                              "exported one", metavar="DIR")
    host: str = option("127.0.0.1", "address to listen on")
    port: int = option(8000, "port to listen on")
    max_batch_size: int = option(32, "inputs a forward pass, at most (one larger request still runs)", check=positive)
    max_batch_tokens: int = option(16384, "tokens a forward pass, at most, padding included (one larger request "
                                          "still runs, split across passes)", check=positive)
    max_wait_ms: float = option(5.0, "how long a request waits for others to batch with", check=non_negative)
    max_concurrent_requests: int = option(512, "requests queued or running, at most: one more is answered 429 at "
                                               "once", check=positive)
    request_timeout: float = option(30.0, "seconds a request may wait in the queue; then it is answered 503 and "
                                          "never runs", check=positive)
    max_inputs: int = option(256, "inputs a request, at most", check=positive)
    max_body_bytes: int = option(1 << 20, "request body size, at most", check=positive)
    api_key: str | None = option(None, "every /v1 route needs Authorization: Bearer KEY", metavar="KEY",
                                 shows=f"the {API_KEY_VARIABLE} environment variable, if set", secret=True)
    pooling: str | None = option(None, "serve as an embedder (POST /v1/embeddings) with this pooling",
                                 check=one_of("mean", "cls", "pooler"), shows="mean for a model without a task")
    normalize: bool = option(False, "embedder: unit-length vectors (dot product = cosine)")
    workers: int = option(1, "processes on one port, the cores shared among them", check=positive)
    device: str = option("auto", "auto: a GPU when there is one", check=DEVICES)
    precision: str = option("fp32", "bf16: autocast (PyTorch task models)", check=one_of("fp32", "bf16"))


# ---- the app ---------------------------------------------------------------------------------------------------

def _metrics() -> tuple[Any, dict[str, Any]]:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

    disable_created_metrics()  # no *_created series beside each counter: the process start time says as much
    registry = CollectorRegistry()
    return registry, {
        "requests": Counter("bertkit_requests", "HTTP requests by route and status code", ["route", "code"],
                            registry=registry),
        "errors": Counter("bertkit_errors", "Requests answered with an error, by status code", ["code"],
                          registry=registry),
        "inputs": Counter("bertkit_inputs", "Inputs answered", registry=registry),
        "latency": Histogram("bertkit_request_seconds", "Time from a /v1 request's arrival to its answer",
                             buckets=LATENCY_BUCKETS, registry=registry),
        "batch_size": Histogram("bertkit_batch_size", "Inputs per group of requests run together",
                                buckets=BATCH_BUCKETS, registry=registry),
        "active": Gauge("bertkit_requests_active", "Requests queued or running", registry=registry),
    }  # fmt: skip


class App:
    """The server's routes over one served model: each answers, counts itself in the metrics, and never raises."""

    def __init__(self, cfg: ServeSettings, model: TaskModel | EncoderModel, warm_first: bool = False):
        self.cfg, self.model = cfg, model
        self.warm_first = warm_first  # take no connection before the warm-up ends (one of several workers on a port)
        self.key = (cfg.api_key or os.environ.get(API_KEY_VARIABLE) or "").encode() or None
        self.registry, self.metrics = _metrics()
        self.batcher = Batcher(model.run, cfg.max_batch_size, cfg.max_batch_tokens, cfg.max_wait_ms,
                               self.metrics["batch_size"].observe)
        self.active = 0  # requests admitted and not yet answered: queued or running
        self.ready = False  # warmed up
        self.broken: str | None = None  # why the warm-up failed, if it did: the server then answers nothing
        handlers = {"/v1/predict": self.predict, "/v1/rerank": self.rerank, "/v1/embeddings": self.embeddings}
        self.routes: dict[str, tuple[str, Callable]] = {path: ("POST", handlers[path]) for path in model.routes}
        self.routes |= {"/v1/model": ("GET", self.model_info), "/health": ("GET", self.health),
                        "/metrics": ("GET", self.prometheus), "/openapi.json": ("GET", self.openapi),
                        "/docs": ("GET", self.docs)}
        self.info = {
            "model": str(cfg.model), **model.info(), "routes": [f"{m} {p}" for p, (m, _) in self.routes.items()],
            "max_batch_size": cfg.max_batch_size, "max_batch_tokens": cfg.max_batch_tokens, "max_wait_ms": cfg.max_wait_ms,
            "max_concurrent_requests": cfg.max_concurrent_requests, "request_timeout": cfg.request_timeout,
            "max_inputs": cfg.max_inputs, "max_body_bytes": cfg.max_body_bytes, "api_key": self.key is not None,
        }  # fmt: skip

    def answer(self, route: str, status: int, payload: Any, headers: dict[str, str] | None = None) -> Any:
        self.metrics["requests"].labels(route, str(status)).inc()
        if status >= 400:
            self.metrics["errors"].labels(str(status)).inc()
        return JSONResponse(payload, status_code=status, headers=headers)

    def unauthorized(self, route: str, request: Request) -> Any:
        """401 for a /v1 request without the API key (when the server has one), else None."""
        if self.key is None:
            return None
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.key):
            return None
        return self.answer(route, 401, {"error": "a valid API key is needed: Authorization: Bearer KEY"},
                           {"WWW-Authenticate": "Bearer"})

    def refusal(self, route: str, request: Request) -> Any:
        """The answer to a /v1 request turned away before its body is read, or None: no key, not ready, or full."""
        unauthorized = self.unauthorized(route, request)
        if unauthorized is not None:
            return unauthorized
        if self.broken:
            return self.answer(route, 500, {"error": self.broken})
        if not self.ready:
            return self.answer(route, 503, {"error": "warming up: retry shortly"}, {"Retry-After": "1"})
        if self.active >= self.cfg.max_concurrent_requests:
            return self.answer(route, 429, {"error": f"busy: {self.active} requests are queued or running, the most "
                                                     "this server takes; retry later"}, {"Retry-After": "1"})
        backlog = self.batcher.backlog()
        if backlog > 0.5 * self.cfg.request_timeout:  # admitted, it could wait out its timeout: refused now instead
            wait = math.ceil(backlog - 0.5 * self.cfg.request_timeout)
            return self.answer(route, 429, {"error": f"busy: the queue holds about {backlog:.0f} s of work; retry "
                                                     "later"}, {"Retry-After": str(max(1, wait))})
        return None

    async def serve_request(self, route: str, request: Request, read: Callable[[Any], tuple[list[Any], Any]],
                            reply: Callable[[Any, list[Any]], Any]) -> Any:
        """The path every /v1 POST takes: refused, or admitted; its body read and checked (`read`: JSON -> inputs
        and the request), its inputs run with others', and the answer made (`reply`)."""
        refused = self.refusal(route, request)
        if refused is not None:
            return refused
        started = time.perf_counter()
        self.active += 1
        self.metrics["active"].inc()
        try:
            body = await _read_body(request, self.cfg.max_body_bytes)
            inputs, parsed = read(parse(body))
            results = await self.submit(Job(inputs, self.model.count_tokens(inputs)))
            payload = reply(parsed, results)
        except BadRequest as e:
            headers = {"Retry-After": "1"} if e.status == 503 else None
            return self.answer(route, e.status, {"error": str(e)}, headers)
        except ClientDisconnect:
            return self.answer(route, 400, {"error": "the client went away before the body was read"})
        except Exception:
            return self.answer(route, 500, {"error": self.failure(route)})
        finally:
            self.active -= 1
            self.metrics["active"].dec()
        self.metrics["inputs"].inc(len(inputs))
        self.metrics["latency"].observe(time.perf_counter() - started)
        return self.answer(route, 200, payload)

    async def submit(self, job: Job) -> list[Any]:
        """A job's results; BadRequest 503 if it is still queued after the request timeout (then it never runs)."""
        self.batcher.add(job)
        try:
            return await asyncio.wait_for(asyncio.shield(job.done), self.cfg.request_timeout)
        except asyncio.TimeoutError:
            if self.batcher.drop(job):
                raise BadRequest(503, f"queued for {self.cfg.request_timeout:g} s without running (the server is "
                                      "busy): not run; retry later") from None
            return await job.done  # it was running already: its answer is near

    def failure(self, where: str) -> str:
        """Logs the exception being handled under a new id; gives what the client is told."""
        error_id = uuid.uuid4().hex[:12]
        log.exception("internal error %s on %s", error_id, where)
        return f"internal error (id {error_id})"

    async def predict(self, request: Request) -> Any:
        task = self.model.task  # type: ignore[union-attr]
        return await self.serve_request(
            "/v1/predict", request, lambda body: (predict_inputs(body, task, self.cfg.max_inputs), None),
            lambda _, predictions: {"predictions": predictions})

    async def rerank(self, request: Request) -> Any:
        task = self.model.task  # type: ignore[union-attr]

        def read(body: Any) -> tuple[list[Any], Any]:
            asked = rerank_request(body, task, self.cfg.max_inputs)
            return asked["inputs"], asked

        return await self.serve_request("/v1/rerank", request, read,
                                        lambda asked, predictions: rerank_answer(asked, predictions, task))

    async def embeddings(self, request: Request) -> Any:
        def read(body: Any) -> tuple[list[Any], Any]:
            asked = embeddings_request(body, self.cfg.max_inputs)
            return asked["texts"], asked

        return await self.serve_request("/v1/embeddings", request, read,
                                        lambda asked, results: embeddings_answer(asked, results, self.cfg.model.name))

    async def model_info(self, request: Request) -> Any:
        return self.unauthorized("/v1/model", request) or self.answer("/v1/model", 200, self.info)

    async def health(self, request: Request) -> Any:
        if self.broken:
            return self.answer("/health", 500, {"status": self.broken})
        if not self.ready:
            return self.answer("/health", 503, {"status": "warming up"}, {"Retry-After": "1"})
        return self.answer("/health", 200, {"status": "ok"})

    async def prometheus(self, request: Request) -> Any:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        self.metrics["requests"].labels("/metrics", "200").inc()
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    async def openapi(self, request: Request) -> Any:
        v1 = tuple(p for p in self.routes if p.startswith("/v1/") and p != "/v1/model")
        doc = document(v1, getattr(self.model, "task", None), self.info, self.cfg.max_inputs, self.key is not None)
        return self.answer("/openapi.json", 200, doc)

    async def docs(self, request: Request) -> Any:
        self.metrics["requests"].labels("/docs", "200").inc()
        return HTMLResponse(swagger_page())

    def route_of(self, request: Request) -> str:
        """A request's route for the metrics: its path, or "other" for a path the server does not have."""
        return request.url.path if request.url.path in self.routes else "other"

    async def not_found(self, request: Request, exc: Exception) -> Any:
        known = ", ".join(p for p in self.routes if p != "/docs")
        return self.answer(self.route_of(request), 404, {"error": f"no route {request.url.path}: try {known}"})

    async def wrong_method(self, request: Request, exc: Exception) -> Any:
        return self.answer(self.route_of(request), 405, {"error": f"{request.method} is not allowed on {request.url.path}"})

    async def failed(self, request: Request, exc: Exception) -> Any:
        return self.answer(self.route_of(request), 500, {"error": self.failure(request.url.path)})

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        batching = asyncio.create_task(self.batcher.run())
        warming = asyncio.create_task(self.warm_up())
        if self.warm_first:  # uvicorn listens only after this: the port's warm workers take the connections meanwhile
            await warming
        yield
        for task in (warming, batching):  # uvicorn has finished the requests in flight by now
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def warm_up(self) -> None:
        """One forward pass at the largest batch shape served, then ready (/health answers 200)."""
        t0 = time.perf_counter()
        try:
            await asyncio.to_thread(self.model.warm_up, self.cfg.max_batch_size)
        except Exception:
            self.broken = f"the model failed to warm up: {self.failure('the warm-up')}"
            return
        self.ready = True
        log.warning("ready: warmed up in %.1f s", time.perf_counter() - t0)


def create_app(cfg: ServeSettings, model: TaskModel | EncoderModel | None = None, warm_first: bool = False) -> Any:
    """Gives the ASGI app serving `cfg.model` (loaded now unless a served model is given); with `warm_first` it
    accepts connections only once warmed up, instead of answering 503 until then."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    if model is None:
        model = load(cfg.model, cfg.pooling, cfg.normalize, cfg.device, cfg.precision, cfg.max_batch_size,
                     cfg.max_batch_tokens)
    server = App(cfg, model, warm_first)
    routes = [Route(path, handler, methods=[method]) for path, (method, handler) in server.routes.items()]
    handlers = {404: server.not_found, 405: server.wrong_method, 500: server.failed}
    app = Starlette(routes=routes, exception_handlers=handlers, lifespan=server.lifespan)  # type: ignore[arg-type]
    app.state.server = server
    return app


async def _read_body(request: Any, limit: int) -> bytes:
    """Gives the request body, refusing one over `limit` bytes without reading it all (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"the body is {int(declared):,} bytes, at most {limit:,}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"the body is over {limit:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


# ---- the process -----------------------------------------------------------------------------------------------

SETTINGS_VARIABLE = "BERTKIT_SERVE_SETTINGS"  # how `--workers` hands each worker process its settings


def worker_app() -> Any:
    """The app of one of `--workers` processes (uvicorn imports this by name in each)."""
    cfg = settings.build(ServeSettings, json.loads(os.environ[SETTINGS_VARIABLE]), source=SETTINGS_VARIABLE)
    return create_app(cfg, warm_first=True)  # a cold worker must not answer 503 while a warm one could answer


def serve(cfg: ServeSettings) -> None:
    """Serves until SIGTERM or Ctrl-C: loads the model, warms it up, then listens on cfg.host:cfg.port."""
    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError:
        raise BertkitError("bertkit serve needs uvicorn, starlette and prometheus_client: pip install 'bertkit[serve]'") from None
    # uvicorn finishes the requests in flight on SIGTERM (each within the request timeout), then raises the signal
    # again to end the process; a handler here takes that second one, so that a drained server exits 0
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    options = {"host": cfg.host, "port": cfg.port, "log_level": "warning", "access_log": False,
               "timeout_graceful_shutdown": int(cfg.request_timeout) + 30}
    if cfg.workers == 1:
        app = create_app(cfg)  # a model that cannot be served fails here, before the port is taken
        log.warning("serving %s on http://%s:%d", cfg.model, cfg.host, cfg.port)
        uvicorn.Server(uvicorn.Config(app, **options)).run()
        return
    log.warning("serving %s on http://%s:%d (%d processes)", cfg.model, cfg.host, cfg.port, cfg.workers)
    # each worker loads the model and takes its share of the cores (torch and onnxruntime read OMP_NUM_THREADS)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // cfg.workers)))
    os.environ[SETTINGS_VARIABLE] = json.dumps(settings.to_dict(cfg))
    uvicorn.run("bertkit.serve:worker_app", factory=True, workers=cfg.workers, **options)
