"""The deployment path in one go, on a tiny model, for the fast tier: fine-tune a teacher, distill it into one of its
layers, export the student to int8, serve it in this process and ask it over HTTP. Each command's own tests go deeper
(most of them in the full suite only); this one shows the commands fit together and stays under half a minute."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertkit.cli import main
from bertkit.demo.run import sample_file

TEXTS = ["Emma Woodhouse, handsome, clever, and rich.", "Call me Ishmael.", "The whale rose beside the boat."]


@pytest.fixture(scope="module")
def exported_student(tmp_path_factory: pytest.TempPathFactory, builtin_data: Path, vocab: Path) -> Path:
    """An int8 export of a 1-layer student distilled from a 2-layer teacher fine-tuned on 200 sentences."""
    import torch

    import bertkit
    from bertkit import BertConfig, Tokenizer

    root = tmp_path_factory.mktemp("end-to-end")
    tok = Tokenizer.from_pretrained(vocab)
    torch.manual_seed(0)
    bertkit.BertForPreTraining(BertConfig.preset("tiny", vocab_size=tok.vocab_size, num_hidden_layers=2)).save_pretrained(
        root / "base")
    tok.save_pretrained(root / "base")
    train = sample_file(builtin_data / "classify" / "train.tsv", root / "train", 200)
    dev = sample_file(builtin_data / "classify" / "dev.tsv", root / "dev", 60)
    data = ["--train", str(train), "--dev", str(dev), "--epochs", "1", "--lr", "2e-3", "train.progress=false"]
    assert main(["finetune", "--task", "classify", "--model", str(root / "base"), "--out", str(root / "teacher"),
                 *data]) == 0
    assert main(["distill", "--teacher", str(root / "teacher" / "model"), "--student", "layers:1",
                 "--out", str(root / "student"), *data]) == 0
    assert main(["export", "--model", str(root / "student" / "model"), "--out", str(root / "int8"),
                 "--quantize", "int8"]) == 0
    return root / "int8"


def test_a_distilled_int8_student_serves_what_predict_prints(exported_student: Path, capsys) -> None:
    import onnx
    from starlette.testclient import TestClient

    from bertkit.serve import ServeSettings, create_app

    config = json.loads((exported_student / "config.json").read_text(encoding="utf-8"))
    assert config["num_hidden_layers"] == 1
    assert "MatMulInteger" in {n.op_type for n in onnx.load(str(exported_student / "model.onnx")).graph.node}
    assert main(["predict", "--model", str(exported_student), *TEXTS]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    with TestClient(create_app(ServeSettings(model=exported_student))) as client:
        for _ in range(600):  # the warm-up runs in the background: /health answers 503 until it ends
            if client.get("/health").status_code == 200:
                break
        response = client.post("/v1/predict", json={"inputs": TEXTS})
    assert response.status_code == 200
    assert response.json() == {"predictions": printed}
    assert {p["label"] for p in printed} <= {"emma", "moby", "thursday"}
