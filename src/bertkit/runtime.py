"""What runs a fine-tuned model: PyTorch on its weights, or onnxruntime on its export; one interface.

    backend = load_backend("runs/ner/model")          # model.onnx in the folder: onnxruntime, else PyTorch
    logits = backend.run(task.collate(rows), ("logits",))["logits"]       # numpy in, numpy out

Prediction, evaluation and the server see only `Backend`: numpy batches in (input_ids, attention_mask,
token_type_ids), the named outputs out as float32 arrays, and the CRF's scores for a tagger that has one.
Neither backend is imported before it is used, so an exported model runs where torch is not installed
(`pip install bertkit[serve]` brings onnxruntime).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .errors import BertkitError
from .folders import ONNX_NAME, architecture_of, is_exported
from .schemes import TagScores

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
CRF_FILE = "crf.safetensors"  # an exported tagger's CRF scores (start, transitions, end), penalties included


class Backend(Protocol):
    name: str  # "torch" or "onnxruntime"
    crf: TagScores | None  # a CRF tagger's scores, which decoding needs
    pads: bool  # whether padded positions cost compute (batches of rows of unlike lengths waste it)

    def run(self, batch: dict[str, np.ndarray], outputs: Sequence[str]) -> dict[str, np.ndarray]: ...


class TorchBackend:
    """A bertkit model in PyTorch, fp32 or under bf16/fp16 autocast, on its device."""

    name = "torch"
    pads = False  # the encoder drops [PAD] before its first layer

    def __init__(self, model: Any, precision: str = "fp32"):
        import torch

        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        crf = getattr(model, "crf", None)
        self.crf = crf.tag_scores() if crf is not None else None

    @classmethod
    def load(cls, model_dir: Path, device: str = "auto", precision: str = "fp32") -> TorchBackend:
        import torch

        from .heads import load_model

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        return cls(load_model(model_dir).to(torch.device(device)), precision)

    def run(self, batch: dict[str, np.ndarray], outputs: Sequence[str]) -> dict[str, np.ndarray]:
        import torch

        inputs = {k: torch.from_numpy(batch[k]).to(self.device) for k in INPUTS if k in batch}
        with torch.inference_mode(), torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype is not None):
            out = self.model(**inputs)
        return {name: getattr(out, name).float().cpu().numpy() for name in outputs}


class OnnxBackend:
    """An exported model (model.onnx, fp32 or int8) in onnxruntime on the CPU."""

    name = "onnxruntime"
    pads = True

    def __init__(self, model_dir: Path, threads: int | None = None):
        try:
            import onnxruntime as ort
        except ImportError:
            raise BertkitError(f"{model_dir}: an exported model runs in onnxruntime: pip install 'bertkit[serve]'") from None
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or int(os.environ.get("OMP_NUM_THREADS", 0)) or (os.cpu_count() or 1)
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(model_dir / ONNX_NAME), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.crf = read_crf(model_dir)

    def run(self, batch: dict[str, np.ndarray], outputs: Sequence[str]) -> dict[str, np.ndarray]:
        feed = {k: np.ascontiguousarray(batch[k], dtype=np.int64) for k in self.inputs}
        return dict(zip(outputs, self.session.run(list(outputs), feed), strict=True))


def load_backend(model_dir: str | Path, device: str = "auto", precision: str = "fp32") -> Backend:
    """Gives the backend of a model folder: onnxruntime for an exported one (model.onnx), else PyTorch."""
    model_dir = Path(model_dir)
    if is_exported(model_dir):
        if device not in ("auto", "cpu") or precision != "fp32":
            raise BertkitError(f"{model_dir}: an exported model runs on the CPU as exported (device cpu, precision fp32)")
        return OnnxBackend(model_dir)
    architecture_of(model_dir)  # a clear error for a folder without config.json, before torch loads
    return TorchBackend.load(model_dir, device, precision)


def read_crf(model_dir: Path) -> TagScores | None:
    """Gives the CRF scores an exported tagger carries beside its model.onnx, if it has a CRF."""
    path = model_dir / CRF_FILE
    if not path.is_file():
        return None
    from safetensors.numpy import load_file

    scores = load_file(str(path))
    return TagScores(scores["start"], scores["transitions"], scores["end"])


def batches(lengths: np.ndarray, batch_size: int, pads: bool, max_tokens: int | None = None) -> list[np.ndarray]:
    """Gives the row indices of each batch: rows longest first, `batch_size` at most, and with `max_tokens` at most
    that many padded tokens (rows x the first, longest row; a row longer than that still runs, alone). Where the
    backend computes every padded position (onnxruntime), a batch also ends before a row shorter than 3/4 of its
    first, so that padding costs at most a third more than the real tokens."""
    order = np.argsort(-lengths, kind="stable")
    out: list[np.ndarray] = []
    lo = 0
    while lo < len(order):
        hi = min(lo + batch_size, len(order))
        if max_tokens:
            hi = min(hi, lo + max(1, max_tokens // max(int(lengths[order[lo]]), 1)))
        if pads:
            hi = lo + 1 + int(np.searchsorted(-lengths[order[lo + 1 : hi]], -0.75 * lengths[order[lo]], side="right"))
        out.append(order[lo:hi])
        lo = hi
    return out
