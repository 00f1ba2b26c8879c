"""Fine-tuning from all-MiniLM-L6-v2, bertkit beside transformers, on the same data, seed and settings.

    python -m bench.finetune_compare --task sst2 rte mrpc conll squad [--only bertkit|transformers] [--keep DIR]

bertkit runs `bertkit.finetune.finetune` (its own loop: length-bucketed batches, unpadded encoder,
fused AdamW). transformers runs a plain PyTorch loop over `BertFor*` (sdpa attention): random
batches padded to their longest row, torch's fused AdamW with the same parameter groups, eps,
weight decay and linear warmup/decay, its models' own losses. Both see the same token ids (bertkit's
featurizer; its tokenizer equals Google's id for id) and are scored by the same decoder and metric
code, after every epoch, so the comparison is of training, not of tokenization or scoring.
Results go to bench/results/finetune_compare.json and a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertkit import settings
from bertkit.finetune import FinetuneSettings, finetune
from bertkit.optim import linear_schedule, parameter_groups, warmup_steps_for
from bertkit.tasks import get_task
from bertkit.tokenizer import Tokenizer

from .common import RESULTS_DIR, SHARED_DATA

MINILM = SHARED_DATA / "models" / "all-MiniLM-L6-v2"


@dataclass(frozen=True)
class Job:
    name: str
    task: str
    train: Path
    dev: Path
    metric: str  # what the table reports
    epochs: int = 3
    batch_size: int = 32
    lr: float = 5e-5
    max_seq_length: int = 128
    test: Path | None = None  # scored once with the final model


def jobs(tmp: Path) -> dict[str, Job]:
    return {
        "sst2": Job("SST-2 dev accuracy", "classify", SHARED_DATA / "sst2/train.tsv", SHARED_DATA / "sst2/dev.tsv", "accuracy", epochs=2),
        "rte": Job("RTE dev accuracy", "pair", SHARED_DATA / "rte/train.tsv", SHARED_DATA / "rte/dev.tsv", "accuracy", epochs=3, batch_size=16),
        "mrpc": Job("MRPC test F1", "pair", SHARED_DATA / "mrpc/msr_paraphrase_train.txt", SHARED_DATA / "mrpc/msr_paraphrase_test.txt", "f1"),
        "conll": Job("CoNLL-2003 testb entity F1", "ner", SHARED_DATA / "conll2003/eng.train", SHARED_DATA / "conll2003/eng.testa", "f1",
                     test=SHARED_DATA / "conll2003/eng.testb"),
        "squad": Job("SQuAD v1.1 (articles 0-37 -> 38-47) EM/F1", "qa", tmp / "squad-train.json", tmp / "squad-eval.json",
                     "f1", epochs=1, max_seq_length=384),  # files written by squad_split; 1 epoch: 2 take ~2 h on 2 cores
    }


def squad_split(tmp: Path) -> None:
    """Articles 0-37 of dev-v1.1.json to train on, 38-47 to evaluate on (there is no train split here)."""
    data = json.loads((SHARED_DATA / "squad_v1.1/dev-v1.1.json").read_text(encoding="utf-8"))
    for name, articles in (("train", data["data"][:38]), ("eval", data["data"][38:])):
        path = tmp / f"squad-{name}.json"
        path.write_text(json.dumps({"version": data.get("version", "1.1"), "data": articles}), encoding="utf-8")


# ---- bertkit -----------------------------------------------------------------------------------

def run_bertkit(job: Job, out: Path, seed: int) -> dict[str, Any]:
    cfg = settings.load(FinetuneSettings, flags={
        "task.name": job.task, "model": MINILM, "data.train": job.train, "data.dev": job.dev, "data.test": job.test,
        "out": out, "train.epochs": job.epochs, "train.batch_size": job.batch_size, "optim.lr": job.lr,
        "task.max_seq_length": job.max_seq_length, "train.seed": seed, "train.device": "cpu",
    })
    t0 = time.perf_counter()
    summary = finetune(cfg)
    seconds = time.perf_counter() - t0
    return {"dev": summary["best"]["dev"], "test": summary.get("test"), "seconds": seconds}


# ---- transformers: a plain loop ----------------------------------------------------------------

def hf_model(task: str, labels: list[str]) -> torch.nn.Module:
    import transformers

    cls = {"classify": transformers.BertForSequenceClassification, "pair": transformers.BertForSequenceClassification,
           "qa": transformers.BertForQuestionAnswering, "ner": transformers.BertForTokenClassification}[task]
    kwargs: dict[str, Any] = {"attn_implementation": "sdpa"}
    if task != "qa":
        kwargs.update(num_labels=len(labels), id2label=dict(enumerate(labels)), label2id={name: i for i, name in enumerate(labels)})
    return cls.from_pretrained(MINILM, **kwargs)


@torch.inference_mode()
def hf_outputs(model: torch.nn.Module, task, features, batch_size: int = 64) -> dict[str, np.ndarray]:
    model.eval()
    names = ("start_logits", "end_logits") if task.name == "qa" else ("logits",)
    T = int(features.lengths.max())
    per_token = task.name in ("qa", "ner")
    result: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for lo in range(0, len(features), batch_size):
        batch = task.collate(features.rows[lo : lo + batch_size], features.pad_token_id)
        out = model(**{k: torch.from_numpy(v) for k, v in batch.items() if k in ("input_ids", "token_type_ids", "attention_mask")})
        for n in names:
            x = getattr(out, n).float().numpy()
            if per_token:
                x = np.pad(x, [(0, 0), (0, T - x.shape[1])] + [(0, 0)] * (x.ndim - 2))
            result[n].append(x)
    model.train()
    return {n: np.concatenate(v) for n, v in result.items()}


def hf_epochs(model: torch.nn.Module, task, train_f, epochs: int, batch_size: int, lr: float, seed: int,
              t0: float) -> Iterator[int]:
    """Trains a transformers model the plain way (random batches padded to their longest row, fused AdamW with
    bertkit's parameter groups, eps 1e-6, weight decay 0.01, linear warmup over 10% then decay, clipping at 1),
    yielding the epoch number after each epoch (for scoring), with a progress line every twentieth of the steps."""
    opt = torch.optim.AdamW(parameter_groups(model, 0.01), lr=lr, betas=(0.9, 0.999), eps=1e-6, fused=True)
    steps = math.ceil(len(train_f) / batch_size) * epochs
    sched = linear_schedule(opt, warmup_steps_for(steps, 0.1), steps)
    gen = torch.Generator().manual_seed(seed)
    step = 0
    model.train()
    for epoch in range(1, epochs + 1):
        order = torch.randperm(len(train_f), generator=gen).tolist()
        for lo in range(0, len(order), batch_size):
            batch = task.collate([train_f.rows[i] for i in order[lo : lo + batch_size]], train_f.pad_token_id)
            loss = model(**{k: torch.from_numpy(v) for k, v in batch.items()}).loss  # the tasks collate numpy
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if step % max(1, steps // 20) == 0:
                print(f"transformers: step {step}/{steps}, {time.perf_counter() - t0:.0f} s", flush=True)
        yield epoch


def run_transformers(job: Job, seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    tok = Tokenizer.from_pretrained(MINILM)
    task = get_task(job.task, max_seq_length=job.max_seq_length)
    train_data, dev_data = task.read(job.train), task.read(job.dev)
    labels = task.labels(train_data)
    label2id = {name: i for i, name in enumerate(labels)}
    train_f, dev_f = task.featurize(train_data, tok, label2id), task.featurize(dev_data, tok, label2id)
    torch.manual_seed(seed)
    model = hf_model(job.task, labels)
    history = []
    for _ in hf_epochs(model, task, train_f, job.epochs, job.batch_size, job.lr, seed, t0):
        history.append(task.score(dev_data, task.decode(dev_f, hf_outputs(model, task, dev_f))))
    result: dict[str, Any] = {"dev": history[-1]}
    if job.test is not None:
        test_data = task.read(job.test)
        test_f = task.featurize(test_data, tok, label2id)
        result["test"] = task.score(test_data, task.decode(test_f, hf_outputs(model, task, test_f)))
    result["seconds"] = time.perf_counter() - t0
    return result


# ---- the table -----------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", nargs="+", default=["sst2", "rte", "mrpc", "conll", "squad"])
    parser.add_argument("--only", choices=["bertkit", "transformers"])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--keep", type=Path, help="keep bertkit's fine-tuned runs in this folder (e.g. for `bertkit predict`)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / "finetune_compare.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    with tempfile.TemporaryDirectory() as tmp:
        all_jobs = jobs(Path(tmp))
        if "squad" in args.task:
            squad_split(Path(tmp))
        for name in args.task:
            job = all_jobs[name]
            for side in ("bertkit", "transformers"):
                if args.only and side != args.only:
                    continue
                print(f"== {name} / {side}", flush=True)
                r = run_bertkit(job, (args.keep or Path(tmp)) / f"{name}-bertkit", args.seed) if side == "bertkit" else run_transformers(job, args.seed)
                r.update(epochs=job.epochs, batch_size=job.batch_size, lr=job.lr, max_seq_length=job.max_seq_length,
                         seed=args.seed, date=time.strftime("%Y-%m-%d"), machine=platform.processor() or platform.machine())
                results.setdefault(name, {})[side] = r
                path.write_text(json.dumps(results, indent=2) + "\n")
                print(json.dumps(r), flush=True)
    print(table(results, jobs(Path("/nonexistent"))))


def scores_of(job: Job, result: dict[str, Any]) -> dict[str, float]:
    return result["test"] if job.test is not None else result["dev"]


def shown(job: Job, result: dict[str, Any]) -> str:
    scores = scores_of(job, result)
    return f"{scores['exact_match']:.2f} / {scores['f1']:.2f}" if job.task == "qa" else f"{scores[job.metric]:.2f}"


def table(results: dict[str, Any], all_jobs: dict[str, Job]) -> str:
    lines = ["| task | bertkit | transformers | difference | bertkit time | transformers time | speed-up |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, sides in results.items():
        job, b, h = all_jobs[name], sides.get("bertkit"), sides.get("transformers")
        if not b or not h:
            continue
        diff = scores_of(job, b)[job.metric] - scores_of(job, h)[job.metric]
        lines.append(f"| {job.name} | {shown(job, b)} | {shown(job, h)} | {diff:+.2f} | {b['seconds'] / 60:.1f} min | "
                     f"{h['seconds'] / 60:.1f} min | {h['seconds'] / b['seconds']:.2f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
