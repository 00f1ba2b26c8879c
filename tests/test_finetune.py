"""Fine-tuning end to end on tiny models: every task family trains, saves in Hugging Face's layout,
reloads in transformers, predicts and evaluates through the pipeline and the CLI. They train on samples
of the package's built-in task files, so that they run on a fresh clone."""

from __future__ import annotations

import itertools
import json
import re
import string
from collections import Counter
from pathlib import Path

import pytest
import torch
import transformers

import bertkit
from bertkit import settings
from bertkit.cli import main
from bertkit.crf import CRF
from bertkit.finetune import FinetuneSettings, finetune
from bertkit.predict import pipeline
from bertkit.tokenizer import Tokenizer

BOOKS = ["emma", "father_brown", "moby_dick", "persuasion", "sense_and_sensibility", "thursday"]  # built-in classify


def ft_settings(**flags: object) -> FinetuneSettings:
    """Fine-tuning settings from dotted keys (task.name=..., data.train=...), quietly."""
    return settings.load(FinetuneSettings, flags={"train.progress": False, **{k.replace("__", "."): v for k, v in flags.items()}})


def head(src: Path, dst: Path, lines: int) -> Path:
    dst.write_text("".join(src.read_text(encoding="utf-8").splitlines(keepends=True)[:lines]), encoding="utf-8")
    return dst


def accuracy_by_hand(pipe, path: Path) -> float:
    """Gives the percentage of a GLUE TSV's rows (sentence or sentence1 [+ sentence2], label) the pipeline labels right."""
    header, *rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]
    column = {name: i for i, name in enumerate(header)}
    text = column["sentence"] if "sentence" in column else column["sentence1"]
    pairs = [row[column["sentence2"]] for row in rows] if "sentence2" in column else None
    predictions = pipe([row[text] for row in rows], pairs)
    return 100 * sum(p["label"] == row[column["label"]] for p, row in zip(predictions, rows, strict=True)) / len(rows)


def entity_counts(path: Path) -> Counter:
    """Counts a CoNLL file's gold entities by type: one starts at B-X, or at I-X after anything but X (BIO or IOB1)."""
    counts: Counter = Counter()
    for sentence in path.read_text(encoding="utf-8").split("\n\n"):
        previous = "O"
        for line in sentence.splitlines():
            tag = line.split()[-1] if line.strip() and not line.startswith("-DOCSTART-") else "O"
            if tag != "O" and (tag.startswith("B-") or previous[2:] != tag[2:]):
                counts[tag[2:]] += 1
            previous = tag
    return counts


def squad_normalize(text: str) -> str:
    """SQuAD v1.1's answer normalization: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def test_classify_trains_saves_and_loads_in_transformers(tmp_path: Path, builtin_data: Path, tiny_model: Path) -> None:
    train = head(builtin_data / "classify/train.tsv", tmp_path / "train.tsv", 257)
    dev = head(builtin_data / "classify/dev.tsv", tmp_path / "dev.tsv", 65)
    cfg = ft_settings(task__name="classify", model=tiny_model, data__train=train, data__dev=dev, out=tmp_path / "out",
                      train__epochs=2, train__batch_size=32, optim__lr=1e-3)
    summary = finetune(cfg)
    assert summary["labels"] == BOOKS  # every book is in the first 256 rows
    model_dir = tmp_path / "out" / "model"
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", "bertkit_task.json"):
        assert (model_dir / name).is_file(), name
    config = json.loads((model_dir / "config.json").read_text())
    assert config["id2label"] == {str(i): b for i, b in enumerate(BOOKS)}
    assert config["architectures"] == ["BertForSequenceClassification"]

    # transformers loads it and agrees with our logits
    hf = transformers.BertForSequenceClassification.from_pretrained(model_dir).eval()
    pipe = pipeline(model_dir)
    texts = ["The whale rose beside the boat.", "Emma smiled at Mr. Knightley."]
    batch = pipe.tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = pipe.model(**batch).logits
        theirs = hf(**batch).logits
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)

    # the training loss went down
    log = [json.loads(line) for line in (tmp_path / "out" / "run" / "log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in log if "loss" in r]
    assert losses[-1] < losses[0]

    preds = pipe(texts)
    assert [set(p) for p in preds] == [{"text", "label", "probabilities"}] * 2
    for p, probs in zip(preds, ours.softmax(-1).tolist(), strict=True):  # the softmax of the logits above, its argmax
        assert list(p["probabilities"]) == BOOKS and list(p["probabilities"].values()) == pytest.approx(probs, abs=1e-5)
        assert p["label"] == BOOKS[probs.index(max(probs))]
    # the dev scores fine-tuning reported are the saved model's: its best evaluation by accuracy (the first of equals),
    # the pipeline's, and the accuracy of its predictions on the dev file counted by hand
    evals = [{k.removeprefix("eval_"): v for k, v in r.items()} for r in log if "eval_accuracy" in r]
    best = max(evals, key=lambda e: e["accuracy"])
    assert len(evals) == 2 and summary["best"]["step"] == best.pop("step") and summary["best"]["dev"] == best
    scores = pipe.evaluate(dev)
    assert scores["examples"] == 64 and {k: scores[k] for k in summary["best"]["dev"]} == pytest.approx(summary["best"]["dev"])
    assert summary["best"]["dev"]["accuracy"] == pytest.approx(accuracy_by_hand(pipe, dev))


def test_grid_keeps_the_best_run(tmp_path: Path, builtin_data: Path, tiny_model: Path) -> None:
    train = head(builtin_data / "pair/train.tsv", tmp_path / "train.tsv", 65)
    dev = head(builtin_data / "pair/dev.tsv", tmp_path / "dev.tsv", 33)
    cfg = ft_settings(task__name="pair", model=tiny_model, data__train=train, data__dev=dev, out=tmp_path / "out",
                      grid={"batch_size": [16], "lr": [1e-3, 1e-4], "epochs": [1]})
    summary = finetune(cfg)
    assert [(r["batch_size"], r["lr"], r["epochs"]) for r in summary["runs"]] == [(16, 1e-3, 1), (16, 1e-4, 1)]
    best = max(summary["runs"], key=lambda r: r["dev"]["accuracy"])  # the first of equals
    assert summary["best"]["lr"] == best["lr"] and summary["best"]["dev"] == best["dev"]
    # the model kept is that run's: its settings, and its dev scores recomputed from the saved weights
    kept = pipeline(tmp_path / "out" / "model")
    assert kept.meta["settings"]["lr"] == best["lr"]
    assert {k: v for k, v in kept.evaluate(dev).items() if k in best["dev"]} == pytest.approx(best["dev"])
    assert best["dev"]["accuracy"] == pytest.approx(accuracy_by_hand(kept, dev))
    table = (tmp_path / "out" / "grid.md").read_text()
    assert table.count("\n") == 4
    for r in summary["runs"]:  # one row per run: the step it kept, the metric that chose, then the others alphabetically
        assert f"| 16 | {r['lr']:g} | 1 | {r['step']} | {r['dev']['accuracy']:.2f} | {r['dev']['f1']:.2f} | {r['dev']['mcc']:.2f} |" in table


def test_ner_and_qa_train_and_predict(tmp_path: Path, builtin_data: Path, tiny_model: Path) -> None:
    conll = (builtin_data / "ner/train.txt").read_text(encoding="utf-8").split("\n\n")
    (tmp_path / "ner.txt").write_text("\n\n".join(conll[:80]) + "\n", encoding="utf-8")
    cfg = ft_settings(task__name="ner", model=tiny_model, data__train=tmp_path / "ner.txt", data__dev=tmp_path / "ner.txt",
                      out=tmp_path / "ner", train__epochs=1, train__batch_size=16, optim__lr=1e-3, task__constrained=True)
    summary = finetune(cfg)
    ner = pipeline(tmp_path / "ner" / "model")
    assert ner.task.constrained  # stored with the model
    # the reported dev scores are the saved model's, each type's support the gold entities of the file counted by hand
    scores = ner.evaluate(tmp_path / "ner.txt")
    assert {k: v for k, v in scores.items() if k in summary["best"]["dev"]} == pytest.approx(summary["best"]["dev"])
    gold = entity_counts(tmp_path / "ner.txt")
    assert sorted(gold) == ["LOC", "PER"] and {t: scores[f"support/{t}"] for t in gold} == gold
    pred = ner(["John lives in Berlin ."])[0]
    assert pred["words"] == ["John", "lives", "in", "Berlin", "."] and len(pred["tags"]) == 5
    assert all(not (b.startswith("I-") and a[2:] != b[2:]) for a, b in itertools.pairwise(["O", *pred["tags"]]))  # well-formed BIO

    squad = json.loads((builtin_data / "qa/train.json").read_text(encoding="utf-8"))
    squad["data"] = [dict(a, paragraphs=a["paragraphs"][:4]) for a in squad["data"][:5]]  # 73 questions
    (tmp_path / "squad.json").write_text(json.dumps(squad), encoding="utf-8")
    cfg = ft_settings(task__name="qa", model=tiny_model, data__train=tmp_path / "squad.json", data__dev=tmp_path / "squad.json",
                      out=tmp_path / "qa", train__epochs=1, train__batch_size=16, optim__lr=1e-3, task__max_seq_length=128)
    summary = finetune(cfg)
    qa = pipeline(tmp_path / "qa" / "model")
    questions = [(q, p["context"]) for a in squad["data"] for p in a["paragraphs"] for q in p["qas"]]
    assert qa.evaluate(tmp_path / "squad.json") == pytest.approx({"file": str(tmp_path / "squad.json"),
                                                                  "examples": len(questions), "skipped": 0,
                                                                  **summary["best"]["dev"]})
    # exact match by hand: the pipeline's answer to each question equals one of its gold answers, normalized
    answers = qa([q["question"] for q, _ in questions], [context for _, context in questions])
    hits = sum(squad_normalize(a["answer"]) in {squad_normalize(g["text"]) for g in q["answers"]}
               for a, (q, _) in zip(answers, questions, strict=True))
    assert summary["best"]["dev"]["exact_match"] == pytest.approx(100 * hits / len(questions))
    context = "My name is Clara and I live in Berkeley."
    answer = qa(["What's my name?"], [context])[0]
    assert answer["answer"] == context[answer["start"] : answer["end"]]


def test_cli_predict_and_evaluate(tmp_path: Path, builtin_data: Path, tiny_model: Path, capsys) -> None:
    train = head(builtin_data / "classify/train.tsv", tmp_path / "train.tsv", 33)
    code = main(["finetune", "--task", "classify", "--model", str(tiny_model), "--train", str(train), "--dev", str(train),
                 "--out", str(tmp_path / "out"), "--epochs", "1", "--batch-size", "16"])
    assert code == 0
    capsys.readouterr()
    assert main(["predict", "--model", str(tmp_path / "out" / "model"), "fine", "awful"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    pipe = pipeline(tmp_path / "out" / "model")
    assert [r["text"] for r in rows] == ["fine", "awful"] and rows == pipe(["fine", "awful"])
    assert main(["evaluate", "--model", str(tmp_path / "out" / "model"), "--data", str(train)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result == pytest.approx(pipe.evaluate(train)) and result["examples"] == 32
    assert result["accuracy"] == pytest.approx(accuracy_by_hand(pipe, train))


def test_wrong_model_kind_and_missing_files(tmp_path: Path, tiny_model: Path, capsys) -> None:
    assert main(["predict", "--model", str(tiny_model), "hello"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "was not fine-tuned by `bertkit finetune`" in err
    assert main(["finetune", "--task", "classify", "--model", str(tiny_model), "--train", str(tmp_path / "nope.tsv"),
                 "--dev", str(tmp_path / "nope.tsv"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nope.tsv" in err


def test_ner_with_crf_saves_loads_and_decodes(tmp_path: Path, builtin_data: Path, tiny_model: Path) -> None:
    conll = (builtin_data / "ner/train.txt").read_text(encoding="utf-8").split("\n\n")
    (tmp_path / "ner.txt").write_text("\n\n".join(conll[:40]) + "\n", encoding="utf-8")
    types = {line.split()[-1][2:] for s in conll[:40] for line in s.splitlines() if line.strip()} - {""}
    cfg = ft_settings(task__name="ner", model=tiny_model, data__train=tmp_path / "ner.txt", data__dev=tmp_path / "ner.txt",
                      out=tmp_path / "ner", train__epochs=1, train__batch_size=16, optim__lr=1e-3, task__crf=True)
    finetune(cfg)
    model_dir = tmp_path / "ner" / "model"
    model = bertkit.BertForTokenClassification.from_pretrained(model_dir)
    # O, then B- and I- of each type in the file (I-PER too, though these sentences have none)
    assert isinstance(model.crf, CRF) and model.crf.num_tags == model.config.num_labels == 1 + 2 * len(types) == 5
    assert model.load_report.newly_initialized == []
    # transformers loads the tagger too (the CRF weights are extra there, the emissions the same)
    hf = transformers.BertForTokenClassification.from_pretrained(model_dir).eval()
    batch = Tokenizer.from_pretrained(model_dir)(["EU rejects German call"], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(**batch).logits, hf(**batch).logits, atol=1e-5, rtol=0)
    pred = pipeline(model_dir)(["EU rejects German call to boycott British lamb ."])[0]
    assert len(pred["tags"]) == 9
    assert all(not t.startswith("I-") or prev[2:] == t[2:] for prev, t in zip(["O", *pred["tags"]], pred["tags"], strict=False)), pred["tags"]


def test_finetune_reads_a_config_file_then_options_then_overrides(tmp_path: Path, builtin_data: Path, tiny_model: Path,
                                                                  capsys) -> None:
    train = head(builtin_data / "classify/train.tsv", tmp_path / "train.tsv", 33)
    config = tmp_path / "ft.toml"
    config.write_text(f'model = "{tiny_model}"\nout = "{tmp_path / "unused"}"\n'
                      f'[task]\nname = "classify"\n[data]\ntrain = "{train}"\ndev = "{train}"\n'
                      '[optim]\nlr = 3e-4\nweight_decay = 0.0\n[train]\nepochs = 3\nbatch_size = 16\nprogress = false\n')
    out = tmp_path / "out"
    assert main(["finetune", "--config", str(config), "--out", str(out), "--epochs", "1", "train.seed=7"]) == 0
    resolved = json.loads((out / "settings.json").read_text())
    assert resolved["out"] == str(out) and resolved["train"]["epochs"] == 1 and resolved["train"]["seed"] == 7
    assert resolved["optim"]["lr"] == 3e-4 and resolved["optim"]["weight_decay"] == 0.0
    assert resolved["optim"]["warmup"] == 0.1  # fine-tuning's own default, not pre-training's
    saved = json.loads((out / "model" / "bertkit_task.json").read_text())["settings"]
    assert (saved["lr"], saved["epochs"], saved["batch_size"], saved["seed"]) == (3e-4, 1, 16, 7)
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["model"] == str(out / "model")
