"""Sentence embedders: bertkit's `finetune --task embed` beside sentence-transformers' trainer, on the same model,
data and recipe, scored by one evaluation function.

    python -m bench.embed                                  # squad, mrpc, ocnli: the full run (about 40 min)
    python -m bench.embed --tasks mrpc --limit 256 --dev-limit 300 --out /tmp/embed.json     # a smoke run
    python -m bench.embed --child st --job JOB.json        # one sentence-transformers run (the bench starts it)

Both sides start from all-MiniLM-L6-v2 (shared/data/models; the folder has no modules.json, so
SentenceTransformer builds mean pooling itself, as bertkit's default `--pooling mean`) and train one after the
other, each in a child process, the order flipped from one task to the next:

- bertkit: `python -m bertkit finetune --task embed` on JSON-lines files of the examples;
- sentence-transformers: `SentenceTransformerTrainer` (its default random batch sampler) on a `datasets.Dataset`
  of the same examples, MultipleNegativesRankingLoss or CoSENTLoss (scale 20 both, as bertkit's).

The recipe is the same on both sides: batch size, learning rate, epochs, linear warmup over 10% of the steps then
linear decay, AdamW with weight decay 0.01 (not on biases and LayerNorm) and eps 1e-6 (bertkit's; the trainer's
default is 1e-8), gradient clipping at 1, max_seq_length, seed, fp32, the same torch threads: one by default
(--threads 0: torch's own), since on a shared 2-core machine two OpenMP threads stall whenever another process
takes a core (about three times slower here under load, on both sides). Tasks:

- squad: SQuAD v1.1 dev (the only split here), its 48 articles shuffled with the seed, 80% to train on, 20% to
  evaluate on; (question, paragraph) pairs, MNRL. Dev: each dev question retrieves its paragraph among all the dev
  articles' paragraphs.
- mrpc: MRPC's train file as scored pairs (the 0/1 label as the score), CoSENT; dev: the test file, Spearman (and
  Pearson) of the cosines against the labels, in percent.
- ocnli: Chinese OCNLI, groups (premise, an entailment hypothesis, a contradiction hypothesis of the same premise
  as the hard negative), MNRL. Dev: each dev premise with an entailment hypothesis retrieves its entailment
  hypotheses among every labelled dev hypothesis (neutral and contradiction ones are the distractors). The model
  is English (uncased English vocabulary, with single CJK characters in it): this is a side-by-side comparison of
  two trainers, not a good Chinese embedder. bertkit's own dev file, scored after its epoch, holds the dev groups
  made as the training ones.

Scores: both trained folders and the untrained model are loaded with SentenceTransformer (the folders bertkit
writes load there, with its pooling files) and scored by `score_folder` alone: the texts encoded, then bertkit's
embed-task metrics (NDCG@10, MRR@10, Recall@1/10/100 as trec_eval; Pearson and Spearman in percent).

Times: `train_s` is the training call with its one dev evaluation and the saving of the model: bertkit's run
seconds from its results (its loop, its evaluation after the epoch, its checkpoint and model folder); for
sentence-transformers trainer.train(), the same dev evaluation (score_folder's on the model in memory), and
model.save. `process_s` is each child process's wall clock from start to exit (imports, reading, tokenizing,
loading the model included). The ratio is bertkit / sentence-transformers (< 1: bertkit is faster). The machine
may be shared: each side records how many cores other processes kept busy while it ran (bench.common.CpuMonitor).

Needs `datasets` and `accelerate` beside sentence-transformers (its trainer imports them).
Results: bench/results/embed.json and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import RESULTS_DIR, ROOT, SHARED_DATA, CpuMonitor, machine

MODEL = SHARED_DATA / "models" / "all-MiniLM-L6-v2"
BK, ST = "bertkit", "sentence_transformers"


@dataclass(frozen=True)
class Spec:
    """One task: its loss, the metric the table reports, its max_seq_length and default number of training examples."""

    name: str
    title: str
    loss: str  # mnrl | cosent
    metric: str
    max_seq_length: int
    train_size: int  # default cap on training examples (--limit overrides)


SPECS = {
    "squad": Spec("squad", "SQuAD v1.1 question -> paragraph (EN)", "mnrl", "ndcg@10", 256, 1600),
    "mrpc": Spec("mrpc", "MRPC test (EN), scored pairs", "cosent", "spearman", 128, 4076),
    "ocnli": Spec("ocnli", "OCNLI premise -> entailment (ZH)", "mnrl", "ndcg@10", 128, 2071),
}


@dataclass(frozen=True)
class Example:
    anchor: str
    positive: str
    negatives: tuple[str, ...] = ()
    score: float | None = None

    @property
    def texts(self) -> tuple[str, ...]:
        return (self.anchor, self.positive, *self.negatives)


@dataclass
class TaskData:
    train: list[Example]  # all the training examples, in the seed's order (the run takes the first N)
    dev_file: list[Example]  # bertkit's --dev file
    dev_eval: list[Example]  # what score_folder scores (may hold a variable number of negatives)
    about: dict[str, Any] = field(default_factory=dict)


def _clean(text: str) -> str:
    return " ".join(text.split())


# ---- the data -------------------------------------------------------------------------------------------------

def squad(seed: int) -> TaskData:
    articles = json.loads((SHARED_DATA / "squad_v1.1" / "dev-v1.1.json").read_text(encoding="utf-8"))["data"]
    order = list(range(len(articles)))
    random.Random(seed).shuffle(order)
    cut = round(0.8 * len(articles))

    def pairs(ids: list[int]) -> list[Example]:
        return [Example(_clean(q["question"]), _clean(p["context"]))
                for i in ids for p in articles[i]["paragraphs"] for q in p["qas"]]

    train, dev = pairs(order[:cut]), pairs(order[cut:])
    random.Random(seed).shuffle(train)
    return TaskData(train, dev, dev, {"train_articles": cut, "dev_articles": len(articles) - cut,
                                      "dev_queries": len(dev), "dev_paragraphs": len({e.positive for e in dev})})


def mrpc(seed: int) -> TaskData:
    def read(name: str) -> list[Example]:
        lines = (SHARED_DATA / "mrpc" / name).read_text(encoding="utf-8-sig").splitlines()[1:]
        rows = [line.split("\t") for line in lines if line.strip()]
        return [Example(_clean(r[3]), _clean(r[4]), score=float(r[0])) for r in rows]

    train, test = read("msr_paraphrase_train.txt"), read("msr_paraphrase_test.txt")
    random.Random(seed).shuffle(train)
    return TaskData(train, test, test, {"dev": "msr_paraphrase_test.txt", "dev_pairs": len(test)})


def _ocnli_premises(name: str) -> dict[str, dict[str, list[str]]]:
    premises: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for line in (SHARED_DATA / "ocnli" / name).read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["label"] in ("entailment", "neutral", "contradiction"):  # "-": no gold label
            premises[_clean(row["sentence1"])][row["label"]].append(_clean(row["sentence2"]))
    return premises


def _ocnli_groups(premises: dict[str, dict[str, list[str]]]) -> list[Example]:
    """A group per entailment hypothesis of a premise that has a contradiction one (taken in turn)."""
    groups = []
    for premise, by_label in premises.items():
        contradictions = by_label["contradiction"]
        if contradictions:
            groups += [Example(premise, h, (contradictions[i % len(contradictions)],))
                       for i, h in enumerate(by_label["entailment"])]
    return groups


def ocnli(seed: int) -> TaskData:
    train = _ocnli_groups(_ocnli_premises("train.10k.json"))
    random.Random(seed).shuffle(train)
    dev_premises = _ocnli_premises("dev.json")
    dev_eval = [Example(p, h, tuple(by["neutral"] + by["contradiction"]))
                for p, by in dev_premises.items() for h in by["entailment"]]
    corpus = {h for by in dev_premises.values() for hs in by.values() for h in hs}
    return TaskData(train, _ocnli_groups(dev_premises), dev_eval,
                    {"dev_queries": len({e.anchor for e in dev_eval}), "dev_hypotheses": len(corpus)})


READERS = {"squad": squad, "mrpc": mrpc, "ocnli": ocnli}


def write_jsonl(path: Path, examples: list[Example]) -> None:
    """bertkit's JSON-lines shapes: {anchor, positive[, negatives]} or {text, pair, score}."""
    with path.open("w", encoding="utf-8") as f:
        for e in examples:
            row: dict[str, Any] = ({"text": e.anchor, "pair": e.positive, "score": e.score} if e.score is not None else
                                   {"anchor": e.anchor, "positive": e.positive,
                                    **({"negatives": list(e.negatives)} if e.negatives else {})})
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_jsonl(path: Path) -> list[Example]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        out.append(Example(r["text"], r["pair"], score=float(r["score"])) if "score" in r else
                   Example(r["anchor"], r["positive"], tuple(r.get("negatives", ()))))
    return out


# ---- one evaluation for every model ---------------------------------------------------------------------------

def score_model(model: Any, loss: str, examples: list[Example], batch_size: int = 64) -> dict[str, float]:
    """Encodes every distinct text with a SentenceTransformer and scores as bertkit's embed task: Pearson/Spearman
    of the pairs' cosines (scored pairs), else each anchor's positives retrieved among all positives and negatives."""
    import numpy as np

    from bertkit.tasks.base import Dataset, ReadReport
    from bertkit.tasks.embed import EmbedPrediction, EmbedTask
    from bertkit.tasks.groups import TextGroup

    texts = list(dict.fromkeys(t for e in examples for t in e.texts))
    vectors = model.encode(texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
    row = {t: i for i, t in enumerate(texts)}
    groups = [TextGroup(e.anchor, e.positive, e.negatives, e.score) for e in examples]
    predictions = [EmbedPrediction(g, np.stack([vectors[row[t]] for t in e.texts]))
                   for g, e in zip(groups, examples, strict=True)]
    return EmbedTask(loss=loss).score(Dataset(groups, ReadReport("<bench>", kept=len(groups))), predictions)


def score_folder(folder: Path, loss: str, examples: list[Example], max_seq_length: int) -> dict[str, float]:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    model.max_seq_length = max_seq_length
    return score_model(model, loss, examples)


# ---- the sentence-transformers side (a child process) -----------------------------------------------------------

def st_child(job: dict[str, Any]) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss, MultipleNegativesRankingLoss

    if job["threads"]:
        torch.set_num_threads(job["threads"])
    train = read_jsonl(Path(job["train"]))
    if job["loss"] == "cosent":
        columns = {"sentence1": [e.anchor for e in train], "sentence2": [e.positive for e in train],
                   "score": [float(e.score) for e in train]}  # type: ignore[arg-type]
    else:
        columns = {"anchor": [e.anchor for e in train], "positive": [e.positive for e in train]}
        for k in range(len(train[0].negatives)):
            columns[f"negative_{k + 1}"] = [e.negatives[k] for e in train]
    dataset = Dataset.from_dict(columns)
    model = SentenceTransformer(str(MODEL), device="cpu")
    model.max_seq_length = job["max_seq_length"]
    loss = CoSENTLoss(model, scale=20.0) if job["loss"] == "cosent" else MultipleNegativesRankingLoss(model, scale=20.0)
    out = Path(job["out"])
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out / "trainer"), num_train_epochs=job["epochs"], per_device_train_batch_size=job["batch_size"],
        learning_rate=job["lr"], lr_scheduler_type="linear", warmup_steps=0.1, weight_decay=0.01, adam_epsilon=1e-6,
        max_grad_norm=1.0, seed=job["seed"], data_seed=job["seed"], save_strategy="no", eval_strategy="no",
        logging_steps=max(1, len(train) // job["batch_size"] // 10), report_to="none", use_cpu=True,
        disable_tqdm=True, dataloader_drop_last=False)
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
    t0 = time.perf_counter()
    metrics = trainer.train().metrics
    t1 = time.perf_counter()
    dev = score_model(model, job["loss"], read_jsonl(Path(job["dev"])))  # bertkit's evaluation after its epoch
    t2 = time.perf_counter()
    model.save(str(out / "model"))
    t3 = time.perf_counter()
    return {"train_s": t3 - t0, "fit_s": t1 - t0, "eval_s": t2 - t1, "save_s": t3 - t2, "own_dev": dev,
            "steps": metrics.get("global_step", trainer.state.global_step), "train_loss": metrics.get("train_loss"),
            "threads": torch.get_num_threads()}


def in_batch_duplicates(train_file: Path, loss: str, max_seq_length: int, batch_size: int, seed: int) -> dict:
    """The share of training examples that meet their own anchor or positive text again in another example of the
    same batch (a false in-batch negative for MNRL): in bertkit's first epoch (bertkit.finetune.EpochBatches, which
    sorts rows by length within pools of 50 batches) and in random batches of the same size (the trainer's default
    sampler)."""
    import numpy as np

    from bertkit import Tokenizer
    from bertkit.finetune import EpochBatches
    from bertkit.tasks.embed import EmbedTask
    from bertkit.tasks.groups import regroup

    task = EmbedTask(loss=loss, max_seq_length=max_seq_length)
    data = task.read(train_file)
    features = regroup(task.featurize(data, Tokenizer.from_pretrained(MODEL), None))

    def share(batches: list[np.ndarray]) -> float:
        hit = 0
        for b in batches:
            anchors = [data[i].anchor for i in b]
            positives = [data[i].positive for i in b]
            hit += sum(anchors.count(a) > 1 or positives.count(p) > 1 for a, p in zip(anchors, positives, strict=True))
        return 100 * hit / len(data)

    order = np.random.default_rng(seed).permutation(len(data))
    return {"bertkit_batches_pct": share(EpochBatches(features, None, batch_size, seed).batches_of(0)),
            "random_batches_pct": share([order[i : i + batch_size] for i in range(0, len(order), batch_size)])}


# ---- the two sides, from the parent ---------------------------------------------------------------------------

def _run(cmd: list[str], log: Path, env: dict[str, str]) -> tuple[float, float, float, str]:
    """Runs a child; gives its wall seconds, the cores other processes kept busy meanwhile, its CPU seconds, its
    stdout."""
    monitor, before = CpuMonitor(), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with log.open("w") as err:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    seconds = time.perf_counter() - t0
    others, after = monitor.others(), resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({proc.returncode}):\n{log.read_text()[-3000:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return seconds, others, cpu, proc.stdout


def run_bertkit(spec: Spec, files: dict[str, Path], out: Path, args: argparse.Namespace, env: dict[str, str]) -> dict:
    cmd = [sys.executable, "-m", "bertkit", "finetune", "--task", "embed", "--model", str(MODEL),
           "--train", str(files["train"]), "--dev", str(files["dev"]), "--out", str(out), "--loss", spec.loss,
           "--batch-size", str(args.batch_size), "--lr", str(args.lr), "--epochs", str(args.epochs),
           "--seed", str(args.seed), "--max-seq-length", str(spec.max_seq_length), "--warmup", "0.1",
           "--device", "cpu", "optim.weight_decay=0.01"]
    seconds, others, cpu, _ = _run(cmd, out.parent / f"{out.name}.log", env)
    results = json.loads((out / "results.json").read_text())
    best = results["best"]
    shown = shlex.join(["bertkit", *cmd[3:]]).replace(str(out.parent.parent), "WORK")  # WORK: the data folder
    return {"train_s": best["seconds"], "process_s": seconds, "process_cpu_s": cpu, "others_cores": others,
            "own_dev": best["dev"], "steps": best.get("step"),
            "command": shown.replace(str(MODEL), "../shared/data/models/all-MiniLM-L6-v2")}


def run_st(spec: Spec, files: dict[str, Path], out: Path, args: argparse.Namespace, env: dict[str, str]) -> dict:
    job = {"train": str(files["train"]), "dev": str(files["dev"]), "out": str(out), "loss": spec.loss,
           "batch_size": args.batch_size, "lr": args.lr, "epochs": args.epochs, "seed": args.seed,
           "max_seq_length": spec.max_seq_length, "threads": args.threads}
    out.mkdir(parents=True, exist_ok=True)
    (out / "job.json").write_text(json.dumps(job))
    cmd = [sys.executable, "-m", "bench.embed", "--child", "st", "--job", str(out / "job.json")]
    seconds, others, cpu, stdout = _run(cmd, out.parent / f"{out.name}.log", env)
    result = json.loads(stdout.strip().splitlines()[-1])
    return {**result, "process_s": seconds, "process_cpu_s": cpu, "others_cores": others}


def run_task(spec: Spec, args: argparse.Namespace, work: Path, order: tuple[str, str]) -> dict[str, Any]:
    data = READERS[spec.name](args.seed)
    n = args.limit or spec.train_size
    train = data.train[:n]
    dev_eval = data.dev_eval[: args.dev_limit] if args.dev_limit else data.dev_eval
    dev_file = data.dev_file[: args.dev_limit] if args.dev_limit else data.dev_file
    folder = work / spec.name
    folder.mkdir(parents=True, exist_ok=True)
    files = {"train": folder / "train.jsonl", "dev": folder / "dev.jsonl"}
    write_jsonl(files["train"], train)
    write_jsonl(files["dev"], dev_file)
    env = os.environ.copy()
    if args.threads:
        env.update(OMP_NUM_THREADS=str(args.threads), RAYON_NUM_THREADS=str(args.threads))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    sides: dict[str, dict[str, Any]] = {}
    for side in order:
        print(f"== {spec.name}: {side} on {len(train)} training examples", flush=True)
        runner = run_bertkit if side == BK else run_st
        sides[side] = runner(spec, files, folder / side, args, env)
        print(f"   {side}: {sides[side]['train_s']:.0f} s training ({sides[side]['process_s']:.0f} s in all), "
              f"own dev {json.dumps({k: round(v, 2) for k, v in sides[side]['own_dev'].items()})}", flush=True)
    print(f"== {spec.name}: scoring the untrained model and both trained folders", flush=True)
    untrained = score_folder(MODEL, spec.loss, dev_eval, spec.max_seq_length)
    for side in sides:
        sides[side]["dev"] = score_folder(folder / side / "model", spec.loss, dev_eval, spec.max_seq_length)
    bk, st = sides[BK], sides[ST]
    duplicates = (in_batch_duplicates(files["train"], spec.loss, spec.max_seq_length, args.batch_size, args.seed)
                  if spec.loss == "mnrl" else None)
    return {
        "title": spec.title, "loss": spec.loss, "metric": spec.metric, "max_seq_length": spec.max_seq_length,
        "train_examples": len(train), "available_train_examples": len(data.train), "dev_examples": len(dev_eval),
        "about": data.about, "order": list(order), "untrained": untrained, BK: bk, ST: st,
        "difference": bk["dev"][spec.metric] - st["dev"][spec.metric],
        "time_ratio": bk["train_s"] / st["train_s"], "process_ratio": bk["process_s"] / st["process_s"],
        "in_batch_duplicates": duplicates,
    }


# ---- the report -----------------------------------------------------------------------------------------------

def markdown(result: dict[str, Any]) -> str:
    lines = ["| task | train examples | metric | untrained | bertkit | sentence-transformers | bertkit - ST | "
             "bertkit time | ST time | time bertkit / ST | process bertkit / ST |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in result["tasks"].items():
        m, bk, st = r["metric"], r[BK], r[ST]
        lines.append(f"| {name}: {r['title']} | {r['train_examples']} | {m} | {r['untrained'][m]:.2f} | "
                     f"{bk['dev'][m]:.2f} | {st['dev'][m]:.2f} | {r['difference']:+.2f} | {bk['train_s']:.0f} s | "
                     f"{st['train_s']:.0f} s | {r['time_ratio']:.2f}x | {r['process_ratio']:.2f}x |")
    return "\n".join(lines)


def targets(result: dict[str, Any]) -> dict[str, Any]:
    tasks = result["tasks"]
    close = {n: abs(r["difference"]) <= 0.5 for n, r in tasks.items()}
    fast = {n: r["time_ratio"] <= 0.5 for n, r in tasks.items()}
    return {"dev within 0.5 point of sentence-transformers": {"per_task": close, "met": all(close.values())},
            "bertkit training time <= 0.5x sentence-transformers'": {"per_task": fast, "met": all(fast.values())}}


def versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in ("bertkit", "sentence-transformers", "datasets", "accelerate"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.embed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=list(SPECS), default=list(SPECS))
    parser.add_argument("--limit", type=int, default=0, help="training examples a task, at most (default: the task's own)")
    parser.add_argument("--dev-limit", type=int, default=0, help="dev examples scored, at most (default: all)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=1, help="torch threads on both sides (0: torch's default)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "embed.json")
    parser.add_argument("--keep", type=Path, help="keep the data files and trained folders here")
    parser.add_argument("--child", choices=["st"], help=argparse.SUPPRESS)
    parser.add_argument("--job", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(st_child(json.loads(args.job.read_text()))), flush=True)
        return
    command = shlex.join(["python", "-m", "bench.embed", *sys.argv[1:]])
    result: dict[str, Any] = {
        "command": command, "date": time.strftime("%Y-%m-%d"), "machine": machine(), "versions": versions(),
        "recipe": {"model": "all-MiniLM-L6-v2", "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
                   "warmup": "10% linear, then linear decay", "weight_decay": 0.01, "adam_eps": 1e-6,
                   "max_grad_norm": 1.0, "seed": args.seed, "precision": "fp32", "pooling": "mean",
                   "scale": 20.0, "threads": args.threads or "torch's default on both sides"},
        "note": "Both sides train one after the other in child processes of one run, the order flipped from task to "
                "task, on a machine shared with other jobs (others_cores: how many cores other processes kept busy "
                "while a side ran). Dev scores: both trained folders and the untrained model loaded in "
                "SentenceTransformer and scored by the same function (bertkit's embed metrics). OCNLI is Chinese "
                "and all-MiniLM-L6-v2 English: a side-by-side comparison only.",
        "tasks": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        for i, name in enumerate(args.tasks):
            order = (BK, ST) if i % 2 == 0 else (ST, BK)
            result["tasks"][name] = run_task(SPECS[name], args, work, order)
            result["targets"] = targets(result)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(markdown(result))
    for target, verdict in result["targets"].items():
        print(f"- {target}: {'met' if verdict['met'] else 'not met'} ({verdict['per_task']})")


if __name__ == "__main__":
    main()
