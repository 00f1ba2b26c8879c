"""What pre-training buys in Chinese: a BERT pre-trained by bertkit beside its randomly initialized twin.

    python -m bench.zh_finetune --model runs/pretrain-zh/run/model [--task waimai msra ocnli cmrc] [--out DIR] [--init local|bert]

Both start from the same architecture and vocabulary (the twin is `BertForPreTraining(config)` with
seed 1, given the same initializer as the pre-training started from: `--init`, `local` by default as in
scripts/pretrain_shared.sh) and are fine-tuned by `bertkit.finetune` with the same data, seed and settings:

- waimai_10k: sentiment, a fixed 80/10/10 split (`bertkit.tasks.split`, seed 0): train on
  80%, pick the epoch on 10%, report accuracy on the other 10%.
- MSRA NER: BIOES tags (converted from the file's BIO), trained on train.bio.txt, entity F1 on test.
- OCNLI: 3-way entailment, train.10k.json -> dev accuracy.
- CMRC 2018: span QA, trained on trial.json, F1 and EM on dev.json.

Fine-tuned models stay in OUT/<task>-<init>/model (default runs/zh-finetune) for `bertkit predict`;
results go to bench/results/zh_finetune-INIT.json and print as a Markdown table.
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertkit import settings
from bertkit.finetune import FinetuneSettings, finetune
from bertkit.heads import BertForPreTraining
from bertkit.initialization import INITS, local_attention_init
from bertkit.tasks import read_table, split
from bertkit.tokenizer import Tokenizer

from .common import RESULTS_DIR, SHARED_DATA


@dataclass(frozen=True)
class Job:
    name: str
    task: str
    metric: str
    epochs: int
    batch_size: int = 32
    lr: float = 2e-4
    max_seq_length: int = 128
    options: tuple[tuple[str, Any], ...] = ()


JOBS = {
    "waimai": Job("waimai_10k test accuracy (80/10/10, seed 0)", "classify", "accuracy", epochs=3),
    "msra": Job("MSRA NER test entity F1 (BIOES)", "ner", "f1", epochs=2, options=(("scheme", "BIOES"),)),
    "ocnli": Job("OCNLI dev accuracy", "pair", "accuracy", epochs=3),
    "cmrc": Job("CMRC 2018 dev F1 (trained on trial)", "qa", "f1", epochs=4, batch_size=16, max_seq_length=384),
}


def waimai_split(folder: Path) -> tuple[Path, Path, Path]:
    """waimai_10k.csv cut 80/10/10 by bertkit's seeded split, written back as CSV files."""
    data = read_table(SHARED_DATA / "waimai_10k" / "waimai_10k.csv")
    paths = []
    for name, part in zip(("train", "dev", "test"), split(data, (0.8, 0.1, 0.1), seed=0), strict=True):
        path = folder / f"waimai-{name}.csv"
        with path.open("w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["label", "review"])
            writer.writerows([e.label, e.text] for e in part.examples)
        paths.append(path)
    return paths[0], paths[1], paths[2]


def first_sentences(path: Path, n: int | None, folder: Path) -> Path:
    """The first n blank-line-separated sentences of a CoNLL-style file (all of it when n is None)."""
    if n is None:
        return path
    text = path.read_text(encoding="utf-8").replace("\r\n", "\n")
    out = folder / f"{path.stem}.first{n}{path.suffix}"
    out.write_text("\n\n".join(s for s in text.split("\n\n")[:n] if s.strip()) + "\n", encoding="utf-8")
    return out


def files(name: str, folder: Path, max_train: int | None) -> tuple[Path, Path, Path | None]:
    if name == "waimai":
        return waimai_split(folder)
    if name == "msra":
        train = first_sentences(SHARED_DATA / "msra_ner" / "train.bio.txt", max_train, folder)
        return train, SHARED_DATA / "msra_ner" / "test.bio.txt", None
    if name == "ocnli":
        return SHARED_DATA / "ocnli" / "train.10k.json", SHARED_DATA / "ocnli" / "dev.json", None
    return SHARED_DATA / "cmrc2018" / "trial.json", SHARED_DATA / "cmrc2018" / "dev.json", None


def scratch_twin(model: Path, folder: Path, init: str) -> Path:
    """The same architecture and vocabulary as `model`, randomly initialized (seed 1) as the pre-training began."""
    out = folder / "scratch"
    config = BertForPreTraining.from_pretrained(model).config
    torch.manual_seed(1)
    twin = BertForPreTraining(config)
    if init == "local":
        local_attention_init(twin.bert)
    twin.save_pretrained(out)
    Tokenizer.from_pretrained(model).save_pretrained(out)
    return out


def run(job: Job, model: Path, train: Path, dev: Path, test: Path | None, out: Path, seed: int) -> dict[str, Any]:
    cfg = settings.load(FinetuneSettings, flags={
        "task.name": job.task, "model": model, "data.train": train, "data.dev": dev, "data.test": test, "out": out,
        "train.epochs": job.epochs, "train.batch_size": job.batch_size, "optim.lr": job.lr,
        "task.max_seq_length": job.max_seq_length, "train.seed": seed, "train.device": "cpu", "train.progress": False,
        **{f"task.{k}": v for k, v in job.options},
    })
    t0 = time.perf_counter()
    summary = finetune(cfg)
    scores = summary.get("test") or summary["best"]["dev"]
    return {"scores": scores, "seconds": round(time.perf_counter() - t0, 1), "epochs": job.epochs,
            "batch_size": job.batch_size, "lr": job.lr, "max_seq_length": job.max_seq_length, "seed": seed}


def table(results: dict[str, Any]) -> str:
    lines = ["| task | pre-trained by bertkit | random init | gain | time (pre-trained / random) |",
             "|---|---:|---:|---:|---:|"]
    for name, sides in results.items():
        job, p, s = JOBS[name], sides.get("pretrained"), sides.get("scratch")
        if p and s:
            a, b = p["scores"][job.metric], s["scores"][job.metric]
            lines.append(f"| {job.name} | {a:.2f} | {b:.2f} | {a - b:+.2f} | {p['seconds'] / 60:.1f} / {s['seconds'] / 60:.1f} min |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="a model folder from `bertkit pretrain` (RUN/model)")
    parser.add_argument("--task", nargs="+", choices=list(JOBS), default=list(JOBS))
    parser.add_argument("--max-train", type=int, help="MSRA: train on the first N sentences only")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--init", choices=INITS, default="local", help="how the pre-training's model was initialized")
    parser.add_argument("--out", type=Path, default=Path("runs/zh-finetune"), help="where the fine-tuned models go")
    args = parser.parse_args()
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"zh_finetune-{args.init}.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        models = {"pretrained": args.model, "scratch": scratch_twin(args.model, folder, args.init)}
        for name in args.task:
            train, dev, test = files(name, folder, args.max_train)
            for init, model in models.items():
                print(f"== {name} / {init}", flush=True)
                r = run(JOBS[name], model, train, dev, test, args.out / f"{name}-{init}", args.seed)
                r.update(model=str(args.model), init=args.init, train=str(train.name), max_train=args.max_train if name == "msra" else None,
                         date=time.strftime("%Y-%m-%d"))
                results.setdefault(name, {})[init] = r
                path.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
                print(json.dumps(r["scores"]), r["seconds"], "s", flush=True)
    print(table(results))


if __name__ == "__main__":
    main()
