"""Classification and regression: featurize, collate, a tiny model, decode, score, predict."""

from __future__ import annotations

import inspect
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertkit import BertConfig
from bertkit.errors import BertkitError
from bertkit.heads import MODEL_CLASSES, to_tensors
from bertkit.tasks import ClassifyTask, get_task, split
from bertkit.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def tok(vocab: Path) -> Tokenizer:
    """The session's small English vocabulary: these tests need a tokenizer, not MiniLM's."""
    return Tokenizer.from_pretrained(vocab)


def test_end_to_end_with_a_tiny_model(builtin_data: Path, tok: Tokenizer):
    task = get_task("pair")
    train, dev = task.read(builtin_data / "pair" / "train.tsv"), task.read(builtin_data / "pair" / "dev.tsv")
    labels = task.labels(train)
    assert labels == ["entailment", "not_entailment"]
    label2id = {label: i for i, label in enumerate(labels)}
    torch.manual_seed(0)
    model = MODEL_CLASSES[task.architecture](BertConfig.preset("tiny", vocab_size=tok.vocab_size).with_labels(labels, task.problem_type))
    model.eval()
    assert len(dev) == 400
    dev = split(dev, (0.15,), seed=0)[0]  # 60 examples keep the model's CPU time small
    features = task.featurize(dev, tok, label2id)
    assert len(features) == len(dev)
    outputs = []
    with torch.no_grad():
        for i in range(0, len(features), 32):
            batch = to_tensors(task.collate(features.rows[i : i + 32], tok.pad_token_id))
            assert set(batch) <= {*inspect.signature(model.forward).parameters, *model.head_type.targets}
            assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "labels"}
            out = model(**batch)
            # the loss is the mean cross-entropy of the rows' gold labels, which are the file's, in label-id order
            assert batch["labels"].tolist() == [label2id[e.label] for e in dev.examples[i : i + 32]]
            torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, batch["labels"]))
            outputs.append(out)
    predictions = task.decode(features, outputs)
    logits = torch.cat([o.logits for o in outputs])  # (N, 2), in feature order = file order
    assert [p.example for p in predictions] == list(dev.examples)
    assert [p.label for p in predictions] == [labels[k] for k in logits.argmax(-1).tolist()]
    for p, probs in zip(predictions, logits.softmax(-1).tolist(), strict=True):
        assert list(p.probabilities) == labels and list(p.probabilities.values()) == pytest.approx(probs, abs=1e-6)
    # the scores, recomputed by hand from the predictions: accuracy, F1 of the second class (no label is "1" or
    # "positive"), Matthews correlation
    gold, pred = [e.label for e in dev], [p.label for p in predictions]
    pairs = list(zip(gold, pred, strict=True))
    negative, positive = labels
    tp, tn = sum(g == p == positive for g, p in pairs), sum(g == p == negative for g, p in pairs)
    fp, fn = pred.count(positive) - tp, gold.count(positive) - tp
    denom = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert task.score(dev, predictions) == pytest.approx({
        "accuracy": 100 * (tp + tn) / len(dev), "f1": 100 * 2 * tp / (2 * tp + fp + fn),
        "mcc": 100 * (tp * tn - fp * fn) / denom if denom else 0.0})
    assert task.main_metric == "accuracy"
    out = task.prediction_json(predictions[0])
    assert out == {"text": dev[0].text, "pair": dev[0].pair, "label": predictions[0].label,
                   "probabilities": {k: round(v, 6) for k, v in predictions[0].probabilities.items()}}
    assert sum(out["probabilities"].values()) == pytest.approx(1, abs=1e-5)


def test_rows_are_cls_text_sep_pair_sep_truncated_longest_first(shared_data: Path, tok: Tokenizer):
    task = ClassifyTask(name="pair")
    dev = task.read(shared_data / "rte" / "dev.tsv")
    features = task.featurize(dev, tok, {"0": 0, "1": 1}, max_seq_length=32)
    for row in features.rows:
        ids, types = row["input_ids"], row["token_type_ids"]
        assert len(ids) <= 32 and ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
        first_len = types.index(1) if 1 in types else len(types)
        assert ids[first_len - 1] == tok.sep_token_id  # [SEP] closes the first text
        assert types == [0] * first_len + [1] * (len(ids) - first_len)
    words = " ".join(["word"] * 40)
    pair = task.featurize(task.inputs_from_texts([words], [words + " more"]), tok, {"0": 0}, max_seq_length=32).rows[0]
    assert len(pair["input_ids"]) == 32 and sum(pair["token_type_ids"]) in (14, 15)  # longest first: 15 + 14
    single = ClassifyTask().featurize(ClassifyTask().read(shared_data / "sst2" / "dev.tsv"), tok, {"0": 0, "1": 1})
    assert max(len(r["input_ids"]) for r in single.rows) <= 128
    assert all(sum(r["token_type_ids"]) == 0 for r in single.rows)


def test_collate_pads_dynamically(tok: Tokenizer):
    task = ClassifyTask()
    data = task.inputs_from_texts(["short", "a rather longer sentence than the first one"])
    batch = task.collate(task.featurize(data, tok, {"0": 0, "1": 1}).rows, tok.pad_token_id)
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask"}  # unlabelled: no labels key
    T = batch["input_ids"].shape[1]
    assert int(batch["attention_mask"].sum(1).max()) == T
    assert (batch["input_ids"][0, 3:] == tok.pad_token_id).all() and batch["attention_mask"][0].tolist()[:4] == [1, 1, 1, 0]


def test_perfect_logits_score_100_and_labels_beyond_two(shared_data: Path, tok: Tokenizer):
    task = get_task("pair")
    dev = task.read(shared_data / "ocnli" / "dev.json")
    labels = task.labels(dev)
    assert labels == ["contradiction", "entailment", "neutral"]
    features = task.featurize(dev, tok, {label: i for i, label in enumerate(labels)})
    gold = np.array([r["labels"] for r in features.rows])
    logits = np.eye(3, dtype=np.float32)[gold] * 5
    predictions = task.decode(features, [logits[:1000], logits[1000:]])  # batches in feature order
    assert task.score(dev, predictions) == {"accuracy": 100.0, "mcc": 100.0, "f1": 100.0}


def test_dev_label_never_seen_in_training(tmp_path: Path, tok: Tokenizer):
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence\tlabel\ngood\t1\nmeh\tneutral\n")
    task = ClassifyTask()
    with pytest.raises(BertkitError, match=r"dev\.tsv line 3: label 'neutral' is not one of \['0', '1'\]"):
        task.featurize(task.read(dev), tok, {"0": 0, "1": 1})


def test_regression_labels_and_scores(tmp_path: Path, tok: Tokenizer):
    path = tmp_path / "sts.tsv"
    path.write_text("sentence1\tsentence2\tscore\na man\ta person\t4.5\na cat\ta car\t0.5\na dog\ta puppy\t3.8\n")
    task = ClassifyTask(name="pair", regression=True)
    data = task.read(path)
    assert task.labels(data) == ["score"] and task.problem_type == "regression" and task.main_metric == "pearson"
    features = task.featurize(data, tok, None)
    batch = task.collate(features.rows)
    assert batch["labels"].dtype == np.float32
    predictions = task.decode(features, torch.tensor([[4.0], [1.0], [3.0]]))
    scores = task.score(data, predictions)
    assert scores["pearson"] > 95 and scores["spearman"] == pytest.approx(100)
    assert task.prediction_json(predictions[0])["score"] == pytest.approx(4.0)
    path.write_text("sentence1\tsentence2\tscore\na\tb\thigh\n")
    with pytest.raises(BertkitError, match=r"sts\.tsv line 2: label 'high' is not a number"):
        task.featurize(task.read(path), tok, None)


def test_a_prediction_matches_an_expected_answer() -> None:
    task = get_task("pair")
    assert task.matches({"label": "entailment", "probabilities": {}}, "entailment")
    assert not task.matches({"label": "entailment"}, "not_entailment")
    assert not get_task("pair", regression=True).matches({"score": 4.2}, "4.2")
    labels = get_task("classify", multi_label=True)
    assert labels.matches({"labels": ["food", "sport"]}, "sport, food") and not labels.matches({"labels": ["food"]}, "sport")
