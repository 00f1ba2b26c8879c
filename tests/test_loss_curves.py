"""Loss-curve regression: the first 20 losses of a fixed tiny pre-training and of a fixed tiny fine-tuning, against
the values stored in tests/data/loss_curves.json.

Everything is fixed: the text (the package's own demo data), the vocabulary learnt from it, the instances, the
initialization (seeded), the batches, the dropout. Any change to what a step computes (masking, the objective, the
schedule, the optimizer, the model, the data order) moves these numbers; a refactoring that moves none of them
leaves the curves where they were. The tolerance (relative 1e-3) holds across CPUs and thread counts, whose
float sums differ in the last bits, and is far below what any such change does (a percent or more by step 20).

    python tests/test_loss_curves.py     # re-measures and rewrites the stored curves (say why in the commit)
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest
import torch

import bertkit
from bertkit import BertConfig, settings
from bertkit.cli import main
from bertkit.demo.run import data_dir
from bertkit.finetune import FinetuneSettings, finetune
from bertkit.pretraining import prepare
from bertkit.runlog import read_log
from bertkit.tokenizer import Tokenizer

STORED = Path(__file__).parent / "data" / "loss_curves.json"
STEPS = 20
RTOL = 1e-3


def pretraining_curve(root: Path) -> list[float]:
    """The losses of 20 steps of a tiny pre-training on the first 600 paragraphs of the English demo books."""
    text = gzip.decompress((data_dir("en") / "pretrain" / "gutenberg.txt.gz").read_bytes()).decode("utf-8")
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(text.split("\n\n")[:600]) + "\n", encoding="utf-8")
    Tokenizer.train(corpus.read_text(encoding="utf-8").splitlines(), 1000).save_pretrained(root / "vocab")
    prepare([corpus], root / "vocab", root / "data", max_seq_length=64, eval_fraction=0, seed=1, workers=1,
            progress=False)
    run = root / "pretrain"
    assert main(["pretrain", "--data", str(root / "data"), "--out", str(run), "--steps", str(STEPS), "--batch-size", "8",
                 "--lr", "1e-3", "--seed", "3", "model.hidden_size=64", "model.num_attention_heads=2",
                 "model.intermediate_size=128", "log.every=1", "log.eval_every=0", "log.progress=false",
                 "checkpoint.every=0", "data.num_workers=0", "train.device=cpu"]) == 0
    return [r["loss"] for r in read_log(run / "log.jsonl") if "loss" in r]


def finetuning_curve(root: Path) -> list[float]:
    """The losses of 20 steps (5 epochs of 4 batches) fine-tuning a seeded tiny BERT on 64 demo classification rows."""
    tok = Tokenizer.from_pretrained(root / "vocab")
    torch.manual_seed(0)
    bertkit.BertForPreTraining(BertConfig.preset("tiny", vocab_size=tok.vocab_size)).save_pretrained(root / "tiny")
    tok.save_pretrained(root / "tiny")
    rows = (data_dir("en") / "classify" / "train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    train = root / "classify.tsv"
    train.write_text("".join(rows[:65]), encoding="utf-8")  # the header and 64 rows: 4 batches of 16, one log a step
    cfg = settings.load(FinetuneSettings, flags={
        "task.name": "classify", "model": root / "tiny", "data.train": train, "data.dev": train, "out": root / "finetune",
        "train.epochs": 5, "train.batch_size": 16, "optim.lr": 1e-3, "train.seed": 3, "train.device": "cpu",
        "train.progress": False,
    })
    finetune(cfg)
    return [r["loss"] for r in read_log(root / "finetune" / "run" / "log.jsonl") if "loss" in r]


@pytest.fixture(scope="module")
def curves(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[float]]:
    root = tmp_path_factory.mktemp("curves")
    return {"pretraining": pretraining_curve(root), "finetuning": finetuning_curve(root)}


@pytest.mark.parametrize("kind", ["pretraining", "finetuning"])
def test_first_20_losses_are_the_stored_ones(curves: dict[str, list[float]], kind: str) -> None:
    stored = json.loads(STORED.read_text())[kind]
    assert len(curves[kind]) == len(stored) == STEPS
    assert curves[kind] == pytest.approx(stored, rel=RTOL), kind
    assert curves[kind][-1] < curves[kind][0]  # and it is a learning curve, not noise around a constant


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        measured = {"pretraining": pretraining_curve(Path(tmp)), "finetuning": finetuning_curve(Path(tmp))}
    STORED.parent.mkdir(exist_ok=True)
    STORED.write_text(json.dumps(measured, indent=1) + "\n")
    print(f"wrote {STORED}", file=sys.stderr)
