"""`bertkit serve` as a server a team can expose: readiness, API keys, backpressure (429), request timeouts (503),
internal errors by id, the token budget, embeddings in OpenAI's format (its own client), rerank in TEI's shape,
and /openapi.json describing what the routes really answer.

The server's logic (admission, timeouts, errors) is tested on a stand-in model whose speed and failures the test
sets; the routes' answers on real tiny models of each family; what needs the process (a flood, workers, the
OpenAI client over HTTP) on a real `bertkit serve` on a free 127.0.0.1 port."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_serve import TEXTS, Local, Server

from bertkit.embed import Embedder
from bertkit.predict import pipeline
from bertkit.runtime import batches
from bertkit.server import ServeSettings, create_app
from bertkit.server.adapters import Prepared
from bertkit.server.batcher import Batcher, Job
from bertkit.tasks import get_task


class Stub:
    """A served model the test controls: how long a group takes, whether it fails, when the warm-up ends."""

    routes = ("/v1/predict",)

    def __init__(self, seconds: float = 0.0, fail: bool = False, gate: threading.Event | None = None):
        self.task = get_task("classify")
        self.seconds, self.fail, self.gate = seconds, fail, gate
        self.gate_run: threading.Event | None = None  # set: each forward pass waits for it (a model that hangs)
        self.ran: list[list[str]] = []

    def info(self) -> dict[str, Any]:
        return {"task": "classify", "labels": ["a", "b"], "backend": "stub", "max_seq_length": 128}

    def prepare(self, inputs: list[str]) -> Prepared:
        return Prepared(list(inputs), len(inputs), sum(len(t.split()) + 2 for t in inputs))

    def run(self, requests: list[list[str]]) -> list[list[dict[str, Any]]]:
        self.ran.append([t for inputs in requests for t in inputs])
        time.sleep(self.seconds)
        if self.gate_run is not None:
            self.gate_run.wait(30)
        if self.fail:
            raise RuntimeError("the secret details of a failure")
        return [[{"text": t, "label": "a", "probabilities": {"a": 1.0, "b": 0.0}} for t in inputs] for inputs in requests]

    def warm_up(self, batch_size: int) -> None:
        if self.gate is not None:
            self.gate.wait(30)


def stub_server(model: Stub, wait: bool = True, **settings: Any) -> Local:
    app = create_app(ServeSettings(model=Path("stub"), **settings), model=model)  # type: ignore[arg-type]
    if wait:
        return Local(app=app)
    from starlette.testclient import TestClient

    srv = Local.__new__(Local)
    srv.app, srv.client = app, TestClient(app)
    srv.client.__enter__()
    return srv


def in_thread(fn: Any, *args: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn(*args)))
    thread.start()
    return thread, out


# ---- readiness, keys, errors ---------------------------------------------------------------------------------

def test_health_is_503_until_the_warm_up_is_done() -> None:
    gate = threading.Event()
    srv = stub_server(Stub(gate=gate), wait=False)
    try:
        assert srv.request("GET", "/health") == (503, {"status": "warming up"})
        status, body = srv.predict(["early"])
        assert status == 503 and "warming up" in body["error"]
        gate.set()
        deadline = time.time() + 10
        while srv.request("GET", "/health")[0] != 200 and time.time() < deadline:
            time.sleep(0.01)
        assert srv.predict(["ready"])[0] == 200
    finally:
        gate.set()
        srv.close()


def test_one_of_several_workers_takes_connections_only_once_warm() -> None:
    """uvicorn listens once the lifespan has started: a worker started with warm_first=True must not get there cold
    (it would answer 503 while the port's other workers could answer 200)."""
    gate = threading.Event()
    app = create_app(ServeSettings(model=Path("stub")), model=Stub(gate=gate), warm_first=True)  # type: ignore[arg-type]
    server = app.state.server

    async def start() -> tuple[bool, float]:
        t0 = time.perf_counter()
        threading.Timer(0.3, gate.set).start()
        async with server.lifespan(app):
            return server.ready, time.perf_counter() - t0

    ready, waited = asyncio.run(start())
    assert ready and waited >= 0.25, (ready, waited)


def test_the_warm_up_runs_the_largest_batch(task_models: dict[str, Path]) -> None:
    from bertkit.server.adapters import TaskModel

    model = TaskModel(task_models["qa"], "cpu", "fp32", max_batch_size=4, max_batch_tokens=16384)
    seen: list[tuple[int, ...]] = []
    run = model.pipe.backend.run
    model.pipe.backend.run = lambda batch, outputs: (seen.append(batch["input_ids"].shape), run(batch, outputs))[1]
    model.warm_up(4)
    assert max(seen) == (4, 64)  # 4 windows of the QA model's full 64 tokens


def test_an_api_key_guards_every_v1_route_and_is_never_shown(task_models: dict[str, Path], caplog,
                                                            monkeypatch) -> None:
    caplog.set_level(logging.INFO, logger="bertkit")
    key = "s3cret-key-9f2"
    srv = stub_server(Stub(), api_key=key)
    try:
        for method, path, body in (("POST", "/v1/predict", '{"inputs": ["a"]}'), ("GET", "/v1/model", None)):
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": key}):
                status, answer = srv.request(method, path, body, headers=headers)
                assert status == 401 and "API key" in answer["error"], (path, headers)
        good = {"Authorization": f"Bearer {key}"}
        assert srv.request("POST", "/v1/predict", '{"inputs": ["a"]}', headers=good)[0] == 200
        status, info = srv.request("GET", "/v1/model", headers=good)
        assert status == 200 and info["api_key"] is True
        assert srv.request("GET", "/health")[0] == 200 and srv.request("GET", "/metrics")[0] == 200
        doc = srv.request("GET", "/openapi.json")[1]
        assert key not in json.dumps(info) + json.dumps(doc) and "bearer" in doc["components"]["securitySchemes"]
        assert key not in repr(ServeSettings(model=Path("m"), api_key=key))
    finally:
        srv.close()
    monkeypatch.setenv("BERTKIT_API_KEY", key)  # or from the environment
    srv = stub_server(Stub())
    try:
        assert srv.predict(["a"])[0] == 401
        assert srv.request("POST", "/v1/predict", '{"inputs": ["a"]}', headers={"Authorization": f"Bearer {key}"})[0] == 200
    finally:
        srv.close()
    assert key not in caplog.text


def test_an_internal_error_gives_an_id_the_log_explains(caplog) -> None:
    srv = stub_server(Stub(fail=True))
    try:
        with caplog.at_level(logging.ERROR, logger="bertkit"):
            status, answer = srv.predict(["boom"])
        assert status == 500 and set(answer) == {"error"}
        error_id = answer["error"].removeprefix("internal error (id ").removesuffix(")")
        assert len(error_id) == 12 and answer["error"] == f"internal error (id {error_id})"
        assert "secret details" not in answer["error"]
        logged = [r for r in caplog.records if error_id in r.getMessage()]
        assert logged and "the secret details of a failure" in logged[0].exc_text  # the traceback, under the id
        assert srv.predict(["fine"])[0] == 500 and srv.request("GET", "/health")[0] == 200
    finally:
        srv.close()


# ---- backpressure and timeouts --------------------------------------------------------------------------------

def test_beyond_the_concurrency_limit_requests_get_429_at_once() -> None:
    model = Stub(seconds=0.6)
    srv = stub_server(model, max_concurrent_requests=2)
    try:
        first = [in_thread(srv.predict, [f"slow {k}"]) for k in range(2)]
        time.sleep(0.2)  # both admitted: one running, one queued
        t0 = time.perf_counter()
        response = srv.client.post("/v1/predict", content=json.dumps({"inputs": ["one too many"]}))
        took = time.perf_counter() - t0
        assert response.status_code == 429 and response.headers["retry-after"] == "1" and took < 0.2, took
        assert "busy" in response.json()["error"]
        for thread, out in first:
            thread.join()
            assert out[0][0] == 200
        assert ["one too many"] not in model.ran and srv.predict(["after"])[0] == 200
    finally:
        srv.close()


def test_work_that_would_time_out_in_the_queue_is_refused_with_429() -> None:
    model = Stub(seconds=0.4)  # a group of one 3-token input takes 0.4 s: 0.13 s a token
    srv = stub_server(model, request_timeout=1.0, max_batch_size=1)
    try:
        assert srv.predict(["paced"])[0] == 200  # the pace is measured
        queued = [in_thread(srv.predict, [f"queued {k}"]) for k in range(3)]
        time.sleep(0.1)  # 3 x 3 tokens: about 1.2 s of work, more than half the timeout
        response = srv.client.post("/v1/predict", content=json.dumps({"inputs": ["refused"]}))
        assert response.status_code == 429 and "s of work" in response.json()["error"]
        assert int(response.headers["retry-after"]) >= 1
        for thread, _out in queued:
            thread.join()
        assert ["refused"] not in model.ran
    finally:
        srv.close()


def test_a_request_queued_past_the_timeout_gets_503_and_never_runs() -> None:
    model = Stub(seconds=0.7)
    srv = stub_server(model, request_timeout=0.9, max_batch_size=1)
    try:
        running, out = in_thread(srv.predict, ["running"])
        time.sleep(0.2)
        second, out2 = in_thread(srv.predict, ["second"])  # taken at 0.7 s, within its timeout: it runs
        time.sleep(0.1)
        t0 = time.perf_counter()  # queued behind both: its timeout passes before its turn (1.4 s)
        response = srv.client.post("/v1/predict", content=json.dumps({"inputs": ["queued"]}))
        assert response.status_code == 503 and 0.85 < time.perf_counter() - t0 < 1.3
        assert "not run" in response.json()["error"] and response.headers["retry-after"] == "1"
        running.join()
        second.join()
        assert out[0][0] == 200 and out2[0][0] == 200  # answered 1.2 s after it came: taken in time, it finishes
        time.sleep(0.2)
        assert ["queued"] not in model.ran and srv.predict(["next"])[0] == 200
    finally:
        srv.close()


def test_a_job_taken_off_the_queue_is_never_dropped() -> None:
    """The window: a group's first job waits for company (the queue was crowded); a timeout in that wait must not
    answer it 503 "not run" while it is about to run."""
    async def scenario() -> tuple[bool, list[Any]]:
        ran: list[Any] = []
        batcher = Batcher(lambda works: (ran.extend(works), works)[1], max_batch_size=32, max_batch_tokens=100,
                          max_wait_ms=300)
        batcher.crowded = True  # requests came concurrently lately: the next group waits for company
        runner = asyncio.create_task(batcher.run())
        job = Job(["taken"], 1)
        batcher.add(job)
        await asyncio.sleep(0.1)  # taken off the queue, waiting for company
        dropped = batcher.drop(job)
        await asyncio.wait_for(job.done, 5)
        runner.cancel()
        return dropped, ran

    dropped, ran = asyncio.run(scenario())
    assert not dropped and ran in (["taken"], [["taken"]])  # it runs, so it must not have been given up


def test_a_forward_pass_past_the_timeout_is_stalled_503() -> None:
    gate = threading.Event()
    model = Stub()
    srv = stub_server(model, request_timeout=0.4)
    try:
        model.gate_run = gate  # from now on a forward pass hangs until the gate opens
        t0 = time.perf_counter()
        hung, out = in_thread(srv.predict, ["hangs"])
        time.sleep(0.2)
        assert srv.request("GET", "/health")[0] == 200  # running, within the timeout
        hung.join(5)
        assert out[0][0] == 503 and "stalled" in out[0][1]["error"] and 0.35 < time.perf_counter() - t0 < 2
        status, health = srv.request("GET", "/health")
        assert status == 503 and health["status"] == "stalled" and "request timeout" in health["detail"]
        status, refused = srv.predict(["more"])  # refused at once, not queued behind the hung pass
        assert status == 503 and "stalled" in refused["error"]
        gate.set()  # the model comes back: so does the server
        deadline = time.time() + 5
        while srv.request("GET", "/health")[0] != 200 and time.time() < deadline:
            time.sleep(0.02)
        assert srv.predict(["after"])[0] == 200
    finally:
        gate.set()
        srv.close()


def test_groups_keep_to_the_token_budget() -> None:
    async def groups() -> list[list[str]]:
        seen: list[list[str]] = []
        batcher = Batcher(lambda works: (seen.append([w[0] for w in works]), works)[1], max_batch_size=32,
                          max_batch_tokens=10, max_wait_ms=0)
        jobs = [Job([name], tokens) for name, tokens in (("a", 4), ("b", 4), ("c", 4), ("huge", 50), ("d", 1))]
        for job in jobs:
            batcher.add(job)
        runner = asyncio.create_task(batcher.run())
        results = await asyncio.gather(*(job.done for job in jobs))
        runner.cancel()
        assert results == [[name] for name in ("a", "b", "c", "huge", "d")]
        return seen

    # a and b fill 8 of the 10 tokens; c does not fit and leads the next group, while d (1 token), queued after it,
    # rides along in the first; a request over the budget runs, alone
    assert asyncio.run(groups()) == [["a", "b", "d"], ["c"], ["huge"]]


def test_forward_passes_keep_to_the_token_budget(task_models: dict[str, Path]) -> None:
    lengths = np.array([10, 50, 30, 50, 5, 20])
    for order in batches(lengths, batch_size=8, pads=False, max_tokens=100):
        assert len(order) == 1 or len(order) * lengths[order].max() <= 100
    assert [len(b) for b in batches(np.array([200, 10]), 8, False, max_tokens=100)] == [1, 1]  # over it: alone
    texts = [" ".join(TEXTS * k) for k in (1, 3, 6)] + TEXTS
    budget = pipeline(task_models["classify"], max_tokens=64)
    # split differently, the same answers: labels exactly, probabilities (rounded to 6 places) to the last digit,
    # since batches of other shapes may take other kernels
    split, whole = budget(texts), pipeline(task_models["classify"])(texts)
    assert [a["label"] for a in split] == [b["label"] for b in whole]
    for a, b in zip(split, whole, strict=True):
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=2e-6)


# ---- the routes on real models --------------------------------------------------------------------------------

def test_embeddings_are_bertkit_embed_in_openais_shape(task_models: dict[str, Path]) -> None:
    srv = Local(task_models["encoder"], pooling="mean", normalize=True)
    try:
        expected, tokens = Embedder(task_models["encoder"], pooling="mean", normalize=True).embed(TEXTS)
        status, body = srv.request("POST", "/v1/embeddings", json.dumps({"input": TEXTS, "model": "mine"}))
        assert status == 200 and body["object"] == "list" and body["model"] == "mine"
        assert [d["index"] for d in body["data"]] == [0, 1, 2, 3] and {d["object"] for d in body["data"]} == {"embedding"}
        np.testing.assert_allclose(np.array([d["embedding"] for d in body["data"]]), expected, atol=1e-6)
        assert body["usage"] == {"prompt_tokens": int(tokens.sum()), "total_tokens": int(tokens.sum())}
        status, one = srv.request("POST", "/v1/embeddings", json.dumps({"input": TEXTS[1], "encoding_format": "base64"}))
        vector = np.frombuffer(base64.b64decode(one["data"][0]["embedding"]), dtype="<f4")
        np.testing.assert_allclose(vector, expected[1], atol=1e-6)
        info = srv.request("GET", "/v1/model")[1]
        assert info["task"] == "embed" and info["routes"][0] == "POST /v1/embeddings"
        for body, message in (({"input": [1, 2]}, "token ids are not taken"), ({"input": []}, '"input" is empty'),
                              ({"input": "a", "dimensions": 129}, "gives vectors of 128"),
                              ({"input": "a", "encoding_format": "int8"}, '"encoding_format" must be'),
                              ({"texts": ["a"]}, 'with "input"')):
            status, answer = srv.request("POST", "/v1/embeddings", json.dumps(body))
            assert status == 422 and message in answer["error"], (body, answer)
        assert srv.predict(["a"])[0] == 404  # an embedder predicts nothing
    finally:
        srv.close()


def tokenizer_calls(tokenizer: Any) -> list[tuple[str, int]]:
    """Records each outermost call of the tokenizer's encode, encode_batch and count: (name, thread id)."""
    calls: list[tuple[str, int]] = []
    depth = threading.local()
    def recording(name: str, method: Any) -> Any:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            depth.n = getattr(depth, "n", 0) + 1
            try:
                if depth.n == 1:
                    calls.append((name, threading.get_ident()))
                return method(*args, **kwargs)
            finally:
                depth.n -= 1
        return recorded

    for name in ("encode", "encode_batch", "count"):
        setattr(tokenizer, name, recording(name, getattr(tokenizer, name)))
    return calls


@pytest.mark.parametrize("name", ["classify", "encoder"])
def test_a_request_is_tokenized_once_and_off_the_event_loop(task_models: dict[str, Path], name: str) -> None:
    from bertkit.server.adapters import load

    model = load(task_models[name], "mean" if name == "encoder" else None, False, "cpu", "fp32", 32, 16384)
    calls = tokenizer_calls(model.embedder.tokenizer if name == "encoder" else model.pipe.tokenizer)  # type: ignore[union-attr]
    app = create_app(ServeSettings(model=task_models[name]), model=model)
    server, loop_threads = app.state.server, set()
    refusal = server.refusal  # runs on the event loop: it tells which thread that is
    server.refusal = lambda route, request: (loop_threads.add(threading.get_ident()), refusal(route, request))[1]
    srv = Local(app=app)
    try:
        calls.clear()  # the warm-up's
        route, body = ("/v1/embeddings", {"input": TEXTS[0]}) if name == "encoder" else ("/v1/predict", {"inputs": [TEXTS[0]]})
        status, _ = srv.request("POST", route, json.dumps(body))
        assert status == 200 and len(loop_threads) == 1
        assert len(calls) == 1 and calls[0][1] not in loop_threads, calls  # once, in a worker thread
    finally:
        srv.close()


def test_a_bad_dimensions_never_reaches_the_model(task_models: dict[str, Path]) -> None:
    from bertkit.server.adapters import load

    model = load(task_models["encoder"], "mean", False, "cpu", "fp32", 32, 16384)
    runs: list[int] = []
    run = model.run
    model.run = lambda batch: (runs.append(len(batch)), run(batch))[1]  # type: ignore[method-assign]
    srv = Local(app=create_app(ServeSettings(model=task_models["encoder"]), model=model))
    try:
        for bad in (0, 129, "64", True):
            status, answer = srv.request("POST", "/v1/embeddings", json.dumps({"input": "a", "dimensions": bad}))
            assert status == 422 and "gives vectors of 128" in answer["error"] and runs == []
        status, answer = srv.request("POST", "/v1/embeddings", json.dumps({"input": "a", "dimensions": 128}))
        assert status == 200 and len(answer["data"][0]["embedding"]) == 128 and runs == [1]
    finally:
        srv.close()


@pytest.mark.parametrize("name", ["classify", "encoder"])
def test_no_answer_shows_a_filesystem_path(task_models: dict[str, Path], name: str) -> None:
    folder = task_models[name].resolve()
    srv = Local(folder, **({"pooling": "mean"} if name == "encoder" else {}))
    try:
        route, body = ("/v1/embeddings", {"input": TEXTS[0]}) if name == "encoder" else ("/v1/predict", {"inputs": [TEXTS[0]]})
        answers = [srv.request("GET", path) for path in ("/openapi.json", "/v1/model", "/health", "/nowhere")]
        answers += [srv.request("POST", route, json.dumps(body)), srv.request("POST", route, "{"),
                    srv.request("POST", route, json.dumps({"wrong": 1}))]
        text = json.dumps(answers)
        assert str(folder.parent) not in text and "/tmp" not in text, text[:2000]
        assert srv.request("GET", "/v1/model")[1]["model"] == folder.name
        if name == "encoder":
            assert answers[4][1]["model"] == folder.name
    finally:
        srv.close()


def test_rerank_orders_texts_by_the_pair_models_relevance(task_models: dict[str, Path]) -> None:
    srv = Local(task_models["pair"])
    query, texts = TEXTS[0], [*TEXTS[1:], "Emma Woodhouse, handsome."]
    try:
        predictions = pipeline(task_models["pair"])([query] * len(texts), texts)
        task = get_task("pair")
        relevance = [task.relevance(p) for p in predictions]
        status, ranked = srv.request("POST", "/v1/rerank", json.dumps({"query": query, "texts": texts}))
        assert status == 200 and [r["index"] for r in ranked] == sorted(range(4), key=lambda i: -relevance[i])
        assert [r["score"] for r in ranked] == pytest.approx(sorted(relevance, reverse=True), abs=1e-6)
        status, top = srv.request("POST", "/v1/rerank", json.dumps({"query": query, "texts": texts, "top_n": 2,
                                                                     "return_text": True, "raw_scores": True}))
        best = ranked[0]["index"]
        assert len(top) == 2 and top[0] == {"index": best, "text": texts[best],
                                            "score": pytest.approx(np.log(relevance[best] / (1 - relevance[best])), abs=1e-4)}
        for body, message in (({"query": "q"}, 'with "query" and "texts"'), ({"query": "q", "texts": ["a"], "top_n": 0},
                              '"top_n" must be a positive integer'), ({"query": " ", "texts": ["a"]}, "query: the text is empty")):
            status, answer = srv.request("POST", "/v1/rerank", json.dumps(body))
            assert status == 422 and message in answer["error"], answer
    finally:
        srv.close()
    classify = Local(task_models["classify"])
    try:
        assert classify.request("POST", "/v1/rerank", json.dumps({"query": "q", "texts": ["a"]}))[0] == 404
    finally:
        classify.close()


@pytest.mark.parametrize("name", ["classify", "multilabel", "regression", "qa", "ner", "pair", "encoder"])
def test_answers_match_the_openapi_schemas(task_models: dict[str, Path], name: str) -> None:
    import jsonschema

    srv = Local(task_models[name], **({"pooling": "cls"} if name == "encoder" else {}))
    try:
        doc = srv.request("GET", "/openapi.json")[1]
        jsonschema.Draft202012Validator.check_schema(doc["paths"][next(iter(doc["paths"]))]["post"]["requestBody"]
                                                     ["content"]["application/json"]["schema"])
        inputs = {"pair": [[TEXTS[0], TEXTS[1]]], "regression": [[TEXTS[0], TEXTS[1]]],
                  "qa": [{"question": "Who?", "context": TEXTS[0]}], "ner": [TEXTS[3], ["Mr.", "Knightley"]]}.get(name, TEXTS[:2])
        calls = {"/v1/predict": {"inputs": inputs}, "/v1/rerank": {"query": TEXTS[0], "texts": TEXTS[1:], "top_n": 2},
                 "/v1/embeddings": {"input": TEXTS[:2]}}
        v1 = [p for p in doc["paths"] if p in calls]
        assert v1 == [r.split()[1] for r in srv.request("GET", "/v1/model")[1]["routes"] if r.split()[1] in calls]
        for path in v1:
            post = doc["paths"][path]["post"]
            jsonschema.validate(calls[path], post["requestBody"]["content"]["application/json"]["schema"])
            status, answer = srv.request("POST", path, json.dumps(calls[path]))
            assert status == 200
            jsonschema.validate(answer, post["responses"]["200"]["content"]["application/json"]["schema"])
            status, error = srv.request("POST", path, "{}")
            jsonschema.validate(error, post["responses"]["422"]["content"]["application/json"]["schema"])
    finally:
        srv.close()


# ---- the process ----------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_official_openai_client_gets_embeddings(task_models: dict[str, Path]) -> None:
    from openai import OpenAI

    srv = Server(task_models["encoder"], "--pooling", "mean", "--api-key", "k-123")
    try:
        client = OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="k-123", max_retries=0)
        got = client.embeddings.create(model="bertkit", input=TEXTS)  # the client asks for base64 by default
        expected = Embedder(task_models["encoder"], pooling="mean")(TEXTS)
        np.testing.assert_allclose(np.array([d.embedding for d in got.data]), expected, atol=1e-5)
        assert got.usage.prompt_tokens > len(TEXTS) and got.model == "bertkit"
        floats = client.embeddings.create(model="bertkit", input="Call me Ishmael.", encoding_format="float")
        np.testing.assert_allclose(floats.data[0].embedding, expected[1], atol=1e-5)
        import openai

        with pytest.raises(openai.AuthenticationError):
            OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="wrong", max_retries=0).embeddings.create(
                model="bertkit", input="x")
    finally:
        code, err = srv.stop()
    assert code == 0 and "k-123" not in err


@pytest.mark.slow
def test_a_flood_gets_429s_the_server_stays_healthy_and_drains_on_sigterm(task_models: dict[str, Path]) -> None:
    srv = Server(task_models["classify"], "--max-concurrent-requests", "4", "--max-batch-size", "8")
    clients, each = 24, 6
    codes: list[int] = []
    broken: list[str] = []
    health: list[float] = []

    def client(c: int) -> None:
        for r in range(each):
            try:
                status, body = srv.predict([f"{c} {r} {TEXTS[(c + r) % 4]}"] * 8)
                codes.append(status)
                if status not in (200, 429) or (status == 429 and "busy" not in body["error"]):
                    broken.append(f"{status} {body}")
            except OSError as e:
                broken.append(repr(e))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        t0 = time.perf_counter()
        assert srv.request("GET", "/health")[0] == 200
        health.append(time.perf_counter() - t0)
        time.sleep(0.05)
    for t in threads:
        t.join()
    assert not broken, broken[:3]
    assert len(codes) == clients * each and codes.count(200) > 0 and codes.count(429) > 0, (codes.count(200), codes.count(429))
    assert max(health) < 1.0, max(health)
    code, err = srv.stop()
    assert code == 0 and "Traceback" not in err, err


@pytest.mark.slow
def test_workers_serve_on_one_port(task_models: dict[str, Path]) -> None:
    srv = Server(task_models["classify"], "--workers", "2")
    try:
        ready, deadline = 0, time.time() + 60  # each worker warms up on its own: wait till both answer 200
        while ready < 20 and time.time() < deadline:
            ready = ready + 1 if srv.request("GET", "/health")[0] == 200 else 0
        answers = [srv.predict([text]) for text in TEXTS * 3]
        expected = pipeline(task_models["classify"])(TEXTS * 3)
        got = [a[1]["predictions"][0] for a in answers]  # each worker on its share of the cores: rounding may differ
        assert [g["label"] for g in got] == [e["label"] for e in expected]
        for g, e in zip(got, expected, strict=True):
            assert g["probabilities"] == pytest.approx(e["probabilities"], abs=1e-5)
    finally:
        code, err = srv.stop()
    assert code == 0, err


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            pass  # a process that ended meanwhile
    return found


@pytest.mark.slow
@pytest.mark.parametrize("given", ["--api-key", "BERTKIT_API_KEY"])
def test_workers_get_the_api_key_in_neither_their_environment_nor_command_line(task_models: dict[str, Path],
                                                                               given: str) -> None:
    key = "k-workers-7f3a9c"
    flags, env = (["--api-key", key], None) if given == "--api-key" else ([], {"BERTKIT_API_KEY": key})
    srv = Server(task_models["classify"], "--workers", "2", *flags, env=env)
    try:
        workers = children(srv.proc.pid)
        assert len(workers) >= 2, workers
        for pid in workers:
            for what in ("environ", "cmdline"):
                assert key.encode() not in Path(f"/proc/{pid}/{what}").read_bytes(), (pid, what)
        body = json.dumps({"inputs": [TEXTS[0]]})
        for _ in range(6):  # the workers answer in turn: each has the key
            assert srv.request("POST", "/v1/predict", body)[0] in (401, 503)
            assert srv.request("POST", "/v1/predict", body, headers={"Authorization": f"Bearer {key}"})[0] in (200, 503)
    finally:
        code, err = srv.stop()
    assert code == 0 and key not in err, err


HANGS = """
import sys, threading
from pathlib import Path

import bertkit.server.app
from bertkit.server import ServeSettings, serve
from bertkit.server.adapters import Prepared
from bertkit.tasks import get_task


class Hangs:
    routes, task = ("/v1/predict",), get_task("classify")

    def info(self):
        return {"task": "classify", "labels": ["a"], "backend": "stub", "max_seq_length": 8}

    def prepare(self, inputs):
        return Prepared(inputs, len(inputs), len(inputs))

    def run(self, requests):  # a forward pass that never ends
        threading.Event().wait()

    def warm_up(self, batch_size):
        pass


bertkit.server.app.load = lambda *args: Hangs()
serve(ServeSettings(model=Path("hangs"), port=int(sys.argv[1]), request_timeout=1.0))
"""


@pytest.mark.slow
def test_a_model_that_hangs_is_stalled_503_and_sigterm_still_stops_the_server() -> None:
    srv = Server(None, script=HANGS)  # `bertkit serve`'s own serve(), on a model whose forward pass never ends
    try:
        t0 = time.perf_counter()
        status, answer = srv.predict(["hangs"])
        assert status == 503 and "stalled" in answer["error"] and time.perf_counter() - t0 < 10, answer
        status, health = srv.request("GET", "/health")
        assert status == 503 and health["status"] == "stalled"
    finally:
        t0 = time.perf_counter()
        srv.proc.send_signal(signal.SIGTERM)
        try:
            srv.proc.wait(20)  # the grace is the request timeout + 30 s: well within it
        finally:
            srv.proc.kill()
    assert srv.proc.returncode == 0 and time.perf_counter() - t0 < 10
