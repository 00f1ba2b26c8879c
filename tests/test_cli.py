"""The command line: --help everywhere, and bad input as one line on stderr with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import bertkit
from bertkit import BertConfig
from bertkit.cli import build_parser, main

COMMANDS = [
    "demo", "tokenize", "vocab", "prepare", "pretrain", "finetune", "evaluate", "predict", "plot", "info",
    "export", "serve", "fill-mask", "embed", "attention", "mask",
]


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(capsys, *args: str) -> str:
    code, _, err = run(capsys, *args)
    assert code == 2, err
    assert err.strip().count("\n") == 0 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "bertkit", command, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "usage: bertkit " + command in proc.stdout


def test_every_command_is_listed() -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert sorted(sub.choices) == sorted(COMMANDS)


def test_the_command_reference_is_up_to_date() -> None:
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(root / "scripts" / "command_reference.py"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    doc = (root / "docs" / "commands.md").read_text(encoding="utf-8")
    for command in COMMANDS:
        assert f"## `bertkit {command}`" in doc
    assert "| `--multi-label` |" in doc and "| `--revision` `REVISION` |" in doc


def test_usage_errors_are_one_line(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["pretrain"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.count("\n") == 0 and "required: --out" in err


def test_tokenize_and_info(tmp_path: Path, shared_data: Path, capsys) -> None:
    vocab = shared_data / "models/all-MiniLM-L6-v2"
    code, out, _ = run(capsys, "tokenize", "--vocab", str(vocab), "--offsets", "Hello, Zürich!")
    row = json.loads(out)
    assert code == 0 and row["tokens"] == ["[CLS]", "hello", ",", "zurich", "!", "[SEP]"]
    assert row["offsets"][3] == [7, 13]
    code, out, _ = run(capsys, "info", str(vocab))
    assert code == 0 and "BertModel" in out and "22,713,216" in out


def test_vocab_trains_and_writes(tmp_path: Path, shared_data: Path, capsys) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text((shared_data / "sst2/dev.tsv").read_text(encoding="utf-8"), encoding="utf-8")
    code, out, _ = run(capsys, "vocab", "--input", str(corpus), "--vocab-size", "500", "--out", str(tmp_path / "v"))
    assert code == 0 and out.strip() == f"wrote {tmp_path / 'v' / 'vocab.txt'} (500 tokens, uncased)"
    tok = bertkit.Tokenizer.from_pretrained(tmp_path / "v")  # vocab.txt and tokenizer_config.json
    assert tok.vocab_size == 500 and tok.do_lower_case
    # the command's vocabulary is the library's, trained on the same lines, id for id
    assert tok.vocab == bertkit.Tokenizer.train(corpus.read_text(encoding="utf-8").splitlines(), 500).vocab


def test_bad_vocab_files(tmp_path: Path, capsys) -> None:
    (tmp_path / "vocab.txt").write_text("[PAD]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
    err = one_line_error(capsys, "tokenize", "--vocab", str(tmp_path), "hi")
    assert "[UNK]" in err and "vocab.txt" in err
    err = one_line_error(capsys, "tokenize", "--vocab", str(tmp_path / "missing"), "hi")
    assert "missing" in err


def test_bad_model_folders(tmp_path: Path, capsys) -> None:
    err = one_line_error(capsys, "info", str(tmp_path / "nothing"))
    assert "no such model folder" in err
    err = one_line_error(capsys, "info", str(tmp_path))
    assert "no config.json" in err

    small = tmp_path / "small"
    bertkit.BertModel(BertConfig.preset("tiny", vocab_size=10)).save_pretrained(small)
    (small / "vocab.txt").write_text("".join(f"t{i}\n" for i in range(20)))
    err = one_line_error(capsys, "info", str(small))
    assert "vocab.txt has 20 tokens but config.json vocab_size is 10" in err

    shapes = tmp_path / "shapes"
    bertkit.BertModel(BertConfig.preset("tiny", vocab_size=10)).save_pretrained(shapes)
    cfg = json.loads((shapes / "config.json").read_text())
    (shapes / "config.json").write_text(json.dumps({**cfg, "intermediate_size": 64}))
    err = one_line_error(capsys, "info", str(shapes))
    assert "wrong shape" in err and "layers.0.ffn.up.weight: checkpoint (512, 128), model (64, 128)" in err

    (shapes / "config.json").write_text(json.dumps({**cfg, "hidden_sise": 3}))
    err = one_line_error(capsys, "info", str(shapes))
    assert "unknown key 'hidden_sise'" in err

    (shapes / "config.json").write_text(json.dumps(cfg))
    (shapes / "model.safetensors").write_bytes(b"not a safetensors file")
    err = one_line_error(capsys, "info", str(shapes))
    assert "cannot read the weights" in err


def test_a_file_given_for_a_folder(tmp_path: Path, capsys) -> None:
    f = tmp_path / "file.txt"
    f.write_text("x")
    assert "is a file, not a model folder" in one_line_error(capsys, "info", str(f))
