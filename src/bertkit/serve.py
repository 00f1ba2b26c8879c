"""`bertkit serve`: a fine-tuned model, PyTorch or exported, behind HTTP, with dynamic micro-batching.

    bertkit serve --model exported/sst2 --port 8000
    curl -s localhost:8000/v1/predict -d '{"inputs": ["a gorgeous film"]}'

| route            | answers                                                                         |
|------------------|---------------------------------------------------------------------------------|
| POST /v1/predict | `{"inputs": [...]}` -> `{"predictions": [...]}`, each what `bertkit predict` prints |
| GET /v1/model    | task, labels, backend, max sequence length                                      |
| GET /health      | 200 once the model is loaded                                                    |
| GET /metrics     | Prometheus text: requests by route and code, inputs, batch sizes, latency       |

An input is a text (classify, ner), a [text, pair] list (pair), {"question", "context"} (qa), or a
list of words (ner). Concurrent requests wait in one queue; a batcher takes whole requests from it
until `max_batch_size` inputs or `max_wait_ms` after the first (waiting only while requests come
concurrently: a lone client is never held back), and runs them as one group: the pipeline sorts the
group's rows by length and runs the forward pass in a worker thread, so the event loop keeps taking
requests meanwhile. Each request gets back its own slice of the group's predictions,
in order. Texts longer than the model's sequence length are truncated as `bertkit predict` truncates
them (classification longest-first; QA and NER cut into windows, nothing lost). Bad requests get a
4xx with `{"error": "..."}`; SIGTERM stops taking requests, finishes those in flight, then exits 0.

Starlette on uvicorn: the ASGI toolkit and server FastAPI itself stands on, well kept and small; four
routes with hand-written validation need neither FastAPI's pydantic models nor its dependency tree.
The serve extra brings httptools and uvloop, which uvicorn takes when installed (its "standard" set):
they answered a lone client about 15% sooner than h11 and asyncio on a 2-core machine (bench/serve.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import BertkitError
from .predict import Pipeline
from .settings import DEVICES, Settings, non_negative, one_of, option, positive
from .tasks import InputError, Task
from .tasks.base import json_kind

try:  # the serve extra; without it `bertkit serve` says what to install
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, Response
except ImportError:  # pragma: no cover
    ClientDisconnect = Request = JSONResponse = Response = None  # type: ignore[assignment,misc]

log = logging.getLogger("bertkit")

MAX_BODY_BYTES = 1 << 20
MAX_INPUTS = 256
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class ServeSettings(Settings):
    model: Path = option(help="model folder from `bertkit finetune` or `bertkit export`", metavar="DIR")
    host: str = option("127.0.0.1", "address to listen on")
    port: int = option(8000, "port to listen on")
    max_batch_size: int = option(32, "inputs a forward pass (one larger request still runs whole)", check=positive)
    max_wait_ms: float = option(5.0, "how long a request waits for others to batch with", check=non_negative)
    max_inputs: int = option(MAX_INPUTS, "inputs a request, at most", check=positive)
    max_body_bytes: int = option(MAX_BODY_BYTES, "request body size, at most", check=positive)
    device: str = option("auto", "auto: a GPU when there is one", check=DEVICES)
    precision: str = option("fp32", "bf16: autocast (PyTorch models)", check=one_of("fp32", "bf16"))


class BadRequest(Exception):
    """A request the server refuses: its status and the one-line reason it gives back."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


# ---- what a request may hold -------------------------------------------------------------------------

def check_inputs(body: bytes, task: Task, max_inputs: int) -> list[Any]:
    """Gives the inputs of a /v1/predict body, or raises BadRequest naming what is wrong and where."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadRequest(400, f"the body is not UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadRequest(400, f"the body is not valid JSON ({e})") from None
    if not isinstance(payload, dict) or "inputs" not in payload:
        raise BadRequest(422, 'the body must be a JSON object with "inputs": a list')
    unknown = sorted(set(payload) - {"inputs"})
    if unknown:
        raise BadRequest(422, f"unknown field(s) {', '.join(map(repr, unknown))}: the body holds only \"inputs\"")
    inputs = payload["inputs"]
    if not isinstance(inputs, list):
        raise BadRequest(422, f'"inputs" must be a list, got {json_kind(inputs)}')
    if not inputs:
        raise BadRequest(422, '"inputs" is empty')
    if len(inputs) > max_inputs:
        raise BadRequest(422, f'"inputs" holds {len(inputs)} items, at most {max_inputs} per request')
    try:
        for i, item in enumerate(inputs):
            task.check_input(item, f"inputs[{i}]")
    except InputError as e:
        raise BadRequest(422, str(e)) from None
    return inputs


# ---- micro-batching ------------------------------------------------------------------------------------

@dataclass
class _Request:
    inputs: list[Any]
    done: asyncio.Future
    queued: float = field(default_factory=time.perf_counter)


class Batcher:
    """Groups the inputs of concurrent requests into forward passes; one group at a time, in a worker thread.

    A group starts with the oldest request and takes those queued behind it; it waits up to `max_wait_ms` for
    more only while requests come concurrently (the last group held several, or some arrived while it ran).
    A lone client's request therefore goes at once: waiting could gain it no company, only latency.
    """

    def __init__(self, pipeline: Pipeline, max_batch_size: int, max_wait_ms: float, metrics: Any):
        self.pipeline, self.max_batch_size, self.max_wait = pipeline, max_batch_size, max_wait_ms / 1000
        self.metrics = metrics
        self.queue: asyncio.Queue[_Request] = asyncio.Queue()
        self.crowded = False  # requests came concurrently lately: worth waiting for company

    async def predict(self, inputs: list[Any]) -> list[dict[str, Any]]:
        request = _Request(inputs, asyncio.get_running_loop().create_future())
        await self.queue.put(request)
        return await request.done

    async def run(self) -> None:
        """Takes groups off the queue until cancelled."""
        while True:
            group = [await self.queue.get()]
            size = len(group[0].inputs)
            deadline = time.perf_counter() + (self.max_wait if self.crowded else 0.0)
            while size < self.max_batch_size:
                request = self.queue.get_nowait() if not self.queue.empty() else await self._next(deadline)
                if request is None:
                    break
                group.append(request)
                size += len(request.inputs)
            await self._answer(group, size)
            self.crowded = len(group) > 1 or not self.queue.empty()

    async def _next(self, deadline: float) -> _Request | None:
        """Gives the next request to arrive before `deadline`, or None; never loses one that arrives as time runs out."""
        left = deadline - time.perf_counter()
        if left <= 0:
            return None
        getter = asyncio.ensure_future(self.queue.get())
        done, _ = await asyncio.wait({getter}, timeout=left)
        if done:
            return getter.result()
        getter.cancel()
        try:
            return await getter  # it may have got one just before the cancel
        except asyncio.CancelledError:
            return None

    async def _answer(self, group: list[_Request], size: int) -> None:
        inputs = [item for request in group for item in request.inputs]
        self.metrics["batch_size"].observe(size)
        try:
            predictions = await asyncio.to_thread(self.pipeline.predict, inputs)
        except Exception as e:  # the model failed: every request of the group hears it
            log.exception("prediction failed")
            for request in group:
                if not request.done.done():
                    request.done.set_exception(e)
            return
        at = 0
        for request in group:
            if not request.done.done():  # the client may have gone
                request.done.set_result(predictions[at : at + len(request.inputs)])
            at += len(request.inputs)


# ---- the app -------------------------------------------------------------------------------------------

def _metrics() -> tuple[Any, dict[str, Any]]:
    from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

    disable_created_metrics()  # no *_created series beside each counter: the process start time says as much
    registry = CollectorRegistry()
    return registry, {
        "requests": Counter("bertkit_requests", "HTTP requests by route and status code", ["route", "code"],
                            registry=registry),
        "errors": Counter("bertkit_errors", "Requests answered with an error, by status code", ["code"],
                          registry=registry),
        "inputs": Counter("bertkit_inputs", "Inputs predicted", registry=registry),
        "latency": Histogram("bertkit_request_seconds", "Time from a /v1/predict request's arrival to its answer",
                             buckets=LATENCY_BUCKETS, registry=registry),
        "batch_size": Histogram("bertkit_batch_size", "Inputs per forward pass", buckets=BATCH_BUCKETS,
                                registry=registry),
    }  # fmt: skip


class App:
    """The server's routes over one model: each answers, counts itself in the metrics, and never raises."""

    def __init__(self, cfg: ServeSettings, pipe: Pipeline):
        self.cfg, self.pipe = cfg, pipe
        self.registry, self.metrics = _metrics()
        self.batcher = Batcher(pipe, cfg.max_batch_size, cfg.max_wait_ms, self.metrics)
        self.info = {
            "model": str(cfg.model), "task": pipe.task.name, "labels": pipe.labels, "backend": pipe.backend.name,
            "max_seq_length": getattr(pipe.task, "max_seq_length", None), "max_batch_size": cfg.max_batch_size,
            "max_wait_ms": cfg.max_wait_ms, "max_inputs": cfg.max_inputs, "max_body_bytes": cfg.max_body_bytes,
        }  # fmt: skip
        self.routes = {"/v1/predict": ("POST", self.predict), "/v1/model": ("GET", self.model_info),
                       "/health": ("GET", self.health), "/metrics": ("GET", self.prometheus)}

    def answer(self, route: str, status: int, payload: Any) -> Any:
        self.metrics["requests"].labels(route, str(status)).inc()
        if status >= 400:
            self.metrics["errors"].labels(str(status)).inc()
        return JSONResponse(payload, status_code=status)

    async def predict(self, request: Request) -> Any:
        started = time.perf_counter()
        try:
            body = await _read_body(request, self.cfg.max_body_bytes)
            inputs = check_inputs(body, self.pipe.task, self.cfg.max_inputs)
        except BadRequest as e:
            return self.answer("/v1/predict", e.status, {"error": str(e)})
        except ClientDisconnect:
            return self.answer("/v1/predict", 400, {"error": "the client went away before the body was read"})
        try:
            predictions = await self.batcher.predict(inputs)
        except Exception as e:
            return self.answer("/v1/predict", 500, {"error": f"prediction failed: {type(e).__name__}: {e}"})
        self.metrics["inputs"].inc(len(inputs))
        self.metrics["latency"].observe(time.perf_counter() - started)
        return self.answer("/v1/predict", 200, {"predictions": predictions})

    async def model_info(self, request: Request) -> Any:
        return self.answer("/v1/model", 200, self.info)

    async def health(self, request: Request) -> Any:
        return self.answer("/health", 200, {"status": "ok"})

    async def prometheus(self, request: Request) -> Any:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        self.metrics["requests"].labels("/metrics", "200").inc()
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    def route_of(self, request: Request) -> str:
        """A request's route for the metrics: its path, or "other" for a path the server does not have."""
        return request.url.path if request.url.path in self.routes else "other"

    async def not_found(self, request: Request, exc: Exception) -> Any:
        where = request.url.path
        return self.answer(self.route_of(request), 404,
                           {"error": f"no route {where}: try /v1/predict, /v1/model, /health or /metrics"})

    async def wrong_method(self, request: Request, exc: Exception) -> Any:
        return self.answer(self.route_of(request), 405, {"error": f"{request.method} is not allowed on {request.url.path}"})

    async def failed(self, request: Request, exc: Exception) -> Any:
        log.exception("unexpected error on %s", request.url.path)
        return self.answer(self.route_of(request), 500, {"error": f"{type(exc).__name__}: {exc}"})

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        task = asyncio.create_task(self.batcher.run())
        yield
        task.cancel()  # uvicorn has finished the requests in flight by now
        with contextlib.suppress(asyncio.CancelledError):
            await task


def create_app(cfg: ServeSettings, pipeline: Pipeline | None = None) -> Any:
    """Gives the ASGI app serving `cfg.model` (loaded now unless a pipeline is given)."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    pipe = pipeline or Pipeline(cfg.model, device=cfg.device, precision=cfg.precision, batch_size=cfg.max_batch_size)
    server = App(cfg, pipe)
    routes = [Route(path, handler, methods=[method]) for path, (method, handler) in server.routes.items()]
    handlers = {404: server.not_found, 405: server.wrong_method, 500: server.failed}
    app = Starlette(routes=routes, exception_handlers=handlers, lifespan=server.lifespan)  # type: ignore[arg-type]
    app.state.info = server.info
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


def serve(cfg: ServeSettings) -> None:
    """Serves until SIGTERM or Ctrl-C: loads the model, then listens on cfg.host:cfg.port."""
    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError:
        raise BertkitError("bertkit serve needs uvicorn, starlette and prometheus_client: pip install 'bertkit[serve]'") from None
    app = create_app(cfg)
    # uvicorn finishes the requests in flight on SIGTERM, then raises the signal again to end the process; a
    # handler here takes that second one, so that a drained server exits 0, as orchestrators expect
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    config = uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=30)
    info = app.state.info
    log.warning("serving %s (%s, %s) on http://%s:%d", cfg.model, info["task"], info["backend"], cfg.host, cfg.port)
    uvicorn.Server(config).run()
