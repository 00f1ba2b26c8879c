"""NER: first-sub-token labels, windows for long sentences, and decoding gold logits back to the gold
entities on real CoNLL-2003 (IOB1 -> BIO) and MSRA (BIOES, characters) sentences."""

from __future__ import annotations

import inspect
import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertkit import BertConfig
from bertkit.config import IGNORE
from bertkit.crf import CRF
from bertkit.errors import BertkitError
from bertkit.heads import MODEL_CLASSES, to_tensors
from bertkit.schemes import allowed_transitions, convert
from bertkit.tasks import Dataset, NERTask, get_task
from bertkit.tasks.ner import NERFeatures, token_windows
from bertkit.tokenizer import Tokenizer


def gold_logits(features: NERFeatures) -> list[np.ndarray]:
    """Gives per-row (1, T, C) logits that pick each labelled token's gold tag."""
    out = []
    for row in features.rows:
        labels = np.asarray(row["labels"])
        logits = np.zeros((1, len(labels), len(features.labels)), np.float32)
        keep = labels != IGNORE
        logits[0, np.flatnonzero(keep), labels[keep]] = 5.0
        out.append(logits)
    return out


@pytest.fixture(scope="module")
def en_tok(shared_data: Path) -> Tokenizer:
    return Tokenizer.from_pretrained(shared_data / "models" / "all-MiniLM-L6-v2")


@pytest.fixture(scope="module")
def tok(vocab: Path) -> Tokenizer:
    """The session's small English vocabulary, for the tests that need a tokenizer but not MiniLM's."""
    return Tokenizer.from_pretrained(vocab)


@pytest.fixture(scope="module")
def zh_tok(shared_data: Path) -> Tokenizer:
    return Tokenizer.from_vocab_file(shared_data / "vocab" / "bert-base-chinese-vocab.txt")


@pytest.fixture(scope="module")
def conll(shared_data: Path, en_tok: Tokenizer):
    task = NERTask()
    train = task.read(shared_data / "conll2003" / "eng.train")
    labels = task.labels(train)
    test = task.read(shared_data / "conll2003" / "eng.testb")
    features = task.featurize(test, en_tok, {label: i for i, label in enumerate(labels)})
    return task, labels, test, features


def test_conll_labels_sit_on_first_subtokens(conll, en_tok: Tokenizer):
    _, labels, test, features = conll
    assert labels == ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    assert features.scheme == "BIO" and features.words_without_tokens == 0
    assert len(features) == len(test) + 1  # one sentence of testb needs two windows of 128
    windowed = np.flatnonzero(np.bincount(features.example_index) > 1)
    for r in range(300):
        if features.example_index[r] in windowed:
            continue
        e = test[features.example_index[r]]
        pieces = [en_tok.encode(w, add_special_tokens=False).ids for w in e.words]
        expected = [IGNORE]
        for piece, tag in zip(pieces, convert(e.tags, "BIO", "IOB1"), strict=True):
            expected += [labels.index(tag)] + [IGNORE] * (len(piece) - 1)  # the tag on the first piece only
        assert features.rows[r]["labels"] == [*expected, IGNORE]
        assert features.rows[r]["input_ids"] == [en_tok.cls_token_id, *itertools.chain(*pieces), en_tok.sep_token_id]


def test_conll_gold_logits_give_back_the_gold_entities(conll):
    task, labels, test, features = conll
    logits = gold_logits(features)
    predictions = task.decode(features, logits)
    scores = task.score(test, predictions)
    assert scores["f1"] == 100.0 and scores["recall"] == 100.0
    assert NERTask(strict=True).score(test, predictions)["f1"] == 100.0
    # every type scores 100 on its gold entities, as many as CoNLL-2003's testb has of each type
    types = ("LOC", "MISC", "ORG", "PER")
    assert {t: scores[f"support/{t}"] for t in types} == {"LOC": 1668, "MISC": 702, "ORG": 1661, "PER": 1617}
    assert {scores[f"{m}/{t}"] for m in ("precision", "recall", "f1") for t in types} == {100.0}
    assert [p.tags for p in predictions] == [convert(list(e.tags), "BIO", "IOB1") for e in test]  # the gold, as BIO
    with_crf = task.decode(features, logits, crf=CRF.for_labels(labels).tag_scores())
    assert [p.tags for p in with_crf] == [p.tags for p in predictions]


def test_msra_bioes_gold_logits_and_long_sentences(shared_data: Path, zh_tok: Tokenizer):
    task = NERTask(scheme="BIOES", strict=True)
    test = task.read(shared_data / "msra_ner" / "test.bio.txt", normalize="NFKC")
    labels = task.labels(test)
    assert labels[:5] == ["O", "B-LOC", "I-LOC", "E-LOC", "S-LOC"]
    features = task.featurize(test, zh_tok, {label: i for i, label in enumerate(labels)})
    assert features.scheme == "BIOES" and len(features) > len(test)  # long sentences became several windows
    predictions = task.decode(features, gold_logits(features))
    scores = task.score(test, predictions)
    assert scores["f1"] == 100.0 and scores["precision"] == 100.0
    assert {t: scores[f"support/{t}"] for t in ("LOC", "ORG", "PER")} == {"LOC": 2886, "ORG": 1331, "PER": 1973}  # MSRA's test
    assert test.scheme == "BIO"
    assert [p.tags for p in predictions] == [convert(list(e.tags), "BIOES", "BIO") for e in test]  # in the training scheme
    longest = max(range(len(test)), key=lambda i: len(test[i].words))
    assert len(test[longest].words) == 2427
    rows = np.flatnonzero(features.example_index == longest)
    assert len(rows) > 20 and all(len(features.rows[r]["input_ids"]) <= 128 for r in rows)
    decided = np.concatenate([features.words[r][features.decides[r]] for r in rows])
    assert sorted(decided.tolist()) == list(range(2427))  # every character decided by exactly one window
    covered = np.concatenate([features.words[r] for r in rows])
    assert len(covered) > 1.5 * 2427  # windows overlap by about half


def test_token_windows_cut_at_word_starts():
    word_starts = np.array([0, 3, 4, 9, 10, 11, 15, 16, 20])
    spans = token_windows(word_starts, 22, budget=8)
    assert spans[0] == (0, 4) and spans[-1][1] == 22
    assert all(b - a <= 8 for a, b in spans)
    assert all(a in word_starts for a, _ in spans)
    assert all(b in word_starts or b == 22 for _, b in spans)
    assert all(a0 < a1 <= b0 < b1 for (a0, b0), (a1, b1) in itertools.pairwise(spans))  # each overlaps or meets the next
    assert token_windows(np.array([0, 30]), 35, budget=8) == [(0, 8), (30, 35)]  # a 30-piece word is cut inside


def test_dev_tag_never_seen_in_training(tmp_path: Path, tok: Tokenizer):
    train, dev = tmp_path / "train.txt", tmp_path / "dev.txt"
    train.write_text("John B-PER\nruns O\n\nParis B-LOC\n")
    dev.write_text("Acme B-ORG\nsells O\n\nMary B-PER\nsells O\nIBM B-ORG\n")
    task = NERTask()
    labels = task.labels(task.read(train))
    with pytest.raises(BertkitError, match=r"dev\.txt line 1: tag 'B-ORG' is not one of \['O', 'B-LOC', 'I-LOC', "
                                           r"'B-PER', 'I-PER'\]"):
        task.featurize(task.read(dev), tok, {label: i for i, label in enumerate(labels)})


def test_predict_maps_entities_to_character_spans(en_tok: Tokenizer, zh_tok: Tokenizer):
    task = NERTask()
    labels = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    label2id = {label: i for i, label in enumerate(labels)}
    text = "  John  Smith visited New-York."
    data = task.inputs_from_texts([text])
    assert data[0].words == ("John", "Smith", "visited", "New-York", ".")  # punctuation split off, as CoNLL's
    features = task.featurize(data, en_tok, label2id)
    assert "labels" not in features.rows[0]
    n = len(features.rows[0]["input_ids"])
    logits = np.zeros((1, n, len(labels)), np.float32)
    wanted = {0: "B-PER", 1: "I-PER", 2: "O", 3: "B-LOC", 4: "O"}
    for pos, word in zip(features.positions[0], features.words[0], strict=True):
        logits[0, pos, label2id[wanted[int(word)]]] = 1
    out = task.prediction_json(task.decode(features, logits)[0])
    assert [(e["type"], e["text"]) for e in out["entities"]] == [("PER", "John  Smith"), ("LOC", "New-York")]
    assert all(text[e["start"] : e["end"]] == e["text"] for e in out["entities"])

    zh = "我在北京２０２４年"
    data = task.inputs_from_texts([zh], normalize="NFKC")
    assert data[0].words[-3:] == ("2", "4", "年") and len(data[0].words) == len(zh)
    features = task.featurize(data, zh_tok, label2id)
    logits = np.zeros((1, len(features.rows[0]["input_ids"]), len(labels)), np.float32)
    logits[0, :, 0] = 1
    logits[0, 3, label2id["B-LOC"]] = logits[0, 4, label2id["I-LOC"]] = 5  # 北 京 at positions 3, 4
    out = task.prediction_json(task.decode(features, logits)[0])
    assert out["entities"] == [{"type": "LOC", "text": "北京", "start": 2, "end": 4, "word_start": 2, "word_end": 4}]


def test_tiny_model_batch(builtin_data: Path, tok: Tokenizer):
    task = NERTask()
    labels = task.labels(task.read(builtin_data / "ner" / "train.txt"))
    dev = task.read(builtin_data / "ner" / "dev.txt")
    few = Dataset(dev.examples[:8], dev.report, scheme=dev.scheme)
    assert {t for e in few for t in e.tags} > {"O"}  # entities among them
    features = task.featurize(few, tok, {label: i for i, label in enumerate(labels)})
    torch.manual_seed(0)
    model = MODEL_CLASSES[task.architecture](BertConfig.preset("tiny", vocab_size=tok.vocab_size).with_labels(labels))
    batch = to_tensors(task.collate(features.rows, tok.pad_token_id))
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "labels"}
    assert set(batch) <= {*inspect.signature(model.forward).parameters, *model.head_type.targets}
    assert (batch["labels"][batch["attention_mask"] == 0] == IGNORE).all()
    with torch.no_grad():
        out = model(**batch)
    # no CRF: the loss is the mean cross-entropy over the labelled positions (each word's first sub-token)
    labelled = batch["labels"] != IGNORE
    assert len(features) == len(few) and labelled.sum(1).tolist() == [len(e.words) for e in few]
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits[labelled], batch["labels"][labelled]))
    predictions = task.decode(features, out)
    # each word's tag is the argmax of its first sub-token's logits
    assert [p.tags for p in predictions] == [[labels[k] for k in out.logits[r][labelled[r]].argmax(-1).tolist()]
                                             for r in range(len(few))]


def test_constrained_decoding_gives_the_most_probable_well_formed_sequence(tok: Tokenizer):
    labels = ["O", "B-PER", "I-PER", "E-PER", "S-PER"]
    start_ok, follow_ok, end_ok = allowed_transitions(labels, "BIOES")
    data = NERTask().inputs_from_texts(["Ann met Bob Lee today"])
    features = NERTask().featurize(data, tok, {label: i for i, label in enumerate(labels)})
    rng = np.random.default_rng(0)
    for trial in range(20):
        logits = rng.normal(size=(1, len(features.rows[0]["input_ids"]), len(labels))).astype(np.float32) * 3
        words = logits[0, features.positions[0]]  # (5, C)
        if trial == 0:
            words[0] = [0, 0, 9, 0, 0]  # argmax alone: I-PER opens the sentence, which BIOES forbids
            logits[0, features.positions[0]] = words
        log_probs = words - np.logaddexp.reduce(words, axis=1, keepdims=True)
        best = max((seq for seq in itertools.product(range(len(labels)), repeat=len(words))
                    if start_ok[seq[0]] and end_ok[seq[-1]] and all(follow_ok[a, b] for a, b in itertools.pairwise(seq))),
                   key=lambda seq: sum(log_probs[i, t] for i, t in enumerate(seq)))
        constrained = NERTask(constrained=True).decode(features, [logits])[0].tags
        assert constrained == [labels[t] for t in best]
        alone = NERTask().decode(features, [logits])[0].tags
        assert alone == [labels[t] for t in words.argmax(1)]
        if trial == 0:
            assert alone[0] == "I-PER" and constrained != alone


def test_a_prediction_matches_an_expected_answer() -> None:
    task = get_task("ner")
    found = {"entities": [{"type": "PER", "text": "Emma"}, {"type": "LOC", "text": "Highbury"},
                          {"type": "PER", "text": "Knightley"}]}
    assert task.matches(found, "LOC: Highbury; PER: Knightley, Emma")
    assert task.show_prediction(found) == "PER: Emma, Knightley; LOC: Highbury" and task.matches(found, task.show_prediction(found))
    assert not task.matches(found, "PER: Emma") and task.matches({"entities": []}, "")
