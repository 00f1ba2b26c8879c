"""`python bench/prepare_bench.py [--quick]`: the speed and peak memory of `bertkit prepare`.

Runs `prepare` (dynamic masking, defaults) over ../shared/data/pretrain/en, then over that corpus
repeated 10 times (10 symlinks to it in a temporary folder): MB/s, and the peak memory of the
process and its workers, which should stay flat as the corpus grows (prepare streams). Each run is
a child process whose process tree is sampled from /proc every 50 ms. Then the time
`PretrainingData.example` takes (the data-loading path of training). Prints Markdown on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
CORPUS = DATA / "pretrain" / "en"
VOCAB = DATA / "models" / "all-MiniLM-L6-v2"


def _tree_pss_mb(root: int) -> tuple[float, int]:
    """Gives the proportional set size (PSS: shared pages split among their users, so that forked
    workers sharing the parent's pages are not counted twice) of `root` and all its descendants, in
    MB, and how many processes there are."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue  # the process ended meanwhile
    tree, frontier = {root}, [root]
    while frontier:
        p = frontier.pop()
        children = [c for c, pp in parent.items() if pp == p and c not in tree]
        tree.update(children)
        frontier += children
    kib = 0
    for p in tree:
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                kib += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except (OSError, StopIteration):
            continue
    return kib / 1024, len(tree)


def run_prepare(inputs: list[Path], out: Path, workers: int | None) -> dict:
    """Runs prepare in a child process; gives its meta plus the sampled peak of its process tree."""
    code = ("import json, sys; from pathlib import Path; from bertkit.pretraining import prepare; "
            "a = json.loads(sys.argv[1]); "
            "prepare([Path(p) for p in a['inputs']], a['vocab'], a['out'], workers=a['workers'], progress=False)")  # fmt: skip
    args = json.dumps({"inputs": [str(p) for p in inputs], "vocab": str(VOCAB), "out": str(out), "workers": workers})
    peak = {"mb": 0.0, "processes": 0}
    t0 = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", code, args], cwd=ROOT)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            mb, n = _tree_pss_mb(child.pid)
            if mb > peak["mb"]:
                peak.update(mb=mb, processes=n)
            peak["processes"] = max(peak["processes"], n)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code_ = child.wait()
    wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    if code_ != 0:
        raise SystemExit(f"prepare failed (exit code {code_}) on {inputs}")
    meta = json.loads((out / "meta.json").read_text())
    return {"meta": meta, "wall": wall, "tree_peak_mb": peak["mb"], "processes": peak["processes"]}


def example_speed(out: Path, n: int = 5000) -> dict[str, float]:
    """Gives microseconds per `example()` call over random instances, per masking mode."""
    import numpy as np

    from bertkit.pretraining import PretrainingData, prepare

    results = {}
    configs = {"dynamic": {}, "dynamic, whole words": {"whole_word_masking": True}, "static": {"static_masking": True,
                                                                                                "dupe_factor": 1}}  # fmt: skip
    for name, options in configs.items():
        folder = out / name.replace(", ", "_").replace(" ", "_")
        prepare([CORPUS / "brown.txt"], VOCAB, folder, progress=False, **options)
        data = PretrainingData(folder)
        order = np.random.default_rng(0).permutation(len(data))[:n].tolist()
        data.example(0, 0, 0)
        t0 = time.perf_counter()
        for i in order:
            data.example(i, 1, 12345)
        results[name] = (time.perf_counter() - t0) / len(order) * 1e6
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1x and 3x the corpus only (not 10x)")
    parser.add_argument("--workers", type=int, default=None, help="prepare's workers (default: the CPU count)")
    args = parser.parse_args()
    if not CORPUS.is_dir() or not VOCAB.is_dir():
        raise SystemExit(f"needs {CORPUS} and {VOCAB}")
    repeats = (1, 3) if args.quick else (1, 3, 10)
    rows = []
    with tempfile.TemporaryDirectory(prefix="prepare_bench_") as tmp:
        tmp_path = Path(tmp)
        for r in repeats:
            copies = tmp_path / f"copies{r}"
            copies.mkdir()
            for k in range(r):
                (copies / f"en{k}").symlink_to(CORPUS, target_is_directory=True)
            label = f"pretrain/en ({r}x)"
            print(f"prepare_bench: {label} ...", file=sys.stderr)
            rows.append((label, run_prepare([copies], tmp_path / f"out{r}", args.workers)))
        speeds = example_speed(tmp_path / "speed")

    print("| corpus | text MB | wall s | MB/s | instances (train + eval) | peak PSS, all processes | "
          "peak RSS, main | peak RSS, largest worker |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, r in rows:
        m = r["meta"]
        mb = m["read"]["bytes"] / 1e6
        n = m["counts"]["instances"]
        peak = m["timings"]["peak_rss_mb"]
        print(f"| {label} | {mb:.1f} | {r['wall']:.1f} | {mb / r['wall']:.2f} | {n['train'] + n['eval']:,} | "
              f"{r['tree_peak_mb']:.0f} MB ({r['processes']} processes) | {peak['main']:.0f} MB | "
              f"{peak['largest_worker']:.0f} MB |")  # fmt: skip
    workers = rows[0][1]["meta"]["timings"]["workers"]
    print(f"\nWall time includes starting Python and importing bertkit (torch) in the child; {workers} worker "
          f"process(es), {os.cpu_count()} CPU(s). Main and largest worker: resident high-water marks (getrusage); "
          "about 245 MB of each is Python, torch (imported by `bertkit`) and the tokenizer, shared between the "
          "forked workers and their parent. All processes: the largest sum of proportional set sizes (shared pages "
          "counted once) over the process tree, sampled every 50 ms; it creeps up in longer runs as copy-on-write "
          "unshares the parent's pages in the workers, up to the sum of the processes' sizes.\n")
    print("| `PretrainingData.example` (Brown, max_seq_length 128) | µs per call |")
    print("|---|---:|")
    for name, us in speeds.items():
        print(f"| {name} | {us:.1f} |")


if __name__ == "__main__":
    main()
