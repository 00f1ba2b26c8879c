"""Serving on this machine: `bertkit serve` under load, beside the offline pipeline and transformers.

    python -m bench.serve [--quick] [--work runs/serve-bench]      # results: bench/results/serve.json

Two SST-2 classifiers: all-MiniLM-L6-v2 fine-tuned on 4,000 SST-2 training sentences (1 epoch), and a
tiny BERT (2 x 128, random init, MiniLM's vocabulary) fine-tuned the same way; each exported, int8. For each:

1. offline: the same backend in process (`bertkit.pipeline` on the int8 export): SST-2 dev sentences in
   batches of 32 (sentences/s), and one sentence at a time (ms a call); before the server and after it;
2. the server (`bertkit serve` on the int8 export, a child process) under 1, 8, 32, 32, 8 and 1 concurrent
   clients: each a thread with one keep-alive connection sending one sentence a request, a fixed number of
   requests each (the loops stop by themselves; 127.0.0.1 only): throughput, p50/p99 latency, errors, the
   server's RSS after each level;
3. the alternative a user would otherwise write (MiniLM only): transformers' text-classification pipeline
   on the PyTorch folder behind the same ASGI server (starlette on uvicorn), one request at a time, no
   batching (bench/hf_server.py), under the same loads;
4. the forward pass alone, int8 onnxruntime against transformers' BertForSequenceClassification in fp32
   eager (sdpa), at batch 1 and 32, alternating call by call on the same batches.

The clients run in this process, on the same 2 cores as the server: their cost (about 0.1 ms of CPU a
request) is in every server figure, as it is in any loopback test on this machine.
"""

from __future__ import annotations

import argparse
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

import numpy as np

from .common import ROOT, SHARED_DATA, machine

MINILM = SHARED_DATA / "models" / "all-MiniLM-L6-v2"
SST2 = SHARED_DATA / "sst2"
RESULTS = ROOT / "bench" / "results" / "serve.json"
LEVELS = (1, 8, 32)


def sentences(split: str) -> tuple[list[str], list[str]]:
    lines = (SST2 / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[1:]
    rows = [line.rsplit("\t", 1) for line in lines]
    return [r[0] for r in rows], [r[1] for r in rows]


# ---- the models ----------------------------------------------------------------------------------------

def models(work: Path, quick: bool) -> dict[str, dict[str, Path]]:
    """Fine-tunes and exports the two classifiers (kept in `work`: a rerun reuses them)."""
    import torch

    from bertkit import BertConfig, BertForPreTraining, Tokenizer, settings
    from bertkit.export import export
    from bertkit.finetune import FinetuneSettings, finetune

    texts, labels = sentences("train")
    n = 400 if quick else 4000
    train = work / "sst2-train.tsv"
    train.parent.mkdir(parents=True, exist_ok=True)
    train.write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in zip(texts[:n], labels[:n], strict=True)))
    dev = SST2 / "dev.tsv"
    tiny = work / "tiny-init"
    if not tiny.is_dir():
        tok = Tokenizer.from_pretrained(MINILM)
        torch.manual_seed(0)
        BertForPreTraining(BertConfig.preset("tiny", vocab_size=tok.vocab_size)).save_pretrained(tiny)
        tok.save_pretrained(tiny)
    out = {}
    for name, base, lr in (("minilm", MINILM, 5e-5), ("tiny", tiny, 1e-3)):
        folder = work / name
        if not (folder / "model" / "bertkit_task.json").is_file():
            finetune(settings.load(FinetuneSettings, flags={
                "task.name": "classify", "model": base, "data.train": train, "data.dev": dev, "out": folder,
                "train.epochs": 1, "train.batch_size": 32, "optim.lr": lr, "train.seed": 0, "train.progress": False,
            }))
        out[name] = {"torch": folder / "model"}
        for precision in ("fp32", "int8"):
            exported = out[name][precision] = work / f"{name}-{precision}"
            if not (exported / "model.onnx").is_file():
                export(folder / "model", exported, quantize=precision if precision == "int8" else None)
    return out


# ---- offline and forward-only ----------------------------------------------------------------------------

def offline(folder: Path, texts: list[str], quick: bool) -> dict[str, float]:
    """The pipeline in process on the same backend: batched throughput and one-sentence latency."""
    from bertkit import pipeline

    pipe = pipeline(folder, batch_size=32)
    pipe(texts[:64])  # warm-up
    best = 0.0
    for _ in range(2 if quick else 3):
        t0 = time.perf_counter()
        for lo in range(0, len(texts), 32):
            pipe(texts[lo : lo + 32])
        best = max(best, len(texts) / (time.perf_counter() - t0))
    single = []
    for text in texts[: 100 if quick else 400]:
        t0 = time.perf_counter()
        pipe([text])
        single.append(time.perf_counter() - t0)
    return {"batched_per_s": best, "single_ms": 1000 * statistics.median(single)}


def alternating(folder: Path, port: int, texts: list[str], quick: bool) -> dict[str, Any]:
    """The server at 32 clients against the same backend offline, taking turns round by round (the machine is
    shared and its speed drifts: a ratio from one round is fairer than two figures from minutes apart). A round:
    the SST-2 dev set offline in batches of 32, then about as many requests from 32 clients."""
    from bertkit import pipeline

    pipe = pipeline(folder, batch_size=32)
    pipe(texts[:64])
    rounds = []
    for _ in range(2 if quick else 5):
        t0 = time.perf_counter()
        for lo in range(0, len(texts), 32):
            pipe(texts[lo : lo + 32])
        offline_per_s = len(texts) / (time.perf_counter() - t0)
        served = load(port, texts, 32, max(1, len(texts) // 32) // (10 if quick else 1))
        rounds.append({"offline_per_s": offline_per_s, "server_per_s": served["per_s"], "errors": served["errors"],
                       "requests": served["requests"], "ratio": served["per_s"] / offline_per_s})
    return {"rounds": rounds, "ratio": statistics.median(r["ratio"] for r in rounds)}


def forward_only(models: dict[str, Path], texts: list[str], quick: bool) -> dict[str, Any]:
    """int8 onnxruntime against transformers fp32 eager, and onnxruntime fp32 beside them (what the runtime gains
    without int8): the forward pass alone, batch 1 and 32, alternating call by call."""
    import torch
    import transformers

    from bertkit import Tokenizer
    from bertkit.runtime import OnnxBackend

    tok = Tokenizer.from_pretrained(models["torch"])
    ort = {"onnxruntime int8": OnnxBackend(models["int8"]), "onnxruntime fp32": OnnxBackend(models["fp32"])}
    hf = transformers.BertForSequenceClassification.from_pretrained(models["torch"], attn_implementation="sdpa").eval()
    out = {}
    for batch_size in (1, 32):
        batches = [tok(texts[lo : lo + batch_size], padding=True, return_tensors="np")
                   for lo in range(0, 32 * (4 if quick else 16), batch_size)][: 8 if quick else 32]
        feeds = [{k: np.asarray(b[k], dtype=np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
                 for b in batches]
        tensors = [{k: torch.from_numpy(v) for k, v in f.items()} for f in feeds]
        times: dict[str, list[float]] = {"onnxruntime int8": [], "transformers fp32": [], "onnxruntime fp32": []}
        for rnd in range(3 if quick else 5):
            for side in (list(times) if rnd % 2 == 0 else list(reversed(times))):
                t0 = time.perf_counter()
                for f, t in zip(feeds, tensors, strict=True):
                    if side in ort:
                        ort[side].run(f, ["logits"])
                    else:
                        with torch.inference_mode():
                            hf(**t)
                times[side].append(time.perf_counter() - t0)
        ms = {side: 1000 * statistics.median(v) / len(feeds) for side, v in times.items()}
        out[f"batch {batch_size}"] = {**{f"{k} ms": v for k, v in ms.items()},
                                      "speed-up": ms["transformers fp32"] / ms["onnxruntime int8"],
                                      "fp32 speed-up": ms["transformers fp32"] / ms["onnxruntime fp32"]}
    return out


# ---- servers and clients -----------------------------------------------------------------------------------

def server() -> dict[str, str]:
    """What uvicorn runs on here: its HTTP parser and event loop (httptools and uvloop when installed)."""
    import importlib.util

    import uvicorn

    def have(name: str) -> bool:
        return importlib.util.find_spec(name) is not None

    return {"uvicorn": uvicorn.__version__, "http": "httptools" if have("httptools") else "h11",
            "loop": "uvloop" if have("uvloop") else "asyncio"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(command: list[str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the server did not start: {proc.communicate()[1][-2000:]}")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load(port: int, texts: list[str] | None, clients: int, per_client: int) -> dict[str, Any]:
    """`clients` threads, each sending `per_client` requests on its own keep-alive connection: one sentence each
    to /v1/predict, or with `texts` None, GET /health (what HTTP alone costs here)."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients

    def client(c: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for r in range(per_client):
            t0 = time.perf_counter()
            try:
                if texts is None:
                    conn.request("GET", "/health")
                else:
                    body = json.dumps({"inputs": [texts[(c * per_client + r) % len(texts)]]})
                    conn.request("POST", "/v1/predict", body, {"Content-Type": "application/json"})
                response = conn.getresponse()
                data = response.read()
                if response.status != 200 or (texts is not None and b'"predictions"' not in data):
                    errors[c] += 1
            except (OSError, http.client.HTTPException):
                errors[c] += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            latencies[c].append(time.perf_counter() - t0)
        conn.close()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    every = np.array([x for lat in latencies for x in lat])
    return {"clients": clients, "requests": len(every), "errors": int(sum(errors)),
            "per_s": len(every) / seconds, "p50_ms": 1000 * float(np.percentile(every, 50)),
            "p99_ms": 1000 * float(np.percentile(every, 99))}


def serve_levels(command: list[str], port: int, texts: list[str], quick: bool,
                 offline_folder: Path | None = None) -> dict[str, Any]:
    """Starts a server; warms it up (one request of the 32 longest sentences: the largest batch the loads can
    make; then 32 clients); runs 1, 8, 32, 32, 8, 1 clients (each level twice: the machine is shared, the better
    run is the less disturbed), noting the server's RSS after each; then, given `offline_folder`, 32 clients in
    turns with the same backend offline (alternating); measures GET /health at 32 clients; stops it with
    SIGTERM."""
    proc = start(command, port)
    counts = {1: 500, 8: 150, 32: 80}
    longest = sorted(texts, key=len)[-32:]
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        conn.request("POST", "/v1/predict", json.dumps({"inputs": longest}), {"Content-Type": "application/json"})
        conn.getresponse().read()
        conn.close()
        load(port, texts, 32, 10)
        rss = {"after warm-up": rss_mib(proc.pid)}
        levels = []
        for k, clients in enumerate((*LEVELS, *reversed(LEVELS))):
            levels.append(load(port, texts, clients, counts[clients] // (10 if quick else 1)))
            rss[f"after {clients} clients{' again' if k >= len(LEVELS) else ''}"] = rss_mib(proc.pid)
        turns = alternating(offline_folder, port, texts, quick) if offline_folder is not None else None
        rss["at the end"] = rss_mib(proc.pid)
        http_only = load(port, None, 32, 100 // (10 if quick else 1))
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    return {"levels": levels, "alternating": turns, "http_only": http_only, "rss_mib": rss,
            "exit_code": proc.returncode, "stderr": err[-500:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts: a check that it runs, not figures")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "serve-bench")
    parser.add_argument("--out", type=Path, help=f"results JSON (default {RESULTS.relative_to(ROOT)}, full runs only)")
    parser.add_argument("--forward-only", action="store_true",
                        help="re-measure only the forward passes, into the existing results")
    args = parser.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    texts, _ = sentences("dev")
    if args.forward_only:
        out = args.out or RESULTS
        results = json.loads(out.read_text())
        results["models"]["minilm"]["forward only"] = forward_only(models(args.work, args.quick)["minilm"], texts, args.quick)
        results["forward only measured"] = datetime.date.today().isoformat()
        out.write_text(json.dumps(results, indent=1) + "\n")
        print(json.dumps(results["models"]["minilm"]["forward only"], indent=1), file=sys.stderr)
        return 0
    results: dict[str, Any] = {"command": "python -m bench.serve" + (" --quick" if args.quick else ""),
                               "date": datetime.date.today().isoformat(), "machine": machine(), "server": server(),
                               "models": {}}
    for name, folders in models(args.work, args.quick).items():
        print(f"== {name}", file=sys.stderr)
        entry: dict[str, Any] = {"offline": offline(folders["int8"], texts, args.quick)}
        port = free_port()
        entry["bertkit serve (int8 onnxruntime)"] = serve_levels(
            [sys.executable, "-m", "bertkit.cli", "serve", "--model", str(folders["int8"]), "--port", str(port)],
            port, texts, args.quick, offline_folder=folders["int8"])
        entry["offline again"] = offline(folders["int8"], texts, args.quick)  # the machine is shared: before and after
        if name == "minilm":
            port = free_port()
            entry["transformers pipeline, no batching"] = serve_levels(
                [sys.executable, "-m", "bench.hf_server", str(folders["torch"]), str(port)], port, texts, args.quick)
            entry["forward only"] = forward_only(folders, texts, args.quick)
        results["models"][name] = entry
        print(json.dumps(entry, indent=1), file=sys.stderr)
    out = args.out or (None if args.quick else RESULTS)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
