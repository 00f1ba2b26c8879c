"""Students for distillation, and what their losses compare with the teacher's.

- `build_student`: the teacher's embeddings and some of its layers (`layers:0,2,4`, DistilBERT's way), a
  preset trained from scratch (`mini`), or a pre-trained small model (`--student-init`); each with the
  teacher's task head shape and labels (copied from the teacher for `layers:`).
- `layer_map`: the teacher layer each student layer learns from (uniform by default, as TinyBERT's).
- `Probe`: forward hooks that keep what the hidden-state and attention losses read inside a model: each
  layer's output and each layer's attention scores (QK^T / sqrt(d), before the softmax, as TinyBERT's).
- The losses, plain functions: `soft_loss` (KL at a temperature, scaled by T^2; per token and per span
  position where the task has them), `hidden_mse`, `attention_mse`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .config import PRESETS, BertConfig
from .errors import BertkitError
from .heads import HEAD_FIELDS
from .model import BertModel, Pretrained

# ---- the student ------------------------------------------------------------------------------------------------

def parse_student(spec: str, teacher_layers: int) -> tuple[str, Any]:
    """("layers", [i, ...]) for "layers:0,2,4", or ("preset", name); BertkitError naming what is wrong."""
    if spec.startswith("layers:"):
        items = [s.strip() for s in spec.removeprefix("layers:").split(",") if s.strip()]
        if not items:
            raise BertkitError(f"--student {spec!r}: name the teacher's layers to keep, e.g. layers:0,2,4")
        try:
            layers = [int(s) for s in items]
        except ValueError:
            raise BertkitError(f"--student {spec!r}: layers are numbers, e.g. layers:0,2,4") from None
        bad = [i for i in layers if not 0 <= i < teacher_layers]
        if bad:
            raise BertkitError(f"--student {spec!r}: layer {bad[0]} is out of range: the teacher has layers 0 to "
                               f"{teacher_layers - 1}")
        if len(set(layers)) != len(layers):
            raise BertkitError(f"--student {spec!r}: a layer is listed twice")
        return "layers", layers
    if spec in PRESETS:
        return "preset", spec
    raise BertkitError(f"--student {spec!r}: give layers:I,J,... (the teacher's own layers) or a preset "
                       f"({', '.join(PRESETS)})")


def build_student(teacher: Pretrained, spec: str, init: Path | None = None) -> Pretrained:
    """The student model: the teacher's class (its head and labels), built as `spec` says; from `init` (a
    pre-trained model folder with the teacher's vocabulary) when given."""
    tcfg: BertConfig = teacher.config
    kind, value = parse_student(spec, tcfg.num_hidden_layers)
    cls = type(teacher)
    if kind == "layers":
        if init is not None:
            raise BertkitError("--student layers:... keeps the teacher's own layers; --student-init gives another "
                               "model: use one or the other")
        student = cls(tcfg.replace(num_hidden_layers=len(value)))
        _copy_layers(teacher, student, value)
        return student
    labels = {name: getattr(tcfg, name) for name in HEAD_FIELDS}
    if init is not None:
        student = cls.from_pretrained(init, **labels)
    else:
        student = cls(BertConfig.preset(value, vocab_size=tcfg.vocab_size, type_vocab_size=tcfg.type_vocab_size,
                                        max_position_embeddings=tcfg.max_position_embeddings).replace(**labels))
    scfg = student.config
    if scfg.vocab_size != tcfg.vocab_size:
        raise BertkitError(f"the student's vocabulary ({scfg.vocab_size} tokens) is not the teacher's "
                           f"({tcfg.vocab_size}): distillation feeds both the same token ids")
    if scfg.hidden_size > tcfg.hidden_size:
        raise BertkitError(f"the student ({scfg.hidden_size} wide) is wider than the teacher ({tcfg.hidden_size}): "
                           "a student is the smaller model")
    return student


def _copy_layers(teacher: Pretrained, student: Pretrained, layers: list[int]) -> None:
    """The student's weights from the teacher's: embeddings, pooler and head as they are; layer k from teacher
    layer layers[k]."""
    source = teacher.state_dict()
    state = {}
    for name in student.state_dict():
        parts = name.split(".")
        if "layers" in parts:  # bert.layers.K.rest (or layers.K.rest in a bare encoder)
            at = parts.index("layers")
            parts[at + 1] = str(layers[int(parts[at + 1])])
        state[name] = source[".".join(parts)].clone()
    student.load_state_dict(state)


def encoder_of(model: nn.Module) -> BertModel:
    return model if isinstance(model, BertModel) else model.bert  # type: ignore[return-value]


def layer_map(student_layers: int, teacher_layers: int, spec: str | None = None) -> dict[int, int]:
    """Student layer -> the teacher layer it learns from: "0:1,1:3,2:5", or uniform: layer i from teacher layer
    (i + 1) k - 1, k = teacher layers / student layers (rounded where it is not whole)."""
    if spec is None:
        return {i: math.floor((i + 1) * teacher_layers / student_layers + 0.5) - 1 for i in range(student_layers)}
    found: dict[int, int] = {}
    for item in spec.split(","):
        s, sep, t = item.partition(":")
        if not sep or not s.strip().isdigit() or not t.strip().isdigit():
            raise BertkitError(f"--layer-map {spec!r}: expected student:teacher pairs, e.g. 0:1,1:3,2:5")
        i, j = int(s), int(t)
        if not (0 <= i < student_layers and 0 <= j < teacher_layers):
            raise BertkitError(f"--layer-map {spec!r}: {i}:{j} is out of range (student layers 0 to "
                               f"{student_layers - 1}, teacher layers 0 to {teacher_layers - 1})")
        found[i] = j
    return found


# ---- what the losses read inside a model ------------------------------------------------------------------------

class Probe:
    """Keeps, as a model runs, the outputs of some of its encoder's layers and their attention scores."""

    def __init__(self, model: nn.Module, layers: list[int], hidden: bool, attention: bool):
        self.hidden: dict[int, torch.Tensor] = {}
        self.scores: dict[int, torch.Tensor] = {}
        self.handles = []
        for i in layers:
            layer = encoder_of(model).layers[i]
            if hidden:
                self.handles.append(layer.register_forward_hook(self._keep_output(i)))
            if attention:
                self.handles.append(layer.attention.register_forward_hook(self._keep_scores(i)))

    def _keep_output(self, i: int) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
            self.hidden[i] = output  # (N, H) packed, or (B, T, H)
        return hook

    def _keep_scores(self, i: int) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
            x, packing = args
            q, k, _ = module.heads(x, packing)  # (B, nh, T, hd) each
            self.scores[i] = q @ k.transpose(-1, -2) / math.sqrt(module.head_dim)  # (B, nh, T, T)
        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


# ---- the losses ---------------------------------------------------------------------------------------------------

def kl_at(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL(teacher || student) of softmax(logits / T) over the last axis, per row, times T^2 (Hinton et al.)."""
    t = F.log_softmax(teacher.float() / temperature, -1)
    s = F.log_softmax(student.float() / temperature, -1)
    return (t.exp() * (t - s)).sum(-1) * temperature**2


def soft_loss(student: torch.Tensor, teacher: torch.Tensor, temperature: float, kind: str,
              mask: torch.Tensor | None = None) -> torch.Tensor:
    """The soft-target loss of one output, averaged over rows (or over the real tokens of `mask`, (B, T)):
    "classes" KL at T; "labels" (multi-label) binary cross-entropy against sigmoid(teacher / T), times T^2;
    "score" (regression) squared error; "emissions" (a CRF's) squared error of the scores; "positions" (a span's start
    or end) KL at T over each row's real tokens of `mask`, averaged over rows; "vectors" (an embedder's) the mean
    squared error of each row's vector (sentence-transformers' MSELoss)."""
    if kind == "positions":
        low = torch.tensor(-1e4, dtype=torch.float32, device=student.device)
        real = mask if mask is not None else torch.ones_like(student, dtype=torch.bool)
        per = kl_at(torch.where(real, student.float(), low), torch.where(real, teacher.float(), low), temperature)
        mask = None  # one distribution a row
    elif kind == "classes":
        per = kl_at(student, teacher, temperature)
    elif kind == "labels":
        per = F.binary_cross_entropy_with_logits(student.float() / temperature, torch.sigmoid(teacher.float() / temperature),
                                                 reduction="none").mean(-1) * temperature**2
    elif kind == "vectors":
        if student.shape[-1] != teacher.shape[-1]:
            raise BertkitError(f"the student's vectors ({student.shape[-1]}) are not the teacher's ({teacher.shape[-1]}) "
                               "wide: an embedder's student keeps its width (--student layers:...)")
        per = (student.float() - teacher.float()).pow(2).mean(-1)
    elif kind in ("score", "emissions"):
        per = (student.float() - teacher.float()).pow(2).reshape(*student.shape[: 2 if mask is not None else 1], -1).mean(-1)
    else:
        raise ValueError(f"unknown output kind {kind!r}")
    if mask is None:
        return per.mean()
    mask = mask.to(per.dtype)
    return (per * mask).sum() / mask.sum().clamp(min=1)


def hidden_mse(student: torch.Tensor, teacher: torch.Tensor, projection: nn.Module | None = None) -> torch.Tensor:
    """Mean squared error of a student layer's output (projected to the teacher's width) and a teacher layer's,
    over the real tokens (both packed the same way, or both padded alike)."""
    if projection is not None:
        student = projection(student)
    return F.mse_loss(student.float(), teacher.float())


def attention_mse(student: torch.Tensor, teacher: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error of attention scores, (B, nh, T, T), over the real query and key pairs."""
    if student.shape[1] != teacher.shape[1]:
        raise BertkitError(f"the attention loss compares head by head: the student has {student.shape[1]} heads, "
                           f"the teacher {teacher.shape[1]} (set the attention weight to 0)")
    real = attention_mask.bool()
    pairs = (real[:, None, :, None] & real[:, None, None, :]).expand_as(student)
    return F.mse_loss(student.float()[pairs], teacher.float()[pairs])


def projections(student: Pretrained, teacher: Pretrained, layers: dict[int, int]) -> nn.ModuleDict | None:
    """Learned maps from the student's width to the teacher's, one per mapped layer (None when widths agree);
    trained with the student, dropped from the saved model."""
    s, t = student.config.hidden_size, teacher.config.hidden_size
    if s == t:
        return None
    return nn.ModuleDict({str(i): nn.Linear(s, t) for i in layers})

