"""`bertkit export`: a model folder -> an exported one that onnxruntime runs, without torch; int8 if asked.

    bertkit export --model runs/sst2/model --out exported/sst2 [--quantize int8] [--opset 18]

The exported folder is a complete model folder: `model.onnx` (inputs input_ids, attention_mask,
token_type_ids, int64, batch and sequence axes dynamic; outputs named as the PyTorch model's:
`logits`, `start_logits`/`end_logits`, or `last_hidden_state`/`pooler_output` for the bare encoder),
config.json, the tokenizer files, the task file, a tagger's CRF scores (`crf.safetensors`) and
`export.json` (what made it, and how close it came to PyTorch). `bertkit predict`, `evaluate`, `serve`
and `bertkit.pipeline` take it as they take the PyTorch folder (bertkit.runtime).

The graph is traced with torch.export (torch.onnx's dynamo exporter) from the encoder run padded
(`BertModel.unpad = False`: attention masks the padding instead of removing it, so no shape depends
on the data). `--quantize int8` is onnxruntime's dynamic quantization: int8 weights of every MatMul,
per output channel, activations quantized on the fly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .errors import BertkitError
from .fileio import staged_dir
from .folders import ONNX_NAME, TASK_FILE, architecture_of
from .heads import MODEL_CLASSES, TaskModel, to_tensors
from .model import BertModel, BertOutput
from .runtime import CRF_FILE, INPUTS, OnnxBackend
from .sentence_files import copy_sentence_files
from .tokenizer import Tokenizer

QUANTIZE = ("int8",)


class _Graph(nn.Module):
    """The model with the outputs that go into the graph, as a tuple, from positional int64 inputs."""

    def __init__(self, model: nn.Module, outputs: tuple[str, ...]):
        super().__init__()
        self.model, self.outputs = model, outputs

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor) -> tuple:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return tuple(getattr(out, name) for name in self.outputs)


def export(model_dir: str | Path, out: str | Path, quantize: str | None = None, opset: int = 18) -> dict[str, Any]:
    """Exports the model in `model_dir` to the folder `out` (replaced whole); gives what export.json records.

    A fine-tuned model exports with its head; a pre-trained one (or a bare encoder) as the encoder alone.
    """
    model_dir, out = Path(model_dir), Path(out)
    if quantize not in (None, *QUANTIZE):
        raise BertkitError(f"--quantize must be one of {', '.join(QUANTIZE)}, got {quantize!r}")
    if opset < 18:
        raise BertkitError(f"--opset must be 18 or more (torch.onnx's exporter), got {opset}")
    if tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 5):
        raise BertkitError(f"bertkit export needs torch >= 2.5 (its ONNX exporter), this is {torch.__version__}")
    kind = MODEL_CLASSES.get(architecture_of(model_dir) or "", BertModel)
    if not issubclass(kind, TaskModel):  # a pre-trained model exports as its encoder
        kind = BertModel
    model = kind.from_pretrained(model_dir).eval()
    encoder = model if isinstance(model, BertModel) else model.bert
    encoder.unpad = False
    outputs, per_token = _outputs(kind)
    outputs = tuple(n for n in outputs if n != "pooler_output" or encoder.pooler is not None)
    tokenizer = Tokenizer.from_pretrained(model_dir)
    with staged_dir(out) as tmp:
        return _write(model, kind, tokenizer, model_dir, tmp, outputs, per_token, opset, quantize)


def _outputs(kind: type) -> tuple[tuple[str, ...], frozenset[str]]:
    """The outputs a model class gives, as the exported graph names them, and those given per token."""
    if issubclass(kind, TaskModel):
        return kind.head_type.outputs(), kind.head_type.per_token
    return tuple(f.name for f in dataclasses.fields(BertOutput)), frozenset({"last_hidden_state"})


def _write(model: Any, kind: type, tokenizer: Tokenizer, model_dir: Path, tmp: Path, outputs: tuple[str, ...],
           per_token: frozenset[str], opset: int, quantize: str | None) -> dict[str, Any]:
    """Writes the exported folder into `tmp`: the graph, config, tokenizer, task file and CRF; gives the record."""
    with tempfile.TemporaryDirectory() as work:
        graph = Path(work) / ONNX_NAME
        _trace(_Graph(model, outputs).eval(), _example(tokenizer), graph, opset)
        if quantize == "int8":
            _quantize_int8(graph, tmp / ONNX_NAME, Path(work))
        else:
            shutil.copy(graph, tmp / ONNX_NAME)
    model.config.save(tmp, architecture=kind.hf_architecture)
    tokenizer.save_pretrained(tmp)
    if kind is not BertModel and (model_dir / TASK_FILE).is_file():
        shutil.copy(model_dir / TASK_FILE, tmp / TASK_FILE)
    copy_sentence_files(model_dir, tmp)  # an embedder's pooling, read by `bertkit embed` and `serve`
    crf = getattr(model, "crf", None)
    if crf is not None:
        from safetensors.numpy import save_file

        scores = crf.tag_scores()
        save_file({"start": scores.start, "transitions": scores.transitions, "end": scores.end}, str(tmp / CRF_FILE))
    record = {
        "source": str(model_dir), "architecture": kind.hf_architecture, "outputs": list(outputs), "opset": opset,
        "quantize": quantize, "max_abs_diff": _compare(model, tmp, tokenizer, outputs, per_token), **_versions(),
    }  # fmt: skip
    (tmp / "export.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def _example(tokenizer: Tokenizer) -> dict[str, np.ndarray]:
    """A padded batch of two rows of different lengths, pair segments and all, to trace and to compare on."""
    texts = ["the exported graph must give what the model gives", "a short one"]
    pairs = ["with a second segment that is longer than the first", "and its pair"]
    return tokenizer(texts, pairs, padding=True, return_tensors="np")  # type: ignore[return-value]


def _trace(graph: nn.Module, example: dict[str, Any], path: Path, opset: int) -> None:
    args = tuple(torch.from_numpy(np.asarray(example[k], dtype=np.int64)) for k in INPUTS)
    axes = {"batch": torch.export.Dim("batch"), "seq": torch.export.Dim("seq", max=512)}
    dynamic = tuple({0: axes["batch"], 1: axes["seq"]} for _ in INPUTS)
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the exporter logs each of its passes, and a missing torchvision
    try:
        with contextlib.redirect_stdout(None), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.export's notes on axis names and its own deprecations
            torch.onnx.export(graph, args, str(path), input_names=list(INPUTS), output_names=list(graph.outputs),
                              dynamic_shapes=dynamic, opset_version=opset, dynamo=True, external_data=False)
    except Exception as e:  # the exporter raises many kinds; the message names what it could not trace
        raise BertkitError(f"ONNX export failed: {type(e).__name__}: {str(e).splitlines()[0]}") from None
    finally:
        quiet.setLevel(level)


def _quantize_int8(source: Path, target: Path, work: Path) -> None:
    """onnxruntime's dynamic int8 quantization, per channel, after its shape inference and graph clean-up."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = work / "prepared.onnx"
    quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
    quantize_dynamic(str(prepared), str(target), weight_type=QuantType.QInt8, per_channel=True)


@torch.no_grad()
def _compare(model: nn.Module, folder: Path, tokenizer: Tokenizer, outputs: tuple[str, ...], per_token: frozenset[str]) -> float:
    """Gives the largest difference between onnxruntime on the exported graph and PyTorch (per-token outputs:
    at the real tokens; QA's padding scores the lowest float in both, and the encoder's is zero)."""
    example = _example(tokenizer)
    ours = OnnxBackend(folder).run(example, outputs)
    theirs = model(**to_tensors({k: np.asarray(example[k], dtype=np.int64) for k in INPUTS}))
    real = np.asarray(example["attention_mask"], dtype=bool)
    worst = 0.0
    for name in outputs:
        a, b = ours[name], getattr(theirs, name).float().numpy()
        keep = real if name in per_token else np.ones(len(a), bool)
        worst = max(worst, float(np.abs(a[keep] - b[keep]).max()))
    return worst


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime

    return {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}
