"""Fine-tuning as practitioners run it, measured on real text from all-MiniLM-L6-v2:

    python -m bench.finetune_practice [--only multilabel|squad2]

- multilabel: CoNLL-2003 sentences labelled with the entity types they mention (PER, LOC, ORG, MISC: any
  number, often none), bertkit's `--multi-label` beside transformers' `BertForSequenceClassification` with
  `problem_type="multi_label_classification"` in a plain PyTorch loop, the same token ids, seed and settings,
  both keeping the epoch with the best dev micro-F1 (transformers' Trainer does so with
  load_best_model_at_end). Scored by the same code on eng.testb.
- squad2: a SQuAD 2.0-style set made from SQuAD v1.1 dev (there is no SQuAD 2.0 here): every third question is
  asked of another article's paragraph and marked unanswerable. Articles 0-37 train, 38-42 dev (the null-score
  threshold is searched there, as the official v2 evaluation does), 43-47 test: the test scores with the
  searched threshold beside threshold 0.

Results go to bench/results/finetune_practice.json.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from bertkit import settings
from bertkit.finetune import FinetuneSettings, finetune
from bertkit.predict import evaluate_task, pipeline
from bertkit.tasks import get_task, read_conll
from bertkit.tokenizer import Tokenizer

from .common import RESULTS_DIR, SHARED_DATA, machine
from .finetune_compare import MINILM, hf_epochs, hf_outputs

SETTINGS = {"epochs": 3, "batch_size": 32, "lr": 5e-5, "max_seq_length": 128, "seed": 42}
TYPES = ("LOC", "MISC", "ORG", "PER")


def entity_types_file(conll: Path, out: Path, limit: int | None) -> Path:
    """JSON lines: each sentence of a CoNLL file with the sorted set of entity types it mentions."""
    data = read_conll(conll)
    with out.open("w", encoding="utf-8") as f:
        for e in list(data)[:limit]:
            types = sorted({tag[2:] for tag in e.tags if tag != "O"})
            f.write(json.dumps({"text": " ".join(e.words), "labels": types}) + "\n")
    return out


def multilabel_bertkit(train: Path, dev: Path, test: Path, out: Path) -> dict[str, Any]:
    s = SETTINGS
    cfg = settings.load(FinetuneSettings, flags={
        "task.name": "classify", "task.multi_label": True, "model": MINILM, "data.train": train, "data.dev": dev,
        "data.test": test, "out": out, "train.epochs": s["epochs"], "train.batch_size": s["batch_size"], "optim.lr": s["lr"],
        "task.max_seq_length": s["max_seq_length"], "train.seed": s["seed"], "train.device": "cpu", "train.progress": False})
    t0 = time.perf_counter()
    summary = finetune(cfg)
    return {"dev": summary["best"]["dev"], "epoch": summary["best"]["epoch"], "test": summary["test"],
            "seconds": time.perf_counter() - t0}


def multilabel_transformers(train: Path, dev: Path, test: Path) -> dict[str, Any]:
    import transformers

    s = SETTINGS
    t0 = time.perf_counter()
    tok = Tokenizer.from_pretrained(MINILM)
    task = get_task("classify", multi_label=True, max_seq_length=s["max_seq_length"])
    train_data, dev_data, test_data = task.read(train), task.read(dev), task.read(test)
    labels = task.labels(train_data)
    label2id = {name: i for i, name in enumerate(labels)}
    train_f, dev_f, test_f = (task.featurize(d, tok, label2id) for d in (train_data, dev_data, test_data))
    torch.manual_seed(s["seed"])
    model = transformers.BertForSequenceClassification.from_pretrained(
        MINILM, attn_implementation="sdpa", num_labels=len(labels), id2label=dict(enumerate(labels)),
        label2id=label2id, problem_type="multi_label_classification")
    best: dict[str, Any] | None = None
    for epoch in hf_epochs(model, task, train_f, s["epochs"], s["batch_size"], s["lr"], s["seed"], t0):
        scores = task.score(dev_data, task.decode(dev_f, hf_outputs(model, task, dev_f)))
        print(f"transformers: epoch {epoch}: dev {scores}, {time.perf_counter() - t0:.0f} s", flush=True)
        if best is None or scores["micro_f1"] > best["dev"]["micro_f1"]:
            best = {"dev": scores, "epoch": epoch,
                    "test": task.score(test_data, task.decode(test_f, hf_outputs(model, task, test_f)))}
    assert best is not None
    return {**best, "seconds": time.perf_counter() - t0}


def squad2_files(tmp: Path) -> dict[str, Path]:
    """Train (articles 0-37), dev (38-42) and test (43-47) of SQuAD v1.1 dev, every third question moved to a
    paragraph of another article of the same part and marked unanswerable."""
    articles = json.loads((SHARED_DATA / "squad_v1.1/dev-v1.1.json").read_text(encoding="utf-8"))["data"]
    rng = random.Random(0)
    out = {}
    for name, part in (("train", articles[:38]), ("dev", articles[38:43]), ("test", articles[43:48])):
        data, n = [], 0
        for a, article in enumerate(part):
            others = [p for b, other in enumerate(part) if b != a for p in other["paragraphs"]]
            paragraphs = []
            for para in article["paragraphs"]:
                qas = []
                for qa in para["qas"]:
                    n += 1
                    if n % 3 == 0:
                        paragraphs.append({"context": rng.choice(others)["context"],
                                           "qas": [{**qa, "id": qa["id"] + "-x", "answers": [], "is_impossible": True}]})
                    else:
                        qas.append(qa)
                if qas:
                    paragraphs.append({"context": para["context"], "qas": qas})
            data.append({"title": article["title"], "paragraphs": paragraphs})
        out[name] = tmp / f"squad2-{name}.json"
        out[name].write_text(json.dumps({"version": "v2.0", "data": data}), encoding="utf-8")
    return out


def squad2(tmp: Path) -> dict[str, Any]:
    files = squad2_files(tmp)
    cfg = settings.load(FinetuneSettings, flags={
        "task.name": "qa", "model": MINILM, "data.train": files["train"], "data.dev": files["dev"], "out": tmp / "squad2",
        "train.epochs": 1, "train.batch_size": 32, "optim.lr": 5e-5, "task.max_seq_length": 256, "train.seed": 42,
        "train.device": "cpu", "train.progress": False})
    t0 = time.perf_counter()
    summary = finetune(cfg)
    pipe = pipeline(tmp / "squad2" / "model")
    test = pipe.task.read(files["test"])
    features = pipe.task.featurize(test, pipe.tokenizer, pipe.label2id)
    at_zero = get_task("qa", **{**pipe.meta["task_options"], "null_score_diff_threshold": 0.0})
    return {"threshold": summary["best"]["tuned"]["null_score_diff_threshold"],
            "dev at 0": summary["best"]["dev"], "dev searched": summary["best"]["dev_tuned"],
            "test at 0": evaluate_task(pipe.backend, at_zero, features)[0],
            "test searched": evaluate_task(pipe.backend, pipe.task, features)[0],
            "questions": {"train": len(pipe.task.read(files["train"])), "test": len(test), "test unanswerable": test.impossible},
            "seconds": time.perf_counter() - t0, "settings": {"epochs": 1, "batch_size": 32, "lr": 5e-5, "max_seq_length": 256}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["multilabel", "squad2"])
    parser.add_argument("--train-sentences", type=int, default=6000)
    args = parser.parse_args()
    torch.set_num_threads(2)
    path = RESULTS_DIR / "finetune_practice.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    m = machine()
    meta = {"date": time.strftime("%Y-%m-%d"), "machine": f"{m['cpu']}, {m['cores']} cores",
            "versions": {"torch": m["torch"], "transformers": m["transformers"]}}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if args.only in (None, "multilabel"):
            conll = SHARED_DATA / "conll2003"
            train = entity_types_file(conll / "eng.train", tmp / "train.jsonl", args.train_sentences)
            dev = entity_types_file(conll / "eng.testa", tmp / "dev.jsonl", None)
            test = entity_types_file(conll / "eng.testb", tmp / "test.jsonl", None)
            row = {"settings": {**SETTINGS, "train_sentences": args.train_sentences}, **meta}
            print("== multilabel / bertkit", flush=True)
            row["bertkit"] = multilabel_bertkit(train, dev, test, tmp / "ml")
            print(json.dumps(row["bertkit"]), flush=True)
            print("== multilabel / transformers", flush=True)
            row["transformers"] = multilabel_transformers(train, dev, test)
            print(json.dumps(row["transformers"]), flush=True)
            results["multilabel"] = row
            path.write_text(json.dumps(results, indent=2) + "\n")
        if args.only in (None, "squad2"):
            print("== squad2 / bertkit", flush=True)
            results["squad2"] = {**squad2(tmp), **meta}
            print(json.dumps(results["squad2"]), flush=True)
            path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
