"""Multi-label classification and class weights: the formats, the metrics against scikit-learn, the loss
against transformers', a tiny model trained end to end that transformers loads, and thresholds."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers
from sklearn.metrics import f1_score
from sklearn.preprocessing import MultiLabelBinarizer

import bertkit
from bertkit import BertConfig, settings
from bertkit.cli import main
from bertkit.finetune import FinetuneSettings, TaskObjective, class_weights, finetune
from bertkit.predict import pipeline
from bertkit.tasks import get_task, tune_thresholds
from bertkit.tasks.metrics import multilabel_scores
from bertkit.tokenizer import Tokenizer

TOPICS = {"sport": ["match", "goal", "team"], "money": ["bank", "price", "market"], "food": ["bread", "soup", "cheese"]}


def topics_file(path: Path, n: int, seed: int) -> Path:
    """JSON lines a tiny model learns in seconds: each topic present when one of its words is (5% flipped)."""
    rng = random.Random(seed)
    filler = ["the", "a", "was", "is", "very", "and", "but", "it", "of", "today"]
    with path.open("w", encoding="utf-8") as f:
        for _ in range(n):
            topics = [t for t in TOPICS if rng.random() < 0.4]
            words = rng.choices(filler, k=rng.randint(3, 8)) + [rng.choice(TOPICS[t]) for t in topics]
            rng.shuffle(words)
            gold = [t for t in TOPICS if (t in topics) != (rng.random() < 0.05)]
            f.write(json.dumps({"text": " ".join(words), "labels": gold}) + "\n")
    return path


def test_labels_from_json_lists_and_joined_cells(tmp_path: Path) -> None:
    task = get_task("classify", multi_label=True)
    (tmp_path / "a.jsonl").write_text('{"text": "x", "labels": ["b", "a"]}\n{"text": "y", "labels": []}\n')
    (tmp_path / "a.tsv").write_text("text\tlabel\nx\tb, a\ny\t\nz\t-\n")
    (tmp_path / "b.csv").write_text("text,label\nx,b|a\n")
    by_json = task.read(tmp_path / "a.jsonl")
    by_tsv = task.read(tmp_path / "a.tsv")
    assert [e.label for e in by_json] == [("b", "a"), ()] == [e.label for e in by_tsv]  # "-": no gold, skipped
    assert by_tsv.report.total_skipped == 1 and task.labels(by_tsv) == ["a", "b"]
    assert [e.label for e in task.read(tmp_path / "b.csv", label_sep="|")] == [("b", "a")]
    # the single-label task says what to do with a list
    single = get_task("classify")
    with pytest.raises(bertkit.BertkitError, match=r"a\.jsonl line 1: the label is a list \['b', 'a'\]: multi-label "
                                                   r"data; fine-tune it with --multi-label"):
        single.labels(single.read(tmp_path / "a.jsonl"))


def test_metrics_match_scikit_learn() -> None:
    rng = np.random.default_rng(0)
    labels = ["a", "b", "c", "d"]
    gold = [frozenset(x for x in labels if rng.random() < 0.4) for _ in range(200)]
    pred = [frozenset(x for x in labels if (x in g) != (rng.random() < 0.2)) for g in gold]
    pred = [p - {"d"} for p in pred]  # a label never predicted
    ours = multilabel_scores(gold, pred, labels)
    binarize = MultiLabelBinarizer(classes=labels).fit([labels])
    y, p = binarize.transform(gold), binarize.transform(pred)
    assert ours["micro_f1"] == pytest.approx(100 * f1_score(y, p, average="micro"))
    assert ours["macro_f1"] == pytest.approx(100 * f1_score(y, p, average="macro", zero_division=0))
    assert ours["subset_accuracy"] == pytest.approx(100 * np.mean([g == q for g, q in zip(gold, pred, strict=True)]))


def test_loss_and_logits_match_transformers_multi_label(tmp_path: Path) -> None:
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, num_labels=3, problem_type="multi_label_classification")
    torch.manual_seed(0)
    transformers.BertForSequenceClassification(cfg).save_pretrained(tmp_path / "hf")  # a hub checkpoint of that type
    theirs = transformers.BertForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    ours = bertkit.BertForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    batch = {"input_ids": torch.randint(5, 100, (4, 9)), "attention_mask": torch.ones(4, 9, dtype=torch.long),
             "labels": torch.tensor([[1, 0, 1], [0, 0, 0], [1, 1, 1], [0, 1, 0]], dtype=torch.float32)}
    batch["attention_mask"][2, 6:] = 0
    a, b = ours(**batch), theirs(**batch)
    torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(a.loss, b.loss, atol=1e-6, rtol=0)


@pytest.mark.slow
def test_multi_label_trains_loads_in_transformers_and_predicts(tmp_path: Path, tiny_model: Path, capsys) -> None:
    train, dev = topics_file(tmp_path / "train.jsonl", 512, 0), topics_file(tmp_path / "dev.jsonl", 96, 1)
    out = tmp_path / "out"
    cfg = settings.load(FinetuneSettings, flags={
        "model": tiny_model, "out": out, "data.train": train, "data.dev": dev, "task.multi_label": True,
        "task.tune_thresholds": True, "train.epochs": 6, "train.batch_size": 16, "optim.lr": 1e-3, "train.progress": False})
    summary = finetune(cfg)
    assert summary["metric"] == "micro_f1" and summary["labels"] == ["food", "money", "sport"]
    assert summary["best"]["dev"]["micro_f1"] > 80  # it learned the topic words
    model_dir = out / "model"
    config = json.loads((model_dir / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification"
    pipe = pipeline(model_dir)
    texts = ["the match and the bank", "soup today", "it was very"]
    theirs = transformers.BertForSequenceClassification.from_pretrained(model_dir).eval()
    batch = pipe.tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        probs = torch.sigmoid(theirs(**batch).logits).numpy()
    thresholds = pipe.meta["task_options"]["thresholds"]
    assert set(thresholds) == {"food", "money", "sport"} and all(0.05 <= t <= 0.95 for t in thresholds.values())
    for p, row in zip(pipe(texts), probs, strict=True):  # every label whose probability reaches its threshold
        assert list(p["probabilities"].values()) == pytest.approx(row.tolist(), abs=1e-5)
        assert p["labels"] == [n for n, q in zip(summary["labels"], row, strict=True) if q >= thresholds[n]]
    # evaluate gives the tuned scores fine-tuning reported
    assert main(["evaluate", "--model", str(model_dir), "--data", str(dev)]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert {k: scores[k] for k in summary["best"]["dev_tuned"]} == pytest.approx(summary["best"]["dev_tuned"])
    assert main(["predict", "--model", str(model_dir), "soup and cheese"]) == 0
    assert json.loads(capsys.readouterr().out)["labels"] == ["food"]


def test_tuned_thresholds_take_each_labels_best_f1() -> None:
    probs = np.array([[0.9, 0.3], [0.6, 0.02], [0.4, 0.01], [0.2, 0.06]])
    gold = [frozenset({"a", "b"}), frozenset({"a"}), frozenset(), frozenset({"b"})]
    t = tune_thresholds(gold, probs, ["a", "b"])
    assert t["a"] == 0.5  # 0.45..0.6 all separate a perfectly: the one nearest 0.5
    assert t["b"] == 0.05  # only 0.05 finds both b's and nothing else


def test_class_weights(tmp_path: Path, tiny_model: Path, capsys) -> None:
    task = get_task("classify")
    (tmp_path / "t.tsv").write_text("text\tlabel\n" + "".join(f"x{i}\t{'b' if i % 4 else 'a'}\n" for i in range(8)))
    data = task.read(tmp_path / "t.tsv")
    tok = Tokenizer.from_pretrained(tiny_model)
    features = task.featurize(data, tok, {"a": 0, "b": 1})
    assert class_weights("auto", features) == pytest.approx([8 / (2 * 2), 8 / (2 * 6)])
    assert class_weights("1,3", features) == [1.0, 3.0]
    with pytest.raises(bertkit.BertkitError, match="expected 2 positive numbers, one for each label in order: a, b"):
        class_weights("1,2,3", features)
    # the objective's sum over its count is PyTorch's weighted mean
    model = bertkit.BertForSequenceClassification(BertConfig.preset("tiny", vocab_size=tok.vocab_size).with_labels(["a", "b"]))
    batch = {k: torch.as_tensor(v) for k, v in task.collate(features.rows).items()}
    objective = TaskObjective(False, torch.tensor([2.0, 0.5]))
    torch.manual_seed(0)
    got = objective(model.eval(), batch)["loss"] / objective.counts(batch)["n"]
    expected = F.cross_entropy(model(**batch).logits, batch["labels"], weight=torch.tensor([2.0, 0.5]))
    assert got.item() == pytest.approx(expected.item(), rel=1e-6)
    code = main(["finetune", "--model", str(tiny_model), "--train", str(tmp_path / "t.tsv"), "--dev",
                 str(tmp_path / "t.tsv"), "--out", str(tmp_path / "o"), "--class-weights", "auto", "--multi-label"])
    assert code == 2 and capsys.readouterr().err.strip() == "bertkit: error: --class-weights is for single-label classify and pair"
