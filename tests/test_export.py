"""`bertkit export`: every task family and the bare encoder to ONNX, equal to PyTorch in onnxruntime on padded
batches of mixed lengths; int8 quantization; and the exported folder predicting and evaluating as the PyTorch
one does, through the same pipeline, with torch not even importable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.demo.run import data_dir
from bertkit.heads import load_model, to_tensors
from bertkit.predict import pipeline
from bertkit.runtime import OnnxBackend
from bertkit.tokenizer import Tokenizer

pytestmark = pytest.mark.slow  # every family exported once (a module fixture): the full suite only (./dev test)

OUTPUTS = {"encoder": ["last_hidden_state", "pooler_output"], "qa": ["start_logits", "end_logits"]}
TEXTS = ["Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition.",
         "Call me Ishmael.", "The whale rose beside the boat, and every harpooneer stood ready at the bow.",
         "Mr. Knightley walked from Hartfield to Highbury before the rain came, as he did every week."]


@pytest.fixture(scope="module")
def exported(task_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("exported")
    for name, folder in task_models.items():
        assert main(["export", "--model", str(folder), "--out", str(out / name)]) == 0
    return {name: out / name for name in task_models}


def padded_batch(tok: Tokenizer, pair: bool) -> dict[str, np.ndarray]:
    """Four rows of different lengths, padded to the longest (pairs where the family takes them)."""
    pairs = TEXTS[1:] + TEXTS[:1] if pair else None
    batch = tok(TEXTS, pairs, padding=True, return_tensors="np")
    lengths = batch["attention_mask"].sum(1)
    assert len(set(lengths.tolist())) >= 3 and lengths.min() < batch["input_ids"].shape[1]  # really mixed lengths
    return {k: np.asarray(batch[k], dtype=np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}


@pytest.mark.parametrize("name", ["encoder", "classify", "pair", "regression", "multilabel", "qa", "ner", "ner-crf"])
def test_onnxruntime_equals_pytorch_on_padded_batches(task_models: dict[str, Path], exported: dict[str, Path],
                                                      name: str) -> None:
    import onnx

    folder = exported[name]
    expected = {"config.json", "model.onnx", "export.json", "vocab.txt", "tokenizer_config.json"}
    expected |= {"bertkit_task.json"} if name != "encoder" else set()
    expected |= {"crf.safetensors"} if name == "ner-crf" else set()
    assert {p.name for p in folder.iterdir()} == expected
    outputs = OUTPUTS.get(name, ["logits"])
    graph = onnx.load(str(folder / "model.onnx")).graph
    assert [i.name for i in graph.input] == ["input_ids", "attention_mask", "token_type_ids"]
    assert {i.type.tensor_type.elem_type for i in graph.input} == {onnx.TensorProto.INT64}
    for i in graph.input:  # batch and sequence axes are symbolic, not the traced sizes
        assert [d.dim_param != "" for d in i.type.tensor_type.shape.dim] == [True, True], i
    assert [o.name for o in graph.output] == outputs

    model = load_model(task_models[name]).eval()
    if name == "encoder":
        model = model.bert  # a pre-trained folder exports as its encoder
    batch = padded_batch(Tokenizer.from_pretrained(folder), pair=name in ("pair", "regression"))
    ours = OnnxBackend(folder).run(batch, outputs)
    with torch.no_grad():
        theirs = model(**to_tensors(batch))
    real = batch["attention_mask"].astype(bool)
    for out in outputs:
        a, b = ours[out], getattr(theirs, out).numpy()
        assert a.shape == b.shape, out
        if out in ("start_logits", "end_logits"):  # [PAD] scores the lowest float in both; compare the real tokens
            assert (a[~real] == b[~real]).all() and (a[~real] == np.finfo(np.float32).min).all()
            a, b = a[real], b[real]
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0, err_msg=out)
    record = json.loads((folder / "export.json").read_text())
    assert record["outputs"] == outputs and record["quantize"] is None and record["max_abs_diff"] < 1e-4


def test_int8_quantizes_every_matmul_and_stays_close(task_models: dict[str, Path], exported: dict[str, Path],
                                                      tmp_path: Path) -> None:
    import onnx

    int8 = tmp_path / "int8"
    assert main(["export", "--model", str(task_models["classify"]), "--out", str(int8), "--quantize", "int8"]) == 0
    graph = onnx.load(str(int8 / "model.onnx")).graph
    ops = [n.op_type for n in graph.node]
    fp32_ops = [n.op_type for n in onnx.load(str(exported["classify"] / "model.onnx")).graph.node]
    weights = {w.name for w in graph.initializer}
    left = [n for n in graph.node if n.op_type in ("MatMul", "Gemm")]
    assert len(left) == 4 and not any(set(n.input) & weights for n in left)  # only attention's QK^T and AV, per layer
    assert ops.count("MatMulInteger") == fp32_ops.count("MatMul") + fp32_ops.count("Gemm") - len(left) == 10
    assert "DynamicQuantizeLinear" in ops
    fp32_size, int8_size = ((f / "model.onnx").stat().st_size for f in (exported["classify"], int8))
    assert int8_size < 0.45 * fp32_size  # the embeddings stay fp32; the layers' weights are a quarter
    batch = padded_batch(Tokenizer.from_pretrained(int8), pair=False)
    a = OnnxBackend(int8).run(batch, ["logits"])["logits"]
    b = OnnxBackend(exported["classify"]).run(batch, ["logits"])["logits"]
    # changed, by a little, and not in what it predicts; the metric it costs on real data is in bench/RESULTS.md
    assert 0 < np.abs(a - b).max() < 0.2 * np.abs(b).max() and (a.argmax(1) == b.argmax(1)).all()
    assert json.loads((int8 / "export.json").read_text())["quantize"] == "int8"


def inputs_for(name: str) -> tuple[list, list | None]:
    if name in ("pair", "regression"):
        return TEXTS, TEXTS[1:] + TEXTS[:1]
    if name == "qa":
        return ["Who was handsome, clever, and rich?", "Who stood ready?"], [TEXTS[0], TEXTS[2]]
    return TEXTS, None


@pytest.mark.parametrize("name", ["classify", "pair", "regression", "multilabel", "qa", "ner", "ner-crf", "ner-constrained"])
def test_the_exported_folder_predicts_what_the_pytorch_one_does(task_models: dict[str, Path],
                                                                 exported: dict[str, Path], name: str) -> None:
    texts, pairs = inputs_for(name)
    theirs = pipeline(task_models[name])(texts, pairs)
    ours = pipeline(exported[name])(texts, pairs)
    assert pipeline(exported[name]).backend.name == "onnxruntime"
    assert json.dumps(rounded(ours)) == json.dumps(rounded(theirs))  # labels, spans, entities, probabilities
    if name.startswith("ner"):
        assert {t for p in ours for t in p["tags"]} - {"O"}, "tags other than O, or the test shows little"


def rounded(value: object) -> object:
    """The same structure with floats to 4 decimals (fp32 in onnxruntime and PyTorch differ in the last bits)."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, list):
        return [rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    return value


def test_evaluate_scores_the_exported_folder_as_the_pytorch_one(task_models: dict[str, Path],
                                                                exported: dict[str, Path], tmp_path: Path) -> None:
    rows = (data_dir("en") / "classify" / "dev.tsv").read_text(encoding="utf-8").splitlines()
    labelled = tmp_path / "dev.tsv"
    keep = [r for r in rows[1:] if r.endswith(("\temma", "\tmoby_dick", "\tthursday"))][:60]
    labelled.write_text("\n".join([rows[0], *(r.replace("\tmoby_dick", "\tmoby") for r in keep)]) + "\n", encoding="utf-8")
    theirs = pipeline(task_models["classify"]).evaluate(labelled)
    ours = pipeline(exported["classify"]).evaluate(labelled)
    assert ours["examples"] == theirs["examples"] == 60
    assert ours == theirs


def test_predict_runs_the_exported_model_with_torch_blocked(task_models: dict[str, Path],
                                                             exported: dict[str, Path]) -> None:
    code = ("import sys, json; sys.modules['torch'] = None; from bertkit.cli import main; "  # `import torch` fails
            f"code = main(['predict', '--model', {str(exported['ner-crf'])!r}, *{TEXTS[:2]!r}]); "
            "assert 'torch' not in [m.split('.')[0] for m in sys.modules if sys.modules[m] is not None]; sys.exit(code)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = [json.loads(line) for line in proc.stdout.splitlines()]
    assert rounded(printed) == rounded(pipeline(task_models["ner-crf"])(TEXTS[:2]))


def test_bad_export_requests_are_one_line(task_models: dict[str, Path], tmp_path: Path, capsys) -> None:
    assert main(["export", "--model", str(tmp_path / "missing"), "--out", str(tmp_path / "x")]) == 2
    assert "missing: no such model folder" in capsys.readouterr().err
    assert main(["export", "--model", str(task_models["classify"]), "--out", str(tmp_path / "y"), "--opset", "13"]) == 2
    assert "--opset must be 18 or more" in capsys.readouterr().err
    exported_dir = tmp_path / "z"
    assert main(["export", "--model", str(task_models["classify"]), "--out", str(exported_dir)]) == 0
    capsys.readouterr()
    assert main(["predict", "--model", str(exported_dir), "--device", "cuda", "text"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "an exported model runs on the CPU" in err
