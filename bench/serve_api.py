"""A server you can expose, measured on this machine (loopback only; every load stops by itself):

    pip install -e ".[bench]"      # sentence-transformers, for part 2's comparison
    python -m bench.serve_api [--quick] [--work runs/serve-api-bench]      # results: bench/results/serve_api.json

1. flood: an int8 MiniLM classifier export, --max-concurrent-requests 32; 256 keep-alive clients, each request 64
   inputs of about 100 tokens, for 30 s; a probe process asks /health every 50 ms meanwhile. Twice: "polite"
   clients wait the Retry-After of a 429 (as OpenAI's client and load balancers do), "hammering" ones send
   again at once. Counts by status, broken connections, the refusals' latency, /health's p99, resident memory
   after warm-up and after each flood; then a polite flood with SIGTERM in the middle: the exit code and how
   long draining took.
2. embeddings: all-MiniLM-L6-v2 as an embedder (mean pooling, normalized; --max-batch-tokens 16384, TEI's
   default) at 1, 8 and 32 clients, a sentence a request, beside sentence-transformers' model of the same
   weights behind the same uvicorn, a request at a time (bench/st_server.py), rounds taken in turn.
3. token budget: the embedder at --max-batch-size 64, sixteen clients sending 4 texts of 512 tokens and eight
   sending one short sentence; the short requests' p99 with --max-batch-tokens 16384 and without (10^9), and with
   a budget a 2-core CPU runs in a fraction of a second (2048).
4. workers: the int8 classifier at 32 clients, a sentence a request, --workers 1 and 2 in turn.
5. a lone client on a PyTorch MiniLM folder: the server's request against the in-process pipeline call and
   transformers' pipeline, and an HTTP round trip alone (GET /health), in turn.
6. event loop (`--only loop [--compare-with REF]`): the CPU the server's event-loop thread spends a request at
   32 clients of one short sentence each (/proc/PID/task/PID/stat), /v1/predict on the int8 classifier and
   /v1/embeddings on all-MiniLM-L6-v2; with --compare-with, the servers of git REF's src/ as well, in turn.
   Its results go to bench/results/serve_loop.json.

The classifier's head is freshly initialized: serving costs the same whatever it predicts.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .common import ROOT, SHARED_DATA, machine
from .loadgen import flood, json_body, probe_result, start_probe, summary

MINILM = SHARED_DATA / "models" / "all-MiniLM-L6-v2"
RESULTS = ROOT / "bench" / "results" / "serve_api.json"
LOOP_RESULTS = ROOT / "bench" / "results" / "serve_loop.json"  # part 6, measured on its own


def sentences(n: int) -> list[str]:
    lines = (SHARED_DATA / "sst2" / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return [line.rsplit("\t", 1)[0] for line in lines][:n]


def models(work: Path) -> dict[str, Path]:
    """A MiniLM classifier folder (head freshly initialized) and its int8 export; kept in `work` for reruns."""
    import torch

    import bertkit
    from bertkit.export import export

    folder, int8 = work / "minilm-classify", work / "minilm-classify-int8"
    if not (folder / "bertkit_task.json").is_file():
        torch.manual_seed(0)
        bertkit.BertForSequenceClassification.from_pretrained(MINILM, id2label={0: "0", 1: "1"}).save_pretrained(folder)
        bertkit.Tokenizer.from_pretrained(MINILM).save_pretrained(folder)
        (folder / "bertkit_task.json").write_text(json.dumps({"task": "classify", "labels": ["0", "1"]}))
    if not (int8 / "model.onnx").is_file():
        export(folder, int8, quantize="int8")
    return {"torch": folder, "int8": int8}


def texts_of(tokens: int, n: int) -> list[str]:
    """n texts of about `tokens` WordPiece tokens each, made of SST-2 sentences."""
    from bertkit import Tokenizer

    tok, pool, out = Tokenizer.from_pretrained(MINILM), sentences(2000), []
    k = 0
    while len(out) < n:
        parts: list[str] = []
        while len(tok.encode(" ".join(parts)).ids) < tokens:
            parts.append(pool[k % len(pool)])
            k += 1
        out.append(" ".join(parts))
    return out


# ---- servers -------------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args: list[str], module: str = "bertkit", ready: int = 1, src: Path | None = None) -> tuple[subprocess.Popen, int]:
    """A server child process, once /health answers 200 `ready` times in a row (each worker warmed up); `src`:
    another bertkit source tree to run instead of the installed one."""
    port = free_port()
    command = [sys.executable, "-m", module, *(["serve", "--port", str(port), *args] if module == "bertkit" else [*args, str(port)])]
    env = {**os.environ, "PYTHONPATH": str(src)} if src is not None else None
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    deadline, streak = time.time() + 180, 0
    while streak < ready:
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            raise RuntimeError(f"server did not start: {proc.communicate()[1][-2000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            streak = streak + 1 if conn.getresponse().status == 200 else 0
            conn.close()
        except OSError:
            streak = 0
            time.sleep(0.2)
    return proc, port


def stop(proc: subprocess.Popen) -> tuple[int, float, str]:
    """SIGTERM; gives the exit code, the seconds to exit, the end of stderr."""
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, time.perf_counter() - t0, err[-2000:]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load(port: int, clients: int, seconds: float, path: str, body: Any, polite: bool = False) -> dict[str, Any]:
    return summary(asyncio.run(flood(port, clients, seconds, path, body, polite=polite)), seconds)


# ---- the measurements ----------------------------------------------------------------------------------------

def flood_bench(int8: Path, quick: bool) -> dict[str, Any]:
    seconds = 8 if quick else 30
    inputs = texts_of(100, 64)
    body = lambda c, k: json_body({"inputs": inputs})  # noqa: E731
    proc, port = start(["--model", str(int8), "--max-concurrent-requests", "32"])
    load(port, 4, 3, "/v1/predict", body)  # warm: the allocator's pools reach their working size
    rss_start = rss_mib(proc.pid)
    result: dict[str, Any] = {}
    for kind, polite in (("polite", True), ("hammering", False)):
        probe = start_probe(port, seconds)
        result[kind] = load(port, 256, seconds, "/v1/predict", body, polite=polite)
        health = sorted(probe_result(probe))
        time.sleep(2)
        result[kind] |= {"rss_after_flood_mib": round(rss_mib(proc.pid), 1), "health_probes": len(health),
                         "health_p50_ms": round(1000 * health[len(health) // 2], 2),
                         "health_p99_ms": round(1000 * health[min(len(health) - 1, int(0.99 * len(health)))], 2),
                         "health_failed": sum(h == float("inf") for h in health)}
    result["rss_after_warm_up_mib"] = round(rss_start, 1)
    stop(proc)
    # SIGTERM in the middle of a flood: what was admitted is answered, then exit 0
    proc, port = start(["--model", str(int8), "--max-concurrent-requests", "32"])
    records: list[Any] = []
    signalled: list[float] = []

    def later() -> None:
        time.sleep(seconds / 3)
        signalled.append(time.perf_counter())
        records.append(stop(proc))

    killer = threading.Thread(target=later)
    killer.start()
    during = asyncio.run(flood(port, 64, seconds / 2, "/v1/predict", body, polite=True))
    killer.join()
    code, took, err = records[0]
    answered = [s for s, _, _ in during if s != 0]
    result["sigterm"] = {"exit_code": code, "seconds_to_exit": round(took, 2), "traceback": "Traceback" in err,
                         "answers_by_status": {str(s): answered.count(s) for s in sorted(set(answered))},
                         "connection_errors_after_exit": len(during) - len(answered)}
    return result


def embeddings_bench(quick: bool) -> dict[str, Any]:
    texts = sentences(500)
    body = lambda c, k: json_body({"input": texts[(c * 37 + k) % len(texts)], "model": "m"})  # noqa: E731
    seconds = 4 if quick else 10
    servers = {"bertkit": start(["--model", str(MINILM), "--pooling", "mean", "--normalize"]),
               "sentence-transformers": start([str(MINILM)], module="bench.st_server")}
    out: dict[str, Any] = {}
    try:
        for clients in (1, 8, 32):
            rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in servers}
            for _ in range(1 if quick else 2):
                for name, (_, port) in servers.items():
                    rounds[name].append(load(port, clients, seconds, "/v1/embeddings", body))
            out[str(clients)] = {name: max(r, key=lambda s: s["ok_per_s"]) for name, r in rounds.items()}
            out[str(clients)]["ratio"] = round(out[str(clients)]["bertkit"]["ok_per_s"] /
                                               out[str(clients)]["sentence-transformers"]["ok_per_s"], 2)
    finally:
        for proc, _ in servers.values():
            stop(proc)
    return out


def token_budget_bench(quick: bool) -> dict[str, Any]:
    long_texts, short = texts_of(600, 4), sentences(200)
    seconds = 10 if quick else 30
    out = {}
    for name, budget in (("with --max-batch-tokens 16384", "16384"), ("without (10^9)", "1000000000"),
                         ("with --max-batch-tokens 2048", "2048")):
        proc, port = start(["--model", str(MINILM), "--pooling", "mean", "--max-batch-size", "64",
                            "--max-batch-tokens", budget])

        async def both(port: int = port) -> tuple[list[Any], list[Any]]:
            return await asyncio.gather(
                flood(port, 16, seconds, "/v1/embeddings", lambda c, k: json_body({"input": long_texts})),
                flood(port, 8, seconds, "/v1/embeddings", lambda c, k: json_body({"input": short[(c + 8 * k) % 200]})))

        longs, shorts = asyncio.run(both())
        out[name] = {"short": summary(shorts, seconds), "long": summary(longs, seconds)}
        stop(proc)
    return out


def workers_bench(int8: Path, quick: bool) -> dict[str, Any]:
    texts = sentences(500)
    body = lambda c, k: json_body({"inputs": [texts[(c * 31 + k) % len(texts)]]})  # noqa: E731
    seconds = 5 if quick else 12
    out: dict[str, list[float]] = {"1": [], "2": []}
    for _ in range(1 if quick else 2):
        for workers in ("1", "2"):
            proc, port = start(["--model", str(int8), "--workers", workers], ready=20)
            out[workers].append(load(port, 32, seconds, "/v1/predict", body)["ok_per_s"])
            stop(proc)
    return {f"workers {k}": {"per_s": max(v), "rounds": v} for k, v in out.items()} | {
        "ratio": round(max(out["2"]) / max(out["1"]), 2)}


def lone_bench(folder: Path, quick: bool) -> dict[str, Any]:
    import torch
    import transformers

    from bertkit import pipeline

    texts = sentences(100 if quick else 300)
    pipe = pipeline(folder)
    hf = transformers.pipeline("text-classification", model=str(folder), device="cpu")
    proc, port = start(["--model", str(folder)])
    conn = http.client.HTTPConnection("127.0.0.1", port)

    def send(method: str, path: str, body: str | None = None) -> None:
        for attempt in (0, 1):  # uvicorn closes a connection idle 5 s (the other paths' turn): open it again
            try:
                conn.request(method, path, body, {"Content-Type": "application/json"})
                conn.getresponse().read()
                return
            except (http.client.RemoteDisconnected, ConnectionError):
                conn.close()
                if attempt:
                    raise

    def post(text: str) -> None:
        send("POST", "/v1/predict", json.dumps({"inputs": [text]}))

    def health(_: str) -> None:
        send("GET", "/health")

    calls = {"server (HTTP)": post, "bertkit pipeline (in process)": lambda t: pipe([t]),
             "transformers pipeline (in process)": hf, "HTTP round trip alone (GET /health)": health}
    times: dict[str, list[float]] = {name: [] for name in calls}
    with torch.inference_mode():
        for _ in range(2):  # the first pass warms every path
            for name, call in calls.items():
                times[name] = []
                for text in texts:
                    t0 = time.perf_counter()
                    call(text)
                    times[name].append(time.perf_counter() - t0)
    stop(proc)
    medians = {name: round(1000 * statistics.median(t), 2) for name, t in times.items()}
    budget = 1.5 * medians["bertkit pipeline (in process)"] + 2
    return {"median_ms": medians, "target_ms": round(budget, 2), "met": medians["server (HTTP)"] <= budget}


def loop_bench(int8: Path, quick: bool, compare_with: str | None) -> dict[str, Any]:
    """Event-loop CPU ms a request and requests/s at 32 clients of one short sentence a request, per route; this
    tree's server and (with `compare_with`, a git ref) that ref's, in turn, round after round (medians)."""
    import tempfile

    from .distill import thread_cpu_s

    lines = (ROOT / "src" / "bertkit" / "data" / "en" / "seed" / "sentiment" / "train.tsv").read_text().splitlines()[1:]
    texts = [line.rsplit("\t", 1)[0] for line in lines]
    routes = {"/v1/predict": (["--model", str(int8)], lambda c, k: json_body({"inputs": [texts[(c * 13 + k) % len(texts)]]})),
              "/v1/embeddings": (["--model", str(MINILM), "--pooling", "mean", "--normalize"],
                                 lambda c, k: json_body({"input": texts[(c * 13 + k) % len(texts)]}))}
    seconds, rounds = (4, 1) if quick else (10, 3)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        this = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip() or "this tree"  # -dirty: with changes not committed
        trees: dict[str, Path | None] = {this: None}
        if compare_with is not None:  # that ref's src/, as it was committed
            archive = subprocess.run(["git", "archive", compare_with, "src"], cwd=ROOT, check=True, capture_output=True)
            subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
            trees = {compare_with: Path(tmp) / "src", **trees}
        for route, (args, body) in routes.items():
            servers = {name: start(args, src=src) for name, src in trees.items()}
            loop_ms: dict[str, list[float]] = {name: [] for name in servers}
            rates: dict[str, list[float]] = {name: [] for name in servers}
            errors = dict.fromkeys(servers, 0)
            try:
                for _ in range(rounds):
                    for name, (proc, port) in servers.items():
                        before = thread_cpu_s(proc.pid)
                        load = summary(asyncio.run(flood(port, 32, seconds, route, body)), seconds)
                        rates[name].append(load["ok_per_s"])
                        loop_ms[name].append(1000 * (thread_cpu_s(proc.pid) - before) / max(load["ok_per_s"] * seconds, 1))
                        errors[name] += load["requests"] - load["by_status"].get("200", 0)
            finally:
                for proc, _ in servers.values():
                    stop(proc)
            out[route] = {name: {"event_loop_ms": round(statistics.median(loop_ms[name]), 3),
                                 "ok_per_s": statistics.median(rates[name]), "rounds_ms": [round(x, 3) for x in loop_ms[name]],
                                 "not_200": errors[name]} for name in servers}
    command = "python -m bench.serve_api --only loop" + (" --quick" if quick else "") + (f" --compare-with {compare_with}" if compare_with else "")
    return {"command": command, "tree": this, "clients": 32, "seconds": seconds, "rounds": rounds, "routes": out}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "serve-api-bench")
    parser.add_argument("--only", action="append", choices=["flood", "embeddings", "budget", "workers", "lone", "loop"])
    parser.add_argument("--compare-with", metavar="REF", help="loop: also measure the server of this git ref's src/")
    args = parser.parse_args(argv)
    found = models(args.work)
    parts = {"flood": lambda: flood_bench(found["int8"], args.quick), "embeddings": lambda: embeddings_bench(args.quick),
             "budget": lambda: token_budget_bench(args.quick), "workers": lambda: workers_bench(found["int8"], args.quick),
             "lone": lambda: lone_bench(found["torch"], args.quick),
             "loop": lambda: loop_bench(found["int8"], args.quick, args.compare_with)}
    results: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.is_file() and args.only else {}
    if args.only == ["loop"]:  # a file of its own: the other parts' results keep their command and date
        loop = parts["loop"]() | {"machine": machine(), "date": datetime.date.today().isoformat(), "cores": os.cpu_count()}
        print(json.dumps(loop, indent=1), file=sys.stderr)
        LOOP_RESULTS.write_text(json.dumps(loop, indent=1) + "\n")
        return
    for name, run in parts.items():
        if args.only and name not in args.only:
            continue
        print(f"== {name}", file=sys.stderr)
        results[name] = run()
        print(json.dumps(results[name], indent=1), file=sys.stderr)
        results |= {"command": "python -m bench.serve_api" + (" --quick" if args.quick else ""), "machine": machine(),
                    "date": datetime.date.today().isoformat(), "cores": os.cpu_count()}
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")  # after each part: a failure keeps the others


if __name__ == "__main__":
    main()


# ---- bench/RESULTS.md ------------------------------------------------------------------------------------------

def section(data: dict[str, Any]) -> str:
    """Section 9 of bench/RESULTS.md, from bench/results/serve_api.json."""
    from .report import table

    m = data["machine"]
    lines = ["## 9. A server you can expose (bench/serve_api.py)", "",
             f"Measured by `{data['command']}` on {data['date']} ({m.get('cpu')}, {data['cores']} cores, torch "
             f"{m.get('torch')}); clients and server share the cores, on 127.0.0.1. What each part runs is in the "
             "script's docstring.", ""]
    targets: list[list[str]] = []
    if "flood" in data:
        f = data["flood"]
        rows = [[kind, f"{r['requests']:,}", r["by_status"].get("200", 0), f"{r['by_status'].get('429', 0):,}",
                 r["server_errors"], r["broken"], r["refused_p50_ms"], r["p50_ms"], r["health_p99_ms"],
                 f"{f['rss_after_warm_up_mib']:.0f} -> {r['rss_after_flood_mib']:.0f}"]
                for kind, r in ((k, f[k]) for k in ("polite", "hammering"))]
        s = f["sigterm"]
        lines += ["### Flood: 256 clients, 64 inputs of ~100 tokens a request, --max-concurrent-requests 32", "",
                  table(["clients", "requests", "200", "429", "5xx", "broken", "429 p50 ms", "200 p50 ms",
                         "/health p99 ms", "RSS MiB"], rows), "",
                  f"SIGTERM in the middle of a polite flood: exit code **{s['exit_code']}** after {s['seconds_to_exit']:.1f} s "
                  f"of draining (the admitted requests answered: {s['answers_by_status']}; a traceback in the log: "
                  f"{s['traceback']}). An admitted request here waits behind up to 31 others of 64 inputs each: the "
                  "200s' latency is the queue the operator allowed, not the server's.", ""]
        p, h = f["polite"], f["hammering"]
        growth = max(p["rss_after_flood_mib"], h["rss_after_flood_mib"]) / f["rss_after_warm_up_mib"] - 1
        rate = h["requests"] / (p["requests"] or 1)
        lines += [f"The hammering clients send {rate:.0f}x as many requests as the polite ones ({h['requests']:,} in "
                  "the same time), from a load generator on the same 2 cores: the refusals' latency there is mostly "
                  "the generator's own event loop and the CPU it takes from the server (and the model, which then "
                  "runs slower than the pace the server measured: a few admitted requests wait out their timeout "
                  "and get 503). Clients that honour Retry-After, as OpenAI's client and load balancers do, meet "
                  "every target.", ""]
        targets += [["flood: 0 answers 5xx, 0 broken connections", f"polite {p['server_errors']} / {p['broken']}; "
                     f"hammering {h['server_errors']} / {h['broken']}",
                     _met(p["server_errors"] + p["broken"] == 0) + ("" if h["server_errors"] + h["broken"] == 0
                                                                    else " (polite); not met hammering")],
                    ["flood: 429 median < 20 ms", f"polite {p['refused_p50_ms']} ms; hammering {h['refused_p50_ms']} ms",
                     _met(p["refused_p50_ms"] < 20) + ("" if h["refused_p50_ms"] < 20 else " (polite); not met hammering")],
                    ["flood: /health p99 < 100 ms", f"{p['health_p99_ms']} / {h['health_p99_ms']} ms",
                     _met(max(p["health_p99_ms"], h["health_p99_ms"]) < 100)],
                    ["flood: RSS within 10% of after warm-up", f"{100 * growth:+.1f}%", _met(growth < 0.10)],
                    ["SIGTERM during the flood drains, exits 0", f"exit {s['exit_code']}", _met(s["exit_code"] == 0)]]
    if "embeddings" in data:
        e = data["embeddings"]
        rows = [[c, f"{v['bertkit']['ok_per_s']:,.0f}", v["bertkit"]["p50_ms"], v["bertkit"]["p99_ms"],
                 f"{v['sentence-transformers']['ok_per_s']:,.0f}", v["sentence-transformers"]["p50_ms"],
                 v["sentence-transformers"]["p99_ms"], f"**{v['ratio']:.2f}x**"] for c, v in e.items()]
        lines += ["### /v1/embeddings: all-MiniLM-L6-v2, a sentence a request", "",
                  table(["clients", "bertkit req/s", "p50 ms", "p99 ms", "sentence-transformers req/s", "p50 ms",
                         "p99 ms", "ratio"], rows), ""]
        targets.append(["embeddings: >= 3x sentence-transformers at 32 clients", f"{e['32']['ratio']:.2f}x",
                        _met(e["32"]["ratio"] >= 3)])
    if "budget" in data:
        rows = [[name, v["short"]["p50_ms"], v["short"]["p99_ms"], v["long"]["p50_ms"], v["long"]["p99_ms"],
                 v["long"]["ok_per_s"], v["short"]["ok_per_s"]] for name, v in data["budget"].items()]
        lines += ["### Token budget: 16 clients of 4 x 512-token texts beside 8 of one short sentence", "",
                  table(["", "short p50 ms", "short p99 ms", "long p50 ms", "long p99 ms", "long req/s", "short req/s"],
                        rows), "",
                  "The budget bounds a group's work, so a short request waits less for the group ahead of it, and rides "
                  "along with a group a long request could not join. It still waits for that whole group: on 2 cores a "
                  "group of 16,384 tokens at length 512 takes seconds. Answering each request when its own forward "
                  "pass ends, not the group's last, would take short requests out of that wait; it is not built.", ""]
    if "workers" in data:
        w = data["workers"]
        lines += ["### --workers: int8 MiniLM classifier, 32 clients, a sentence a request", "",
                  f"1 process {w['workers 1']['per_s']:,.0f} req/s, 2 processes {w['workers 2']['per_s']:,.0f} req/s: "
                  f"**{w['ratio']:.2f}x** (rounds: {w['workers 1']['rounds']} and {w['workers 2']['rounds']}).", ""]
    if "lone" in data:
        lone = data["lone"]
        lines += ["### A lone client on a PyTorch MiniLM folder (median ms a request, a sentence, in turn)", "",
                  table(["path", "ms"], [[k, v] for k, v in lone["median_ms"].items()]), ""]
        targets.append(["lone client <= 1.5 x pipeline call + 2 ms", f"{lone['median_ms']['server (HTTP)']} ms "
                        f"(budget {lone['target_ms']} ms)", _met(lone["met"])])
    lines += ["### Targets (issue 29)", "", table(["target", "measured", "status"], targets), ""]
    if LOOP_RESULTS.is_file():
        lines += loop_section(json.loads(LOOP_RESULTS.read_text()))
    return "\n".join(lines)


def loop_section(data: dict[str, Any]) -> list[str]:
    """Part 6's lines (bench/results/serve_loop.json): the event loop's CPU a request, before and after."""
    from .report import table

    m, routes = data["machine"], data["routes"]
    names = list(next(iter(routes.values())))
    rows = [[route, *(f"{v[n]['event_loop_ms']:.3f} ({v[n]['ok_per_s']:,.0f} req/s)" for n in names)]
            for route, v in routes.items()]
    worst = max(v[data["tree"]]["event_loop_ms"] for v in routes.values())
    return ["### The event loop's CPU a request (issue 34)", "",
            f"Measured by `{data['command']}` on {data['date']} ({m.get('cpu')}, {data['cores']} cores, shared with "
            f"other work while it ran): {data['clients']} clients of one short sentence a request, {data['rounds']} "
            f"rounds of {data['seconds']} s, the servers in turn; the CPU milliseconds of the server's event-loop "
            "thread (/proc/PID/task/PID/stat) a request answered, median of the rounds (requests/s beside it). "
            "The earlier tree parsed the body, counted its tokens and wrote the answer (a list of Python floats "
            "for a vector) on the event loop; this one reads and tokenizes a request once in a worker thread and "
            "writes its answer with orjson in the forward pass's thread (a tree named -dirty held changes not yet "
            "committed when measured).", "",
            table(["route", *names], rows), "",
            table(["target", "measured", "status"], [["event loop <= 0.1 ms a one-sentence request",
                                                       f"{worst:.3f} ms at most", _met(worst <= 0.1)]]), ""]


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"
