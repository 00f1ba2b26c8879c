"""Behaviour fingerprint for refactors: what `prepare` writes, and the losses and weights of a few steps of
pre-training and of every fine-tuning family, through the command line only (so it survives internal moves).

    python scripts/fingerprint.py --out before.json        # on the commit before a refactor
    python scripts/fingerprint.py --out after.json         # after it
    python scripts/fingerprint.py --compare before.json after.json

A refactor that claims "behaviour unchanged" shows the two files equal: byte-identical prepared shards, and
the same losses to the bit and the same weights after each run. Built-in demo data only; about 2 minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "src" / "bertkit" / "data"


def bertkit(*args: str | Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    proc = subprocess.run([sys.executable, "-m", "bertkit", *map(str, args)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"bertkit {' '.join(map(str, args))} failed:\n{proc.stderr[-3000:]}")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def folder_hashes(folder: Path, work: Path) -> dict[str, str]:
    """Each file's hash; a JSON file's without its timings, with the temporary folder's path made "<work>"."""
    hashes = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.suffix == ".json":
            meta = json.loads(p.read_text(encoding="utf-8").replace(str(work), "<work>"))
            meta.pop("timings", None)
            hashes[str(p.relative_to(folder))] = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]
        elif p.is_file():
            hashes[str(p.relative_to(folder))] = sha(p)
    return hashes


def losses(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    timing = ("tokens_per_s", "seconds", "s_per_step", "examples_per_s", "elapsed")
    return [{k: v for k, v in r.items() if k not in timing and not k.endswith("_per_s")} for r in rows]


def head(path: Path, out: Path, n: int) -> Path:
    """The first n examples of a task file (table rows, CoNLL sentences, SQuAD paragraphs' questions)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(text)
        kept, count = [], 0
        for article in data["data"]:
            paras = []
            for p in article["paragraphs"]:
                if count < n:
                    paras.append(p)
                    count += len(p["qas"])
            if paras:
                kept.append({**article, "paragraphs": paras})
        sample = json.dumps({**data, "data": kept}, ensure_ascii=False)
    elif path.suffix == ".txt":
        sample = "\n\n".join(text.split("\n\n")[:n]) + "\n"
    else:
        sample = "".join(text.splitlines(keepends=True)[: n + 1])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(sample, encoding="utf-8")
    return out


def fingerprint(work: Path) -> dict:
    result: dict = {}
    src = DATA / "en"
    corpus = sorted((src / "pretrain").glob("*.txt*"))
    bertkit("vocab", "--input", *corpus, "--vocab-size", "2000", "--out", work / "vocab")
    result["vocab"] = folder_hashes(work / "vocab", work)
    bertkit("prepare", "--input", *corpus, "--vocab", work / "vocab", "--out", work / "data", "--max-seq-length", "64",
            "--seed", "7", "--eval-fraction", "0.02", "--workers", "2")
    result["prepare"] = folder_hashes(work / "data", work)
    bertkit("prepare", "--input", DATA / "zh" / "pretrain", "--vocab", work / "vocab", "--out", work / "data-wwm",
            "--max-seq-length", "64", "--whole-word-masking", "--static-masking", "--dupe-factor", "2", "--lang", "zh",
            "--workers", "1")
    result["prepare_zh_wwm_static"] = folder_hashes(work / "data-wwm", work)
    bertkit("pretrain", "--data", work / "data", "--out", work / "pre", "--steps", "6", "--batch-size", "8",
            "--device", "cpu", "log.every=1", "log.eval_every=3", "data.eval_batches=2", "log.progress=false",
            "model.init=local", "checkpoint.every=3")
    result["pretrain"] = {"log": losses(work / "pre"), "weights": sha(work / "pre" / "model" / "model.safetensors")}
    base = work / "pre" / "model"

    def tune(name: str, task: str, family: str, *extra: str, n: int = 48) -> None:
        ext = {"classify": "tsv", "pair": "tsv", "qa": "json", "ner": "txt"}[family]
        train = head(src / family / f"train.{ext}", work / "sample" / family / f"train.{ext}", n)
        dev = head(src / family / f"dev.{ext}", work / "sample" / family / f"dev.{ext}", n // 2)
        out = work / "ft" / name
        bertkit("finetune", "--task", task, "--model", base, "--train", train, "--dev", dev, "--out", out,
                "--epochs", "2", "--batch-size", "8", "--lr", "1e-3", "--device", "cpu", "train.progress=false", *extra)
        results = json.loads((out / "results.json").read_text())
        for r in results["runs"]:
            r.pop("seconds", None)
        results["best"].pop("seconds", None)
        result[f"finetune {name}"] = {"log": losses(out / "run"), "results": results,
                                      "weights": sha(out / "model" / "model.safetensors")}

    tune("classify", "classify", "classify")
    tune("classify sliding", "classify", "classify", "--long", "sliding", "--max-seq-length", "16")
    tune("classify weighted", "classify", "classify", "--class-weights", "auto", "--metric", "f1")
    tune("pair", "pair", "pair", "--eval-every", "4", "--accumulation", "2")
    tune("qa", "qa", "qa", "--max-seq-length", "96", "--doc-stride", "32")
    tune("ner", "ner", "ner", "--scheme", "BIOES")
    tune("ner crf", "ner", "ner", "--crf")
    tune("ner constrained", "ner", "ner", "--constrained")
    # multi-label: the classify file's labels as one-element lists, some with a second label
    rows = (src / "classify" / "train.tsv").read_text(encoding="utf-8").splitlines()[1:49]
    ml = work / "sample" / "ml" / "train.jsonl"
    ml.parent.mkdir(parents=True, exist_ok=True)
    ml.write_text("".join(json.dumps({"text": r.split("\t")[0], "labels": [r.split("\t")[1], *(["long"] if len(r) > 120 else [])]})
                          + "\n" for r in rows), encoding="utf-8")
    out = work / "ft" / "multilabel"
    bertkit("finetune", "--task", "classify", "--multi-label", "--tune-thresholds", "--model", base, "--train", ml,
            "--dev", ml, "--out", out, "--epochs", "2", "--batch-size", "8", "--lr", "1e-3", "--device", "cpu",
            "train.progress=false")
    result["finetune multilabel"] = {"log": losses(out / "run"), "weights": sha(out / "model" / "model.safetensors"),
                                     "task": json.loads((out / "model" / "bertkit_task.json").read_text())["task_options"]}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the fingerprint here (JSON)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        a, b = (json.loads(p.read_text()) for p in args.compare)
        diffs = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        for k in diffs:
            print(f"differs: {k}")
        print(f"{len(set(a) | set(b)) - len(diffs)} of {len(set(a) | set(b))} parts identical")
        sys.exit(1 if diffs else 0)
    with tempfile.TemporaryDirectory() as tmp:
        result = fingerprint(Path(tmp))
    text = json.dumps(result, indent=1, sort_keys=True)
    if args.out:
        args.out.write_text(text + "\n")
    print(f"{len(result)} parts fingerprinted" + (f": {args.out}" if args.out else ""))


if __name__ == "__main__":
    main()
