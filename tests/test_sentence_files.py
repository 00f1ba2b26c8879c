"""sentence-transformers' folder files: bertkit reads a folder sentence-transformers saved (its pooling,
normalization and length: the same vectors as SentenceTransformer gives, no flag), writes files that
SentenceTransformer loads with the same vectors as bertkit's, and refuses a folder it cannot run the same way."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertkit.cli import main
from bertkit.embed import Embedder
from bertkit.errors import BertkitError
from bertkit.sentence_files import SentenceConfig, read_sentence_config, write_sentence_config

sentence_transformers = pytest.importorskip("sentence_transformers")

TEXTS = ["A man is playing a guitar.", "Someone plays an instrument.", "北京大学在海淀区。",
         " ".join(["A long sentence that goes on and on past the model's length."] * 12)]


def st_folder(src: Path, out: Path, pooling: str, normalize: bool, length: int) -> Path:
    from sentence_transformers import SentenceTransformer

    try:  # sentence-transformers 6 moved its modules
        from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    except ImportError:
        from sentence_transformers.models import Normalize, Pooling, Transformer

    width = json.loads((src / "config.json").read_text())["hidden_size"]
    modules = [Transformer(str(src), max_seq_length=length), Pooling(width, pooling)]
    SentenceTransformer(modules=[*modules, *([Normalize()] if normalize else [])]).save(str(out))
    return out


def test_a_folder_sentence_transformers_saved_embeds_as_it_does(shared_data: Path, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    folder = st_folder(shared_data / "models" / "all-MiniLM-L6-v2", tmp_path / "st", "mean", True, 32)
    assert read_sentence_config(folder) == SentenceConfig("mean", normalize=True, max_seq_length=None)
    ours = Embedder(folder)  # no pooling, no normalize: the folder says
    assert (ours.pooling, ours.normalize, ours.max_length) == ("mean", True, 32)
    reference = SentenceTransformer(str(folder), device="cpu").encode(TEXTS, convert_to_numpy=True)
    np.testing.assert_allclose(ours(TEXTS), reference, atol=2e-6)
    assert main(["embed", "--model", str(folder), "--out", str(tmp_path / "v.npy"), *TEXTS]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), reference, atol=2e-6)


@pytest.mark.parametrize(("pooling", "normalize"), [("cls", False), ("mean", True)])
def test_sentence_transformers_loads_the_files_bertkit_writes(tiny_model: Path, pooling: str, normalize: bool) -> None:
    from sentence_transformers import SentenceTransformer

    write_sentence_config(tiny_model, SentenceConfig(pooling, normalize, max_seq_length=24), hidden_size=128,
                          version="0.1.0")
    assert read_sentence_config(tiny_model) == SentenceConfig(pooling, normalize, max_seq_length=24)
    reference = SentenceTransformer(str(tiny_model), device="cpu")
    assert reference.max_seq_length == 24
    np.testing.assert_allclose(Embedder(tiny_model)(TEXTS), reference.encode(TEXTS, convert_to_numpy=True), atol=2e-6)


def test_what_bertkit_cannot_run_the_same_way_is_refused_by_file_and_field(tiny_model: Path) -> None:
    write_sentence_config(tiny_model, SentenceConfig("mean", max_seq_length=24), hidden_size=128, version="0.1.0")
    modules = json.loads((tiny_model / "modules.json").read_text())
    pooling_path = tiny_model / "1_Pooling" / "config.json"
    pooling = json.loads(pooling_path.read_text())

    def refused(match: str) -> None:
        with pytest.raises(BertkitError, match=match):
            Embedder(tiny_model)

    dense = {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
    (tiny_model / "modules.json").write_text(json.dumps([*modules, dense]))
    refused(r"modules\.json: modules Transformer -> Pooling -> Dense; bertkit runs Transformer -> Pooling")
    (tiny_model / "modules.json").write_text(json.dumps(modules))
    pooling_path.write_text(json.dumps({**pooling, "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": True}))
    refused(r"1_Pooling/config\.json: field 'pooling_mode_max_tokens': bertkit pools by exactly one of mean or cls")
    pooling_path.write_text(json.dumps({"pooling_mode": "lasttoken"}))
    refused(r"field 'pooling_mode' is 'lasttoken'")
    pooling_path.write_text('{"pooling_mode": ')
    refused(r"1_Pooling/config\.json line 1: invalid JSON")
    with pytest.raises(BertkitError, match="no 'pooler' pooling"):
        write_sentence_config(tiny_model, SentenceConfig("pooler", max_seq_length=24), hidden_size=128, version="0")


def test_the_server_embeds_a_sentence_transformers_folder_as_it_does(shared_data: Path, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer
    from starlette.testclient import TestClient

    from bertkit.serve import ServeSettings, create_app

    folder = st_folder(shared_data / "models" / "all-MiniLM-L6-v2", tmp_path / "st", "cls", True, 48)
    reference = SentenceTransformer(str(folder), device="cpu").encode(TEXTS, convert_to_numpy=True)
    with TestClient(create_app(ServeSettings(model=folder))) as client:  # no --pooling, no --normalize
        for _ in range(600):
            if client.get("/health").status_code == 200:
                break
        info = client.get("/v1/model").json()
        answer = client.post("/v1/embeddings", json={"input": TEXTS, "model": "st"}).json()
    assert (info["pooling"], info["normalize"], info["max_seq_length"]) == ("cls", True, 48)
    served = np.array([d["embedding"] for d in answer["data"]], dtype=np.float32)
    np.testing.assert_allclose(served, reference, atol=2e-6)
