"""What exporting costs in accuracy: each task family fine-tuned from all-MiniLM-L6-v2, then scored on held-out
data by PyTorch, by onnxruntime on the fp32 export, and on the int8 one.

    python -m bench.quantize [--task sst2 mrpc conll conll-crf squad] [--work runs/quantize-bench]
    # results: bench/results/quantize.json

What each task is fine-tuned on and scored on: TRAINING and jobs() below; bench/RESULTS.md shows the table.
There is no regression set (STS-B) in the shared data; regression exports through the same classifier graph.
The fine-tuned models are kept in --work, so a rerun only scores.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

from .common import ROOT, SHARED_DATA, machine

MINILM = SHARED_DATA / "models" / "all-MiniLM-L6-v2"
RESULTS = ROOT / "bench" / "results" / "quantize.json"
TRAINING = {  # task: (family, what it is fine-tuned on from MiniLM, what it is scored on)
    "sst2": ("classify", "8,000 SST-2 training sentences, 1 epoch", "SST-2 dev (872), accuracy"),
    "mrpc": ("pair", "MRPC train (4,076 pairs), 3 epochs", "MRPC test (1,725), F1"),
    "conll": ("ner", "CoNLL-2003 eng.train, 1 epoch", "eng.testb (3,453 sentences), entity F1"),
    "conll-crf": ("ner with a CRF", "CoNLL-2003 eng.train, 1 epoch", "eng.testb, entity F1"),
    "squad": ("qa", "SQuAD v1.1 dev articles 0-9 (3,036 questions), 2 epochs, length 256",
              "articles 38-47 (1,988 questions), F1"),
}


def jobs(work: Path) -> dict[str, dict[str, Any]]:
    squad = json.loads((SHARED_DATA / "squad_v1.1" / "dev-v1.1.json").read_text(encoding="utf-8"))
    for name, articles in (("train", squad["data"][:10]), ("eval", squad["data"][38:])):
        (work / f"squad-{name}.json").write_text(json.dumps({"version": "1.1", "data": articles}), encoding="utf-8")
    sst2 = (SHARED_DATA / "sst2" / "train.tsv").read_text(encoding="utf-8").splitlines()
    (work / "sst2-train.tsv").write_text("\n".join(sst2[:8001]) + "\n", encoding="utf-8")
    conll = SHARED_DATA / "conll2003"
    mrpc = SHARED_DATA / "mrpc"
    return {  # task, train, dev (for fine-tuning), held-out file, metric, settings
        "sst2": dict(task="classify", train=work / "sst2-train.tsv", dev=SHARED_DATA / "sst2/dev.tsv",
                     test=SHARED_DATA / "sst2/dev.tsv", metric="accuracy", epochs=1),
        "mrpc": dict(task="pair", train=mrpc / "msr_paraphrase_train.txt", dev=mrpc / "msr_paraphrase_test.txt",
                     test=mrpc / "msr_paraphrase_test.txt", metric="f1", epochs=3),
        "conll": dict(task="ner", train=conll / "eng.train", dev=conll / "eng.testa", test=conll / "eng.testb",
                      metric="f1", epochs=1),
        "conll-crf": dict(task="ner", train=conll / "eng.train", dev=conll / "eng.testa", test=conll / "eng.testb",
                          metric="f1", epochs=1, crf=True),
        "squad": dict(task="qa", train=work / "squad-train.json", dev=work / "squad-eval.json",
                      test=work / "squad-eval.json", metric="f1", epochs=2, max_seq_length=256),
    }  # fmt: skip


def fine_tuned(name: str, job: dict[str, Any], work: Path) -> Path:
    from bertkit import settings
    from bertkit.finetune import FinetuneSettings, finetune

    out = work / name
    if not (out / "model" / "bertkit_task.json").is_file():
        flags = {"task.name": job["task"], "model": MINILM, "data.train": job["train"], "data.dev": job["dev"],
                 "out": out, "train.epochs": job["epochs"], "train.batch_size": 32, "optim.lr": 5e-5,
                 "train.seed": 42, "train.device": "cpu", "train.progress": False}
        if job.get("crf"):
            flags["task.crf"] = True
        if job.get("max_seq_length"):
            flags["task.max_seq_length"] = job["max_seq_length"]
        finetune(settings.load(FinetuneSettings, flags=flags))
    return out / "model"


def scores(name: str, job: dict[str, Any], work: Path) -> dict[str, Any]:
    from bertkit import pipeline
    from bertkit.export import export

    model = fine_tuned(name, job, work)
    row: dict[str, Any] = {"metric": job["metric"], "held out": str(job["test"].relative_to(SHARED_DATA.parent))
                           if job["test"].is_relative_to(SHARED_DATA.parent) else job["test"].name}
    for side, folder in (("pytorch fp32", model), ("onnxruntime fp32", work / f"{name}-fp32"),
                         ("onnxruntime int8", work / f"{name}-int8")):
        if side != "pytorch fp32" and not (folder / "model.onnx").is_file():
            export(model, folder, quantize="int8" if side.endswith("int8") else None)
        t0 = time.perf_counter()
        result = pipeline(folder, batch_size=32).evaluate(job["test"])
        row[side] = {k: v for k, v in result.items() if k in (job["metric"], "exact_match", "accuracy", "f1")}
        row[side]["seconds"] = round(time.perf_counter() - t0, 1)
        if side != "pytorch fp32":
            row[side]["size_mib"] = round((folder / "model.onnx").stat().st_size / 2**20, 1)
            row[side]["max_abs_diff"] = json.loads((folder / "export.json").read_text())["max_abs_diff"]  # vs PyTorch
    metric = job["metric"]
    row["int8 drop"] = row["pytorch fp32"][metric] - row["onnxruntime int8"][metric]
    row["fp32 export drop"] = row["pytorch fp32"][metric] - row["onnxruntime fp32"][metric]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", nargs="+", default=["sst2", "mrpc", "conll", "conll-crf", "squad"])
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "quantize-bench")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    all_jobs = jobs(args.work)
    results = json.loads(args.out.read_text()) if args.out.is_file() else {}
    results.update(command="python -m bench.quantize", date=datetime.date.today().isoformat(), machine=machine())
    results.setdefault("tasks", {})
    for name in args.task:
        print(f"== {name}", file=sys.stderr)
        results["tasks"][name] = scores(name, all_jobs[name], args.work)
        print(json.dumps(results["tasks"][name]), file=sys.stderr)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
