"""The ASGI app of `bertkit serve` over one served model: admission (keys, readiness, backpressure), the hot
path of a /v1 POST, timeouts and stalls, metrics, the GET routes, the lifespan (the batcher, the warm-up)."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import math
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from .adapters import EncoderModel, Prepared, TaskModel, load
from .batcher import Batcher, Job, Worker
from .bodies import (
    BadRequest,
    embeddings_answer,
    embeddings_request,
    parse,
    predict_inputs,
    rerank_answer,
    rerank_request,
)
from .openapi import document, swagger_page
from .settings import API_KEY_VARIABLE, ServeSettings

try:  # the serve extra; without it `bertkit serve` says what to install
    import orjson
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
except ImportError:  # pragma: no cover
    orjson = None  # type: ignore[assignment]
    ClientDisconnect = Request = HTMLResponse = JSONResponse = Response = None  # type: ignore[assignment,misc]

log = logging.getLogger("bertkit")

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
Read = Callable[[Any], tuple[list[Any], Any]]  # a route's body (JSON) -> its inputs, and what its answer needs
Reply = Callable[[Any, Any], Any]  # (what `Read` kept, the model's result for the request) -> the answer's JSON


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


Answer = tuple[int, Any, dict[str, str]]  # status, JSON payload (or its bytes, written already), headers


class App:
    """The server's routes over one served model: each answers, counts itself in the metrics, and never raises."""

    def __init__(self, cfg: ServeSettings, model: TaskModel | EncoderModel, warm_first: bool = False):
        self.cfg, self.model = cfg, model
        self.warm_first = warm_first  # take no connection before the warm-up ends (one of several workers on a port)
        self.key = (cfg.api_key or os.environ.get(API_KEY_VARIABLE) or "").encode() or None
        self.registry, self.metrics = _metrics()
        self.metrics["active"].set_function(lambda: self.active)  # read when scraped: nothing to do a request
        self.batcher = Batcher(self.run_group, cfg.max_batch_size, cfg.max_batch_tokens, cfg.max_wait_ms,
                               self.metrics["batch_size"].observe)
        self.preparing = Worker(name="bertkit-prepare")  # bodies parsed, checked and tokenized off the event loop
        self.active = 0  # requests admitted and not yet answered: queued or running
        self.ready = False  # warmed up
        self.broken: str | None = None  # why the warm-up failed, if it did: the server then answers nothing
        self.bodies = {path: self._body(path) for path in model.routes}  # each POST route's (Read, Reply)
        # a POST answered 200 is counted in plain numbers (route -> [requests, inputs, latencies]), handed to
        # prometheus when /metrics is read or every 1,024 requests: its counters take a lock each, a few a request
        self.tally: dict[str, list[Any]] = {path: [0, 0, []] for path in model.routes}
        self.routes: dict[str, tuple[str, Callable]] = {path: ("POST", _Endpoint(self.post)) for path in model.routes}
        self.routes |= {"/v1/model": ("GET", self.model_info), "/health": ("GET", self.health),
                        "/metrics": ("GET", self.prometheus), "/openapi.json": ("GET", self.openapi),
                        "/docs": ("GET", self.docs)}
        self.info = {
            "model": model_name(cfg.model), **model.info(), "routes": [f"{m} {p}" for p, (m, _) in self.routes.items()],
            "max_batch_size": cfg.max_batch_size, "max_batch_tokens": cfg.max_batch_tokens, "max_wait_ms": cfg.max_wait_ms,
            "max_concurrent_requests": cfg.max_concurrent_requests, "request_timeout": cfg.request_timeout,
            "max_inputs": cfg.max_inputs, "max_body_bytes": cfg.max_body_bytes, "api_key": self.key is not None,
        }  # fmt: skip

    def _body(self, path: str) -> tuple[Read, Reply]:
        """What a POST route reads from its body (inputs, and what its answer needs) and how it answers."""
        cfg, model = self.cfg, self.model
        if path == "/v1/predict":
            task = model.task  # type: ignore[union-attr]
            return (lambda body: (predict_inputs(body, task, cfg.max_inputs), None),
                    lambda _, predictions: {"predictions": predictions})
        if path == "/v1/rerank":
            task = model.task  # type: ignore[union-attr]

            def read_rerank(body: Any) -> tuple[list[Any], Any]:
                asked = rerank_request(body, task, cfg.max_inputs)
                return asked["inputs"], asked

            return read_rerank, lambda asked, predictions: rerank_answer(asked, predictions, task)
        dimensions, name = model.dimensions, model_name(cfg.model)  # type: ignore[union-attr]

        def read_embeddings(body: Any) -> tuple[list[Any], Any]:
            asked = embeddings_request(body, cfg.max_inputs, dimensions)
            return asked["texts"], asked

        return read_embeddings, lambda asked, result: embeddings_answer(asked, result, name)

    def error(self, route: str, status: int, message: str, headers: dict[str, str] | None = None) -> Answer:
        """An error answer, counted."""
        self.count(route, status)
        return status, {"error": message}, headers or {}

    def count(self, route: str, status: int) -> None:
        self.metrics["requests"].labels(route, str(status)).inc()
        if status >= 400:
            self.metrics["errors"].labels(str(status)).inc()

    def answer(self, route: str, status: int, payload: Any, headers: dict[str, str] | None = None) -> Any:
        """A starlette response (the GET routes), counted."""
        self.count(route, status)
        return JSONResponse(payload, status_code=status, headers=headers)

    def stalled(self) -> str | None:
        """Why the server is stalled (a forward pass has run past the request timeout), or None."""
        ran = self.batcher.running_for()
        if ran <= self.cfg.request_timeout:
            return None
        return f"a forward pass has run for {ran:.0f} s, past the request timeout ({self.cfg.request_timeout:g} s)"

    def unauthorized(self, route: str, scope: dict[str, Any]) -> Answer | None:
        """401 for a /v1 request without the API key (when the server has one), else None."""
        if self.key is None:
            return None
        scheme, _, token = (_header(scope, b"authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.key):
            return None
        return self.error(route, 401, "a valid API key is needed: Authorization: Bearer KEY", {"WWW-Authenticate": "Bearer"})

    def refusal(self, route: str, scope: dict[str, Any]) -> Answer | None:
        """The answer to a /v1 request turned away before its body is read, or None: no key, not ready, or full."""
        unauthorized = self.unauthorized(route, scope)
        if unauthorized is not None:
            return unauthorized
        if self.broken:
            return self.error(route, 500, self.broken)
        if not self.ready:
            return self.error(route, 503, "warming up: retry shortly", {"Retry-After": "1"})
        if (stalled := self.stalled()) is not None:
            return self.error(route, 503, f"stalled: {stalled}; retry later", {"Retry-After": "1"})
        if self.active >= self.cfg.max_concurrent_requests:
            return self.error(route, 429, f"busy: {self.active} requests are queued or running, the most this server "
                                          "takes; retry later", {"Retry-After": "1"})
        backlog = self.batcher.backlog()
        if backlog > 0.5 * self.cfg.request_timeout:  # admitted, it could wait out its timeout: refused now instead
            wait = math.ceil(backlog - 0.5 * self.cfg.request_timeout)
            return self.error(route, 429, f"busy: the queue holds about {backlog:.0f} s of work; retry later",
                              {"Retry-After": str(max(1, wait))})
        return None

    async def post(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        """ASGI, every /v1 POST: the hot path, with no middleware, routing or Request object on it (`Front`)."""
        status, payload, headers = await self.serve_request(scope["path"], scope, receive)
        body = payload if isinstance(payload, bytes) else orjson.dumps(payload, option=JSON_OPTIONS)
        head = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        if headers:
            head += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        await send({"type": "http.response.start", "status": status, "headers": head})
        await send({"type": "http.response.body", "body": body})

    async def serve_request(self, route: str, scope: dict[str, Any], receive: Callable) -> Answer:
        """The path every /v1 POST takes: refused, or admitted; its body read, then parsed, checked and tokenized
        in a worker thread (the route's Read), run with others', and its answer made (its Reply) and written in
        the forward pass's thread: the event loop only moves bytes."""
        refused = self.refusal(route, scope)
        if refused is not None:
            return refused
        started = time.perf_counter()
        self.active += 1
        read, reply = self.bodies[route]
        try:
            body = await _read_body(scope, receive, self.cfg.max_body_bytes)
            prepared, asked = await self.preparing.call(self.prepare, body, read)
            answer = await self.submit(Job((prepared.features, asked, reply), prepared.tokens, prepared.size))
        except BadRequest as e:
            return self.error(route, e.status, str(e), {"Retry-After": "1"} if e.status == 503 else None)
        except ClientDisconnect:
            return self.error(route, 400, "the client went away before the body was read")
        except Exception:
            return self.error(route, 500, self.failure(route))
        finally:
            self.active -= 1
        tally = self.tally[route]
        tally[0], tally[1] = tally[0] + 1, tally[1] + prepared.size
        tally[2].append(time.perf_counter() - started)
        if len(tally[2]) >= 1024:
            self.flush_tally()
        return 200, answer, {}

    def flush_tally(self) -> None:
        """Hands the answers counted since the last call to the prometheus metrics."""
        for route, (requests, inputs, latencies) in self.tally.items():
            if requests:
                self.metrics["requests"].labels(route, "200").inc(requests)
                self.metrics["inputs"].inc(inputs)
                for seconds in latencies:
                    self.metrics["latency"].observe(seconds)
                self.tally[route] = [0, 0, []]

    def prepare(self, body: bytes, read: Read) -> tuple[Prepared, Any]:
        """(In a worker thread.) A body parsed and checked (`read`), its inputs tokenized once for the model."""
        inputs, asked = read(parse(body))
        return self.model.prepare(inputs), asked

    def run_group(self, works: list[tuple[Any, Any, Reply]]) -> list[bytes | Exception]:
        """(In the forward pass's thread.) A group's answers, each written to JSON bytes; a request whose answer
        fails gets its exception (a 500 for it alone)."""
        results = self.model.run([features for features, _, _ in works])
        answers: list[bytes | Exception] = []
        for (_, asked, reply), result in zip(works, results, strict=True):
            try:
                answers.append(orjson.dumps(reply(asked, result), option=JSON_OPTIONS))
            except Exception as e:
                answers.append(e)
        return answers

    async def submit(self, job: Job) -> Any:
        """A job's result. BadRequest 503 if it is still queued at the request timeout (then it never runs), or
        if the forward pass it is in runs past that timeout (stalled: the client is answered, the pass goes on)."""
        loop, timeout = asyncio.get_running_loop(), self.cfg.request_timeout
        timer: list[asyncio.TimerHandle] = []

        def expire() -> None:  # a timer, not a wait_for: a request's deadline costs the event loop next to nothing
            if job.done.done():
                return
            if self.batcher.drop(job):
                job.done.set_exception(BadRequest(503, f"queued for {timeout:g} s without running (the server is "
                                                       "busy): not run; retry later"))
            elif (ran := self.batcher.running_for()) > timeout:
                job.done.set_exception(BadRequest(503, f"stalled: the forward pass of this request has run for "
                                                       f"{ran:.0f} s, past the request timeout ({timeout:g} s); "
                                                       "retry later"))
            else:  # taken: its group waits for company (briefly), or its pass runs; look again when that may end
                timer[0] = loop.call_later(timeout - ran if ran else self.batcher.max_wait + 0.01, expire)

        timer.append(loop.call_later(timeout, expire))
        self.batcher.add(job)
        try:
            return await job.done
        finally:
            timer[0].cancel()

    def failure(self, where: str) -> str:
        """Logs the exception being handled under a new id; gives what the client is told."""
        error_id = uuid.uuid4().hex[:12]
        log.exception("internal error %s on %s", error_id, where)
        return f"internal error (id {error_id})"

    async def model_info(self, request: Request) -> Any:
        refused = self.unauthorized("/v1/model", request.scope)
        if refused is not None:
            return JSONResponse(refused[1], status_code=refused[0], headers=refused[2])
        return self.answer("/v1/model", 200, self.info)

    async def health(self, request: Request) -> Any:
        if self.broken:
            return self.answer("/health", 500, {"status": self.broken})
        if not self.ready:
            return self.answer("/health", 503, {"status": "warming up"}, {"Retry-After": "1"})
        if (stalled := self.stalled()) is not None:  # a model that hangs: the orchestrator should restart it
            return self.answer("/health", 503, {"status": "stalled", "detail": stalled})
        return self.answer("/health", 200, {"status": "ok"})

    async def prometheus(self, request: Request) -> Any:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        self.flush_tally()
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
        self.preparing.close()

    async def warm_up(self) -> None:
        """One forward pass at the largest batch shape served, then ready (/health answers 200)."""
        t0 = time.perf_counter()
        try:  # in the forward passes' daemon thread: a warm-up that hangs does not hold the process at exit either
            await self.batcher.worker.call(self.model.warm_up, self.cfg.max_batch_size)
        except Exception:
            self.broken = f"the model failed to warm up: {self.failure('the warm-up')}"
            return
        self.ready = True
        log.warning("ready: warmed up in %.1f s", time.perf_counter() - t0)


class _Endpoint:
    """An ASGI callable, which starlette routes to as it is (it wraps a function as request -> response)."""

    def __init__(self, call: Callable):
        self.call = call

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        await self.call(scope, receive, send)


class Front:
    """The ASGI app served: a /v1 POST goes straight to `App.post`; everything else (GET routes, 404s, 405s,
    the lifespan) to starlette. Starlette's layers (middleware, routing, Request and Response objects) cost the
    event loop about 0.03 ms a request: a third of its budget."""

    def __init__(self, server: App, app: Any):
        self.server, self.app, self.state = server, app, app.state
        self.posts = frozenset(path for path, (method, _) in server.routes.items() if method == "POST")

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in self.posts:
            await self.server.post(scope, receive, send)
        else:
            await self.app(scope, receive, send)


JSON_OPTIONS = (orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS) if orjson is not None else 0


def model_name(model_dir: Path) -> str:
    """How answers name the served model: its folder's name, never its path."""
    return model_dir.resolve().name or "model"


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
    return Front(server, app)


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    """A request header's value (ASGI gives their names in lower case), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


async def _read_body(scope: dict[str, Any], receive: Callable, limit: int) -> bytes:
    """Gives the request body, refusing one over `limit` bytes without reading it all (declared or streamed)."""
    declared = _header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"the body is {int(declared):,} bytes, at most {limit:,}")
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"the body is over {limit:,} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
