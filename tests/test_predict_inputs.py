"""`predict` and `evaluate` agree with each other and with the files training reads: a line out for every line in
(blank ones answered with an error), pairs and questions from tab-separated lines or JSON lines without extra
flags, English NER words split as CoNLL's tokens (or given with --words), and the same normalization."""

from __future__ import annotations

import io
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from bertkit.cli import main
from bertkit.predict import pipeline
from bertkit.tasks import read_conll, words_of


def predict(capsys, monkeypatch, model: Path, *args: str, stdin: str | None = None) -> list[dict]:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    assert main(["predict", "--model", str(model), *args]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_one_line_out_for_every_line_in(task_models: dict[str, Path], capsys, monkeypatch) -> None:
    rows = predict(capsys, monkeypatch, task_models["classify"], stdin="Call me Ishmael.\n\n   \nEmma was rich.\n")
    assert [r.get("text") for r in rows] == ["Call me Ishmael.", None, None, "Emma was rich."]
    assert rows[1] == {"line": 2, "error": "empty input"} and rows[2] == {"line": 3, "error": "empty input"}
    assert rows[0] == pipeline(task_models["classify"])(["Call me Ishmael."])[0]


def test_pairs_and_questions_from_tab_separated_lines_and_json_lines(task_models: dict[str, Path], tmp_path: Path,
                                                                      capsys, monkeypatch) -> None:
    pairs = [("What's my name?", "My name is Clara."), ("Where do I live?", "I live in Berkeley.")]
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("\n".join(f"{a}\t{b}" for a, b in pairs[:1]) + "\nno tab here\n" + f"{pairs[1][0]}\t{pairs[1][1]}\n")
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text("".join(json.dumps({"sentence1": a, "sentence2": b, "label": "x"}) + "\n" for a, b in pairs))
    expected = pipeline(task_models["pair"])([a for a, _ in pairs], [b for _, b in pairs])
    by_tsv = predict(capsys, monkeypatch, task_models["pair"], "--file", str(tsv))
    assert [by_tsv[0], by_tsv[2]] == expected and by_tsv[1] == {"line": 2, "error": "expected two texts separated by '\\t'"}
    assert predict(capsys, monkeypatch, task_models["pair"], "--file", str(jsonl)) == expected
    assert predict(capsys, monkeypatch, task_models["pair"], stdin=tsv.read_text()) == by_tsv
    # a qa model: question and context, by their SQuAD names
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"question": a, "context": b}) + "\n" for a, b in pairs) + '{"question": "?"}\n')
    got = predict(capsys, monkeypatch, task_models["qa"], "--file", str(questions))
    assert got[:2] == pipeline(task_models["qa"])([a for a, _ in pairs], [b for _, b in pairs])
    assert got[2] == {"line": 3, "error": "no context field"}


def test_english_ner_splits_words_as_conll(task_models: dict[str, Path], capsys, monkeypatch) -> None:
    assert words_of("Emma walked with Mr. Knightley to the U.S. before the rain came.")[0] == (
        "Emma", "walked", "with", "Mr.", "Knightley", "to", "the", "U.S.", "before", "the", "rain", "came", ".")
    assert words_of("Germany's 3-1 win, don't (again)...")[0] == (
        "Germany", "'s", "3-1", "win", ",", "do", "n't", "(", "again", ")", "...")
    row = predict(capsys, monkeypatch, task_models["ner"], "Emma came.")[0]
    assert row["words"] == ["Emma", "came", "."]
    row = predict(capsys, monkeypatch, task_models["ner"], "--words", "Emma came.")[0]
    assert row["words"] == ["Emma", "came."]  # the words as given


def test_conll_sentences_split_back_into_their_tokens(shared_data: Path) -> None:
    # CoNLL-2003's sentences, joined as plain text would write them, split back into the file's own tokens
    def plain(words: tuple[str, ...]) -> str:
        out = ""
        for i, w in enumerate(words):
            glued = re.fullmatch(r"[.,;:!?)\]}%]|'s|'S|n't|'re|'ve|'ll|'d|'m", w) or (i and words[i - 1] in ("(", "[", "$"))
            out += ("" if i == 0 or glued else " ") + w
        return out

    data = read_conll(shared_data / "conll2003" / "eng.testa")
    same = sum(words_of(plain(e.words), "conll")[0] == e.words for e in data)
    assert same / len(data) > 0.9, same / len(data)  # the rest: "1." list numbers, initials run together, ...


def test_evaluate_normalizes_as_training_did(task_models: dict[str, Path], tmp_path: Path, capsys) -> None:
    model = tmp_path / "ner-nfkc"
    shutil.copytree(task_models["ner"], model)
    meta = json.loads((model / "bertkit_task.json").read_text())
    (model / "bertkit_task.json").write_text(json.dumps({**meta, "input_options": {"normalize": "NFKC"}}))
    full, half = tmp_path / "full.txt", tmp_path / "half.txt"
    full.write_text("Ｅｍｍａ B-PER\n２０２４ O\nBerkeley B-LOC\n\n", encoding="utf-8")
    half.write_text("Emma B-PER\n2024 O\nBerkeley B-LOC\n\n", encoding="utf-8")
    scores = []
    for path in (full, half):
        assert main(["evaluate", "--model", str(model), "--data", str(path)]) == 0
        scores.append({k: v for k, v in json.loads(capsys.readouterr().out).items() if k != "file"})
    assert scores[0] == scores[1]
    assert predict_words(model, "Ｅｍｍａ") == ["Emma"]


def predict_words(model: Path, text: str) -> list[str]:
    return pipeline(model)([text])[0]["words"]


@pytest.mark.parametrize("flag", ["--skip-bad-rows", "--columns"])
def test_reader_errors_name_the_command_line_flag(tmp_path: Path, task_models: dict[str, Path], flag: str, capsys) -> None:
    bad = tmp_path / "bad.tsv"
    bad.write_text("sentence\tlabel\nfine\temma\ntoo\tmany\tcolumns\n" if flag == "--skip-bad-rows" else "body\tlabel\nfine\temma\n")
    assert main(["evaluate", "--model", str(task_models["classify"]), "--data", str(bad)]) == 2
    assert flag in capsys.readouterr().err


def test_long_texts_in_sliding_windows(task_models: dict[str, Path], tmp_path: Path) -> None:
    import numpy as np
    import torch

    from bertkit.heads import to_tensors

    model = tmp_path / "sliding"
    shutil.copytree(task_models["classify"], model)
    meta = json.loads((model / "bertkit_task.json").read_text())
    (model / "bertkit_task.json").write_text(json.dumps({**meta, "task_options": {"long": "sliding", "stride": 5,
                                                                                   "max_seq_length": 16}}))
    pipe = pipeline(model)
    text = "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition, seemed to unite."
    ids = pipe.tokenizer.encode_batch([text], add_special_tokens=False)[0].ids
    data = pipe.task.inputs_from_texts([text])
    features = pipe.task.featurize(data, pipe.tokenizer, pipe.label2id)
    windows = [r["input_ids"][1:-1] for r in features.rows]
    # windows of 14 tokens, 5 apart, the last one ending with the text: every token is in one
    assert len(ids) > 14 and all(len(w) == 14 for w in windows)
    assert [w[0] for w in windows[:-1]] == [ids[i] for i in range(0, len(ids) - 14 + 1, 5)] and windows[-1] == ids[-14:]
    assert list(features.example_index) == [0] * len(windows)
    # the prediction averages the windows' logits
    with torch.no_grad():
        logits = pipe.model(**to_tensors(pipe.task.collate(features.rows))).logits.numpy()
    mean = logits.mean(0)
    expected = np.exp(mean - mean.max()) / np.exp(mean - mean.max()).sum()
    assert list(pipe([text])[0]["probabilities"].values()) == pytest.approx(expected.tolist(), abs=1e-5)
    # a short text is one window, as with truncation
    short = "Call me Ishmael."
    assert pipe([short]) == pipeline(task_models["classify"])([short])
