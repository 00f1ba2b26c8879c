"""`bertkit serve`: its answers are what `bertkit predict` prints; bad requests get a 4xx JSON error and leave the
server healthy; concurrent clients each get their own answers; SIGTERM finishes what is in flight and exits 0.

What needs the process (concurrent clients batched, a lone client's latency, signals) talks to a real `bertkit serve`
on a free 127.0.0.1 port; the rest talks to the same app in this process through starlette's test client."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bertkit.cli import main
from bertkit.predict import pipeline

TEXTS = ["Emma Woodhouse, handsome, clever, and rich, with a comfortable home.", "Call me Ishmael.",
         "The whale rose beside the boat.", "Mr. Knightley walked from Hartfield to Highbury before the rain came."]


class Server:
    """`bertkit serve` in a child process on a free port of 127.0.0.1 (`env`: variables added to its environment;
    `script`: Python code to run instead, given the port as its argument)."""

    def __init__(self, model: Path | None, *flags: str, env: dict[str, str] | None = None, script: str | None = None):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        command = ([sys.executable, "-c", script, str(self.port)] if script is not None else
                   [sys.executable, "-m", "bertkit.cli", "serve", "--model", str(model), "--port", str(self.port), *flags])
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **env} if env else None)
        deadline = time.time() + 90
        while True:
            try:
                if self.request("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                self.proc.kill()
                raise AssertionError(f"the server did not start: {self.proc.communicate()[1][-2000:]}")
            time.sleep(0.1)

    def request(self, method: str, path: str, body: bytes | str | None = None,
                headers: dict[str, str] | None = None, chunked: bool = False) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            data = body.encode() if isinstance(body, str) else body
            if chunked:
                conn.request(method, path, body=iter([data]), headers=headers or {}, encode_chunked=True)
            else:
                conn.request(method, path, body=data, headers=headers or {})
            response = conn.getresponse()
            raw = response.read()
            kind = response.getheader("content-type", "")
            return response.status, json.loads(raw) if kind.startswith("application/json") else raw.decode()
        finally:
            conn.close()

    def predict(self, inputs: list[Any]) -> tuple[int, Any]:
        return self.request("POST", "/v1/predict", json.dumps({"inputs": inputs}))

    def stop(self) -> tuple[int, str]:
        """SIGTERM; gives the exit code and what the server wrote on stderr."""
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err


class Local:
    """The app `bertkit serve` runs, in this process (starlette's test client): the same requests and answers."""

    def __init__(self, model: Path | None = None, app: Any = None, headers: dict[str, str] | None = None, **settings: Any):
        from starlette.testclient import TestClient

        from bertkit.server import ServeSettings, create_app

        self.app = app or create_app(ServeSettings(model=model, **settings))
        self.client = TestClient(self.app, headers=headers)
        self.client.__enter__()  # runs the app's lifespan: its batcher, and the warm-up
        deadline = time.time() + 60
        while self.request("GET", "/health")[0] != 200 and time.time() < deadline:
            time.sleep(0.02)

    def request(self, method: str, path: str, body: bytes | str | None = None,
                headers: dict[str, str] | None = None, chunked: bool = False) -> tuple[int, Any]:
        data = body.encode() if isinstance(body, str) else body
        content = iter([data]) if chunked and data is not None else data
        response = self.client.request(method, path, content=content, headers=headers or {})
        kind = response.headers.get("content-type", "")
        return response.status_code, response.json() if kind.startswith("application/json") else response.text

    def predict(self, inputs: list[Any]) -> tuple[int, Any]:
        return self.request("POST", "/v1/predict", json.dumps({"inputs": inputs}))

    def close(self) -> None:
        self.client.__exit__(None, None, None)


@pytest.fixture(scope="module")
def exported(task_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("served") / "classify"
    assert main(["export", "--model", str(task_models["classify"]), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def server(exported: Path):
    srv = Local(exported, max_batch_size=16, max_wait_ms=5, max_inputs=8, max_body_bytes=4096)
    yield srv
    srv.close()


def test_predictions_are_what_bertkit_predict_prints(server: Local, exported: Path, capsys) -> None:
    status, body = server.predict(TEXTS)
    assert status == 200 and set(body) == {"predictions"}
    assert main(["predict", "--model", str(exported), *TEXTS]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert body["predictions"] == printed and len(printed) == 4


def test_model_health_and_metrics(server: Local, exported: Path) -> None:
    status, info = server.request("GET", "/v1/model")
    assert status == 200
    assert info == {"model": exported.name, "task": "classify", "labels": ["emma", "moby", "thursday"],
                    "backend": "onnxruntime", "max_seq_length": 128, "max_batch_size": 16, "max_wait_ms": 5.0,
                    "max_inputs": 8, "max_body_bytes": 4096, "max_batch_tokens": 16384, "max_concurrent_requests": 512,
                    "request_timeout": 30.0, "api_key": False,
                    "routes": ["POST /v1/predict", "GET /v1/model", "GET /health", "GET /metrics", "GET /openapi.json",
                               "GET /docs"]}
    assert server.request("GET", "/health") == (200, {"status": "ok"})
    before = metric(server, "bertkit_inputs_total")
    assert server.predict(TEXTS[:3])[0] == 200
    assert metric(server, "bertkit_inputs_total") == before + 3
    status, text = server.request("GET", "/metrics")
    assert status == 200 and "# TYPE bertkit_request_seconds histogram" in text and "bertkit_batch_size_bucket" in text


def metric(server: Server | Local, name: str, labels: str = "") -> float:
    """Gives one sample of /metrics (0 when absent)."""
    text = server.request("GET", "/metrics")[1]
    found = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


BAD = [  # (what, method, path, body, status, in the error)
    ("malformed JSON", "POST", "/v1/predict", '{"inputs": [', 400, "not valid JSON"),
    ("not UTF-8", "POST", "/v1/predict", b'{"inputs": ["caf\xe9"]}', 400, "the body is not UTF-8 (invalid continuation byte"),
    ("a list, not an object", "POST", "/v1/predict", '["a"]', 422, 'with "inputs"'),
    ("no inputs", "POST", "/v1/predict", '{"texts": ["a"]}', 422, 'with "inputs"'),
    ("an extra field", "POST", "/v1/predict", '{"inputs": ["a"], "top_k": 3}', 422, "unknown field(s) 'top_k'"),
    ("null inputs", "POST", "/v1/predict", '{"inputs": null}', 422, '"inputs" must be a list, got null'),
    ("inputs not a list", "POST", "/v1/predict", '{"inputs": "a"}', 422, '"inputs" must be a list, got a string'),
    ("empty inputs", "POST", "/v1/predict", '{"inputs": []}', 422, '"inputs" is empty'),
    ("too many inputs", "POST", "/v1/predict", json.dumps({"inputs": ["a"] * 9}), 422, "at most 8 per request"),
    ("a number", "POST", "/v1/predict", '{"inputs": ["a", 3]}', 422, "inputs[1]: expected a string, got a number"),
    ("a null input", "POST", "/v1/predict", '{"inputs": [null]}', 422, "inputs[0]: expected a string, got null"),
    ("a blank text", "POST", "/v1/predict", '{"inputs": ["  "]}', 422, "inputs[0]: the text is empty"),
    ("a pair to a classifier", "POST", "/v1/predict", '{"inputs": [["a", "b"]]}', 422, "got a list of 2"),
    ("a body over the limit", "POST", "/v1/predict", json.dumps({"inputs": ["x" * 5000]}), 413, "at most 4,096"),
    ("wrong method", "GET", "/v1/predict", None, 405, "GET is not allowed on /v1/predict"),
    ("wrong method on /health", "POST", "/health", "{}", 405, "POST is not allowed on /health"),
    ("unknown path", "GET", "/v2/predict", None, 404, "no route /v2/predict"),
]


@pytest.mark.parametrize(("what", "method", "path", "body", "status", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_requests_get_a_4xx_json_error(server: Local, what: str, method: str, path: str, body: Any, status: int,
                                           message: str) -> None:
    errors = metric(server, "bertkit_errors_total", f'{{code="{status}"}}')
    got, answer = server.request(method, path, body)
    assert (got, set(answer)) == (status, {"error"}), answer
    assert message in answer["error"], answer
    assert metric(server, "bertkit_errors_total", f'{{code="{status}"}}') == errors + 1
    assert server.request("GET", "/health")[0] == 200 and server.predict(["still fine"])[0] == 200


def test_a_streamed_body_over_the_limit_is_refused_too(server: Local) -> None:
    status, answer = server.request("POST", "/v1/predict", json.dumps({"inputs": ["y" * 5000]}), chunked=True)
    assert status == 413 and "over 4,096 bytes" in answer["error"]
    assert server.predict(["still fine"])[0] == 200


def test_concurrent_clients_each_get_their_own_answers(exported: Path) -> None:
    server = Server(exported, "--max-batch-size", "16", "--max-wait-ms", "5", "--max-inputs", "8")
    clients, rounds = 32, 6
    expected = {}  # the pipeline's own answers to every text the clients will send, for comparison
    texts = {(c, r): [f"client {c} round {r} text {k}: {TEXTS[(c + r + k) % 4]}" for k in range(1 + (c + r) % 3)]
             for c in range(clients) for r in range(rounds)}
    pipe = pipeline(exported)
    for key, batch in texts.items():
        expected[key] = pipe(batch)
    batches_before = metric(server, "bertkit_batch_size_count")
    failures: list[str] = []

    def client(c: int) -> None:
        for r in range(rounds):
            status, body = server.predict(texts[(c, r)])
            if status != 200 or body["predictions"] != expected[(c, r)]:
                failures.append(f"client {c} round {r}: {status} {str(body)[:200]}")

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failures, failures[:3]
    batches = metric(server, "bertkit_batch_size_count") - batches_before
    assert batches < clients * rounds / 2, "requests were not grouped into batches"  # 192 requests
    code, err = server.stop()
    assert code == 0 and "Traceback" not in err, err


@pytest.mark.parametrize("name", ["pair", "qa", "ner"])
def test_each_family_takes_its_own_inputs_from_a_pytorch_folder(task_models: dict[str, Path], name: str) -> None:
    inputs = {
        "pair": [[TEXTS[0], TEXTS[1]], [TEXTS[2], TEXTS[3]]],
        "qa": [{"question": "Who was handsome?", "context": TEXTS[0]}, {"question": "Who walked?", "context": TEXTS[3]}],
        "ner": [TEXTS[3], ["Mr.", "Knightley", "walked", "to", "Highbury"]],
    }[name]
    wrong = {"pair": ['"only one text"', "a pair model takes [text, pair]"],
             "qa": ['{"question": "q"}', 'a QA model takes {"question": ..., "context": ...}'],
             "ner": ['["two words"]', "a word holds white space"]}[name]
    srv = Local(task_models[name])
    try:
        status, body = srv.predict(inputs)
        assert status == 200
        assert body["predictions"] == pipeline(task_models[name]).predict(inputs)
        assert srv.request("GET", "/v1/model")[1]["backend"] == "torch"
        status, answer = srv.request("POST", "/v1/predict", f'{{"inputs": [{wrong[0]}]}}')
        assert status == 422 and wrong[1] in answer["error"], answer
    finally:
        srv.close()
    if name == "ner":  # words given as a list keep their own spans in the text they make
        words = body["predictions"][1]
        assert words["text"] == "Mr. Knightley walked to Highbury" and words["words"][1] == "Knightley"


def test_a_lone_client_is_not_held_back_by_the_wait(exported: Path) -> None:
    srv = Server(exported, "--max-wait-ms", "400")  # a wait that would show in every request
    try:
        took = []
        for k in range(10):
            t0 = time.perf_counter()
            assert srv.predict([f"alone {k}"])[0] == 200
            took.append(time.perf_counter() - t0)
        assert sorted(took)[5] < 0.2, took  # no request of a lone client waits for company
    finally:
        assert srv.stop()[0] == 0


@pytest.mark.slow
def test_sigterm_finishes_the_requests_in_flight_then_exits_0(task_models: dict[str, Path], tmp_path: Path) -> None:
    import torch

    import bertkit
    from bertkit import BertConfig, Tokenizer

    # a model slow enough (8 layers of 512, sequences of 128) that requests are still being computed at the signal
    tok = Tokenizer.from_pretrained(task_models["classify"])
    torch.manual_seed(0)
    bertkit.BertForSequenceClassification(BertConfig.preset("medium", vocab_size=tok.vocab_size).with_labels(
        ["a", "b"])).save_pretrained(tmp_path / "slow")
    tok.save_pretrained(tmp_path / "slow")
    (tmp_path / "slow" / "bertkit_task.json").write_text(json.dumps({"task": "classify", "labels": ["a", "b"]}))
    srv = Server(tmp_path / "slow", "--max-batch-size", "8", "--device", "cpu")
    long = " ".join(TEXTS * 4)  # truncated to 128 tokens
    answers: list[tuple[float, int, Any]] = []

    def client(k: int) -> None:
        status, body = srv.predict([f"{k} {long}"] * 8)
        answers.append((time.perf_counter(), status, body))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.3)  # all six are in the server: being computed, or queued behind the first
    signalled = time.perf_counter()
    srv.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(timeout=120)
    _, err = srv.proc.communicate(timeout=120)
    assert srv.proc.returncode == 0, err
    assert len(answers) == 6 and all(status == 200 for _, status, _ in answers), answers
    assert sorted(body["predictions"][0]["text"].split()[0] for _, _, body in answers) == [str(k) for k in range(6)]
    assert max(at for at, _, _ in answers) > signalled  # some were answered after the signal: it drained them
