"""Hugging Face model names wherever a model folder is taken, resolved offline through a cache laid out as
huggingface_hub lays it out (built here from the real MiniLM files), with HF_HOME and HF_HUB_OFFLINE honoured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bertkit.hub import is_hub_name

NAME = "sentence-transformers/all-MiniLM-L6-v2"
COMMIT = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"
OLDER = "0" * 40


def hub_cache(root: Path, shared_data: Path) -> Path:
    """HF_HOME with NAME cached at two commits, main at COMMIT: hub/models--org--name/{refs,snapshots,blobs}."""
    repo = root / "hub" / ("models--" + NAME.replace("/", "--"))
    source = shared_data / "models/all-MiniLM-L6-v2"
    for commit in (COMMIT, OLDER):
        snapshot = repo / "snapshots" / commit
        snapshot.mkdir(parents=True)
        for f in source.iterdir():
            blob = repo / "blobs" / f"{f.name}-{commit[:4]}"
            blob.parent.mkdir(exist_ok=True)
            if f.suffix == ".safetensors":
                blob.symlink_to(f)  # no copy of the weights
            else:
                blob.write_bytes(f.read_bytes())
            (snapshot / f.name).symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    # the older commit's config says 2 layers: a model built from it shows which revision was read
    old = repo / "snapshots" / OLDER / "config.json"
    config = json.loads(old.read_text())
    old.unlink()
    old.write_text(json.dumps({**config, "num_hidden_layers": 2}))
    return root


def bertkit(home: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    return subprocess.run([sys.executable, "-m", "bertkit.cli", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300)


def test_hub_names() -> None:
    assert is_hub_name("bert-base-chinese") and is_hub_name("google-bert/bert-base-uncased")
    assert not any(map(is_hub_name, ["runs/x/model", "/abs/model", "./model", "../m", "train.tsv", "a/b/c"]))


@pytest.mark.slow
def test_commands_take_a_cached_hub_name_offline(tmp_path: Path, shared_data: Path) -> None:
    home = hub_cache(tmp_path / "hf", shared_data)
    local = str(shared_data / "models/all-MiniLM-L6-v2")
    info = bertkit(home, "info", NAME, cwd=tmp_path)
    assert info.returncode == 0 and "BertModel" in info.stdout and "22,713,216" in info.stdout, info.stderr
    # the same vectors as from the folder itself
    by_name, by_path = (bertkit(home, "embed", "--model", m, "--pooling", "mean", "Call me Ishmael.", cwd=tmp_path) for m in (NAME, local))
    assert by_name.returncode == 0 and by_name.stdout == by_path.stdout and len(json.loads(by_name.stdout)["embedding"]) == 384
    # --revision pins a commit: the older one has 2 layers
    old = bertkit(home, "info", NAME, "--revision", OLDER, cwd=tmp_path)
    assert old.returncode == 0 and "num_hidden_layers              2" in old.stdout, old.stdout


@pytest.mark.slow
def test_finetune_and_the_python_api_take_a_hub_name(tmp_path: Path, shared_data: Path) -> None:
    home = hub_cache(tmp_path / "hf", shared_data)
    train = tmp_path / "train.tsv"
    train.write_text("".join((shared_data / "sst2/train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)[:33]))
    run = bertkit(home, "finetune", "--model", NAME, "--revision", COMMIT, "--train", str(train), "--dev", str(train),
                  "--out", str(tmp_path / "out"), "--epochs", "1", "train.progress=false", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    meta = json.loads((tmp_path / "out/model/bertkit_task.json").read_text())
    assert meta["settings"]["base_model"] == NAME and meta["settings"]["revision"] == COMMIT
    # its model card, in Hugging Face's format: YAML metadata, then what it is, its scores, the command that made it
    card = (tmp_path / "out/model/README.md").read_text()
    front, body = card.split("---\n")[1:3]
    front = yaml.safe_load(front)
    assert front["library_name"] == "bertkit" and front["pipeline_tag"] == "text-classification"
    assert front["base_model"] == NAME and "bert" in front["tags"]
    results = json.loads((tmp_path / "out/results.json").read_text())
    assert {m["name"]: m["value"] for m in front["model-index"][0]["results"][0]["metrics"]} == pytest.approx(
        {f"dev {k}": v for k, v in results["best"]["dev"].items()}, rel=1e-3)
    assert f"from `{NAME}` at revision `{COMMIT}`" in body and "- Labels (2): `0`, `1`" in body
    assert f"bertkit finetune --model {NAME} --revision {COMMIT} --train {train}" in body
    assert f"| dev | {results['best']['dev']['accuracy']:.2f} |" in body
    script = ("import bertkit\n"
              f"m = bertkit.BertModel.from_pretrained({NAME!r}, revision={OLDER!r})\n"
              f"t = bertkit.Tokenizer.from_pretrained({NAME!r})\n"
              f"e = bertkit.pipeline({NAME!r}, task='embed')\n"
              "print(len(m.layers), t.vocab_size, len(e(['hello'])[0]))\n")
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["2", "30522", "384"], out.stderr


@pytest.mark.parametrize(("args", "expected"), [
    (["info", "bert-base-chinese"], "bert-base-chinese: no such model folder, and no Hugging Face model of that name in "
                                    "the cache ({cache}); HF_HUB_OFFLINE is set, so nothing is downloaded"),
    (["info", NAME, "--revision", "v9"], NAME + "@v9: no such model folder, and no Hugging Face model of that name in "
                                         "the cache ({cache}); HF_HUB_OFFLINE is set, so nothing is downloaded"),
    (["info", "{local}", "--revision", "main"], "{local}: --revision is for Hugging Face model names, not local folders"),
])
def test_a_name_not_in_the_cache_is_one_line(tmp_path: Path, shared_data: Path, args: list[str], expected: str) -> None:
    home = hub_cache(tmp_path / "hf", shared_data)
    local = str(shared_data / "models/all-MiniLM-L6-v2")
    proc = bertkit(home, *(a.format(local=local) for a in args), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "bertkit: error: " + expected.format(cache=home / "hub", local=local)
