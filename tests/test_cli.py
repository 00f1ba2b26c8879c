"""The command line: --help everywhere, and bad input as one line on stderr with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import bertkit
from bertkit import BertConfig
from bertkit.cli import build_parser, main

COMMANDS = [
    "demo", "tokenize", "vocab", "prepare", "pretrain", "finetune", "evaluate", "predict", "plot", "info",
    "export", "serve", "fill-mask", "embed", "mine", "attention", "mask", "distill",
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
def test_every_command_has_help(command: str, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0 and "usage: bertkit " + command in capsys.readouterr().out


def test_the_installed_entry_point_runs() -> None:
    proc = subprocess.run([sys.executable, "-m", "bertkit", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "usage: bertkit" in proc.stdout and "finetune" in proc.stdout


def test_a_command_builds_only_its_own_options() -> None:
    """`bertkit predict` parses without building (and importing) what pre-training and fine-tuning declare."""
    code = ("import sys; from bertkit.cli import build_parser; build_parser(only='predict').parse_args("
            "['predict', '--model', 'm', 'hi']); print(sorted(m for m in sys.modules if m.startswith('bertkit')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "'bertkit.cli'" in loaded and "'bertkit.finetune'" not in loaded and "'bertkit.pretrain'" not in loaded


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


def declared_options(cls: type, prefix: str = "") -> dict[str, Any]:
    """Every setting of `cls` declared with help (a flag), by dotted key: its dataclass field."""
    import dataclasses
    import typing

    out = {}
    for f in dataclasses.fields(cls):
        hint = typing.get_type_hints(cls)[f.name]
        inner = next((a for a in (hint, *typing.get_args(hint)) if dataclasses.is_dataclass(a)), None)
        if inner is not None and f.metadata.get("help") is None:
            out |= declared_options(inner, f"{prefix}{f.name}.")
        elif f.metadata.get("help") is not None:
            out[f"{prefix}{f.name}"] = f
    return out


@pytest.mark.parametrize("command", ["finetune", "pretrain", "prepare", "serve", "demo", "distill"])
def test_each_declared_setting_is_a_documented_flag_that_sets_it(command: str) -> None:
    """A setting declared once (its field, with help) is a flag of its command that fills exactly that setting,
    listed in docs/commands.md: adding an option is that declaration and its use, nothing else."""
    from bertkit import settings
    from bertkit.demo import DemoSettings
    from bertkit.distillation import DistillSettings
    from bertkit.finetune import FinetuneSettings
    from bertkit.pretrain import PretrainSettings
    from bertkit.pretraining import PrepareSettings
    from bertkit.serve import ServeSettings

    cls = {"finetune": FinetuneSettings, "pretrain": PretrainSettings, "prepare": PrepareSettings,
           "serve": ServeSettings, "demo": DemoSettings, "distill": DistillSettings}[command]
    parser = build_parser(only=command)
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    flags = {a.dest: a for a in sub._actions if a.option_strings}
    doc = (Path(__file__).resolve().parents[1] / "docs" / "commands.md").read_text(encoding="utf-8")
    section = doc[doc.index(f"## `bertkit {command}`"):].split("\n## ")[0]
    declared = declared_options(cls)
    assert len(declared) >= 5
    for key, f in declared.items():
        action = flags[key]  # the flag's dest is the setting's key
        flag = action.option_strings[0]
        assert f"| `{flag}`" in section, flag
        assert f.metadata["help"] in action.help
        value = action.const if action.nargs == 0 else None
        sample = {"--columns": "text=0"}.get(flag, str(action.choices[-1] if action.choices else 3))
        argv = [flag] if action.nargs == 0 else [flag, sample]
        if action.nargs == "?":
            argv, value = [flag], action.type("")  # the flag alone: --grid's whole grid, --normalize's vectors
        required = [a for a in sub._actions if a.required and a.option_strings and a.dest != key]
        extra = [x for a in required for x in (a.option_strings[0], "1")]
        args = parser.parse_args([command, *extra, *argv])
        got = settings.given(args, cls)
        assert key in got, (flag, got)
        if value is not None:
            assert got[key] == value, (flag, got[key])
        else:
            parsed = action.type(argv[1])
            assert got[key] == ([parsed] if action.nargs == "+" else parsed), (flag, got[key])
    # and the other way: every flag of the command fills a declared setting, or is one of the command's own
    own = {"help", "config", "resume", "out", "input", "vocab", "revision"} if command not in ("finetune", "distill") else {"help", "config", "resume"}
    assert {d for d in flags if d not in declared} <= own
