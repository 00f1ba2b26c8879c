"""Folders whose tokenizer is only `tokenizer.json` (as transformers 5 and sentence-transformers save it) work
in bertkit: the ids equal transformers' own on the same folder, the options come from the file's normalizer
(tokenizer_config.json has the last word), the commands run on such a folder, and a tokenizer.json that is not
BERT's is refused by file and field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import transformers

from bertkit import Tokenizer
from bertkit.cli import main
from bertkit.errors import BertkitError

TEXTS = ["Héllo, Wörld! It's 3.14 o'clock.", "naïve café façade", "北京大学的学生在燕园里散步。", "don't [MASK] this",
         "A sentence long enough to be cut into several word pieces by WordPiece: antidisestablishmentarianism."]


def json_only(src: Path, out: Path, lower: bool | None = None, keep_config: bool = True) -> Path:
    """`src`'s tokenizer as transformers 5 saves it (tokenizer.json, tokenizer_config.json, no vocab.txt)."""
    options = {} if lower is None else {"do_lower_case": lower}
    transformers.AutoTokenizer.from_pretrained(src, **options).save_pretrained(out)
    assert not (out / "vocab.txt").exists() and (out / "tokenizer.json").is_file()
    if not keep_config:
        (out / "tokenizer_config.json").unlink()
    return out


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("keep_config", [True, False])
def test_ids_equal_transformers_on_a_tokenizer_json_folder(vocab: Path, tmp_path: Path, lower: bool,
                                                           keep_config: bool) -> None:
    folder = json_only(vocab, tmp_path / "json", lower, keep_config)
    ref = transformers.AutoTokenizer.from_pretrained(folder)
    tok = Tokenizer.from_pretrained(folder)
    assert tok.do_lower_case is lower  # from the config, or else the normalizer's "lowercase"
    assert tok(TEXTS)["input_ids"] == ref(TEXTS)["input_ids"]
    assert tok(TEXTS[:2], TEXTS[2:4])["input_ids"] == ref(TEXTS[:2], TEXTS[2:4])["input_ids"]
    if lower:  # the same vocabulary as the vocab.txt it was made from
        assert tok.vocab == Tokenizer.from_pretrained(vocab).vocab


def test_commands_run_on_a_model_whose_tokenizer_is_only_tokenizer_json(shared_data: Path, tmp_path: Path,
                                                                        capsys) -> None:
    minilm = shared_data / "models" / "all-MiniLM-L6-v2"
    folder = json_only(minilm, tmp_path / "minilm")
    for name in ("config.json", "model.safetensors"):
        shutil.copy(minilm / name, folder / name)
    vectors = {}
    for name, model in (("vocab.txt", minilm), ("tokenizer.json", folder)):
        assert main(["embed", "--model", str(model), "--normalize", "--out", str(tmp_path / f"{name}.npy"), *TEXTS]) == 0
        vectors[name] = np.load(tmp_path / f"{name}.npy")
    np.testing.assert_allclose(vectors["tokenizer.json"], vectors["vocab.txt"], atol=1e-6)
    assert main(["tokenize", "--vocab", str(folder), TEXTS[0]]) == 0
    assert main(["info", str(folder)]) == 0
    capsys.readouterr()


def test_a_tokenizer_json_that_is_not_berts_is_refused_by_file_and_field(vocab: Path, tmp_path: Path) -> None:
    folder = json_only(vocab, tmp_path / "json")
    doc = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))

    def refused(change: dict, match: str) -> None:
        (folder / "tokenizer.json").write_text(json.dumps({**doc, **change}), encoding="utf-8")
        with pytest.raises(BertkitError, match=match):
            Tokenizer.from_pretrained(folder)

    refused({"model": {**doc["model"], "type": "BPE"}}, r"tokenizer\.json: field 'model' is 'BPE', not BERT's")
    refused({"pre_tokenizer": {"type": "Whitespace"}}, r"field 'pre_tokenizer' is 'Whitespace'")
    refused({"normalizer": None}, r"field 'normalizer' is None")
    refused({"model": {**doc["model"], "continuing_subword_prefix": "@@"}},
            r"field 'model\.continuing_subword_prefix' is '@@'")
    vocab = {t: i for t, i in doc["model"]["vocab"].items() if t != "[MASK]"}
    refused({"model": {**doc["model"], "vocab": vocab}, "added_tokens": []}, r"ids must be 0\.\.n-1|lacks .*\[MASK\]")
    refused({"added_tokens": [{"content": "[CLS]", "id": 0}]}, r"'added_tokens\[0\]': '\[CLS\]' has id 0")
    (folder / "tokenizer.json").write_text("{\n  \"model\": {,\n}", encoding="utf-8")
    with pytest.raises(BertkitError, match=r"tokenizer\.json line 2: invalid JSON"):
        Tokenizer.from_pretrained(folder)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(BertkitError, match="no tokenizer: neither vocab.txt nor tokenizer.json"):
        Tokenizer.from_pretrained(folder)
