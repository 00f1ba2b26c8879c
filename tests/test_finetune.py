"""Fine-tuning end to end on tiny models: every task family trains, saves in Hugging Face's layout,
reloads in transformers, predicts and evaluates through the pipeline and the CLI."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch
import transformers

import bertkit
from bertkit import BertConfig
from bertkit.cli import main
from bertkit.finetune import FinetuneSettings, finetune
from bertkit.predict import pipeline
from bertkit.tokenizer import Tokenizer

MINILM = "models/all-MiniLM-L6-v2"


@pytest.fixture
def tiny_model(tmp_path: Path, shared_data: Path) -> Path:
    """A randomly initialized tiny BERT with the MiniLM vocabulary, saved like a pre-trained model."""
    tok = Tokenizer.from_pretrained(shared_data / MINILM)
    torch.manual_seed(0)
    model = bertkit.BertForPreTraining(BertConfig.preset("tiny", vocab_size=tok.vocab_size))
    out = tmp_path / "tiny"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def head(src: Path, dst: Path, lines: int) -> Path:
    dst.write_text("".join(src.read_text(encoding="utf-8").splitlines(keepends=True)[:lines]), encoding="utf-8")
    return dst


def test_classify_trains_saves_and_loads_in_transformers(tmp_path: Path, shared_data: Path, tiny_model: Path) -> None:
    train = head(shared_data / "sst2/train.tsv", tmp_path / "train.tsv", 257)
    dev = head(shared_data / "sst2/dev.tsv", tmp_path / "dev.tsv", 65)
    cfg = FinetuneSettings(task="classify", model=tiny_model, train=train, dev=dev, out=tmp_path / "out",
                           epochs=2, batch_size=32, lr=1e-3, progress=False)
    summary = finetune(cfg)
    assert summary["best"]["dev"]["accuracy"] > 0 and summary["labels"] == ["0", "1"]
    model_dir = tmp_path / "out" / "model"
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", "bertkit_task.json"):
        assert (model_dir / name).is_file(), name
    config = json.loads((model_dir / "config.json").read_text())
    assert config["id2label"] == {"0": "0", "1": "1"} and config["architectures"] == ["BertForSequenceClassification"]

    # transformers loads it and agrees with our logits
    hf = transformers.BertForSequenceClassification.from_pretrained(model_dir).eval()
    pipe = pipeline(model_dir)
    batch = pipe.tokenizer(["a gorgeous film", "dull , dull , dull"], padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = pipe.model(**batch).logits
        theirs = hf(**batch).logits
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)

    # the training loss went down
    log = [json.loads(line) for line in (tmp_path / "out" / "run" / "log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in log if "loss" in r]
    assert losses[-1] < losses[0]

    preds = pipe(["a gorgeous film", "dull , dull , dull"])
    assert [set(p) for p in preds] == [{"text", "label", "probabilities"}] * 2
    assert abs(sum(preds[0]["probabilities"].values()) - 1) < 1e-4
    scores = pipe.evaluate(dev)
    assert scores["accuracy"] == pytest.approx(summary["best"]["dev"]["accuracy"])


def test_grid_keeps_the_best_run(tmp_path: Path, shared_data: Path, tiny_model: Path) -> None:
    train = head(shared_data / "rte/train.tsv", tmp_path / "train.tsv", 65)
    dev = head(shared_data / "rte/dev.tsv", tmp_path / "dev.tsv", 33)
    cfg = FinetuneSettings(task="pair", model=tiny_model, train=train, dev=dev, out=tmp_path / "out",
                           grid={"batch_size": (16,), "lr": (1e-3, 1e-4), "epochs": (1,)}, progress=False)
    summary = finetune(cfg)
    assert len(summary["runs"]) == 2
    best = max(summary["runs"], key=lambda r: r["dev"]["accuracy"])
    assert summary["best"]["lr"] == best["lr"]
    table = (tmp_path / "out" / "grid.md").read_text()
    assert table.count("\n") == 4 and "| 16 | 0.001 | 1 |" in table


def test_ner_and_qa_train_and_predict(tmp_path: Path, shared_data: Path, tiny_model: Path) -> None:
    conll = (shared_data / "conll2003/eng.train").read_text(encoding="utf-8").split("\n\n")
    (tmp_path / "ner.txt").write_text("\n\n".join(conll[:80]) + "\n", encoding="utf-8")
    cfg = FinetuneSettings(task="ner", model=tiny_model, train=tmp_path / "ner.txt", dev=tmp_path / "ner.txt",
                           out=tmp_path / "ner", epochs=1, batch_size=16, lr=1e-3, progress=False,
                           task_options={"constrained": True})
    summary = finetune(cfg)
    assert "f1" in summary["best"]["dev"]
    ner = pipeline(tmp_path / "ner" / "model")
    assert ner.task.constrained  # stored with the model
    pred = ner(["John lives in Berlin ."])[0]
    assert pred["words"] == ["John", "lives", "in", "Berlin", "."] and len(pred["tags"]) == 5
    assert all(not (b.startswith("I-") and a[2:] != b[2:]) for a, b in itertools.pairwise(["O", *pred["tags"]]))  # well-formed BIO

    squad = json.loads((shared_data / "squad_v1.1/dev-v1.1.json").read_text(encoding="utf-8"))
    squad["data"] = [dict(a, paragraphs=a["paragraphs"][:4]) for a in squad["data"][:2]]
    (tmp_path / "squad.json").write_text(json.dumps(squad), encoding="utf-8")
    cfg = FinetuneSettings(task="qa", model=tiny_model, train=tmp_path / "squad.json", dev=tmp_path / "squad.json",
                           out=tmp_path / "qa", epochs=1, batch_size=16, lr=1e-3, max_seq_length=128, progress=False)
    summary = finetune(cfg)
    assert {"exact_match", "f1"} <= set(summary["best"]["dev"])
    context = "My name is Clara and I live in Berkeley."
    answer = pipeline(tmp_path / "qa" / "model")(["What's my name?"], [context])[0]
    assert answer["answer"] == context[answer["start"] : answer["end"]]


def test_cli_predict_and_evaluate(tmp_path: Path, shared_data: Path, tiny_model: Path, capsys) -> None:
    train = head(shared_data / "sst2/train.tsv", tmp_path / "train.tsv", 33)
    code = main(["finetune", "--task", "classify", "--model", str(tiny_model), "--train", str(train), "--dev", str(train),
                 "--out", str(tmp_path / "out"), "--epochs", "1", "--batch-size", "16"])
    assert code == 0
    capsys.readouterr()
    assert main(["predict", "--model", str(tmp_path / "out" / "model"), "fine", "awful"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == ["fine", "awful"]
    assert main(["evaluate", "--model", str(tmp_path / "out" / "model"), "--data", str(train)]) == 0
    assert "accuracy" in json.loads(capsys.readouterr().out)


def test_wrong_model_kind_and_missing_files(tmp_path: Path, tiny_model: Path, capsys) -> None:
    assert main(["predict", "--model", str(tiny_model), "hello"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "was not fine-tuned by `bertkit finetune`" in err
    assert main(["finetune", "--task", "classify", "--model", str(tiny_model), "--train", str(tmp_path / "nope.tsv"),
                 "--dev", str(tmp_path / "nope.tsv"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nope.tsv" in err


def test_ner_with_crf_saves_loads_and_decodes(tmp_path: Path, shared_data: Path, tiny_model: Path) -> None:
    conll = (shared_data / "conll2003/eng.train").read_text(encoding="utf-8").split("\n\n")
    (tmp_path / "ner.txt").write_text("\n\n".join(conll[:40]) + "\n", encoding="utf-8")
    cfg = FinetuneSettings(task="ner", model=tiny_model, train=tmp_path / "ner.txt", dev=tmp_path / "ner.txt",
                           out=tmp_path / "ner", epochs=1, batch_size=16, lr=1e-3, crf=True, progress=False)
    finetune(cfg)
    model_dir = tmp_path / "ner" / "model"
    model = bertkit.BertForTokenClassification.from_pretrained(model_dir)
    assert model.crf is not None and model.load_report.newly_initialized == []
    # transformers loads the tagger too (the CRF weights are extra there, the emissions the same)
    hf = transformers.BertForTokenClassification.from_pretrained(model_dir).eval()
    batch = Tokenizer.from_pretrained(model_dir)(["EU rejects German call"], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(**batch).logits, hf(**batch).logits, atol=1e-5, rtol=0)
    pred = pipeline(model_dir)(["EU rejects German call to boycott British lamb ."])[0]
    assert len(pred["tags"]) == 9
    assert all(not t.startswith("I-") or prev[2:] == t[2:] for prev, t in zip(["O", *pred["tags"]], pred["tags"], strict=False)), pred["tags"]
