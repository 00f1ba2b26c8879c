"""Task heads (they return tensors), their losses (plain functions), and the models that put a head
on the encoder: BertForPreTraining, and the TaskModel classes BertForSequenceClassification,
BertForQuestionAnswering and BertForTokenClassification (the encoder and a Head, composed).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .config import IGNORE, BertConfig
from .crf import CRF, pack_words
from .errors import BertkitError
from .folders import architecture_of
from .model import BertModel, BertOutput, Pretrained, activation


class MaskedLMHead(nn.Module):
    """dense + activation + LayerNorm, then the decoder tied to the word embeddings, plus a bias."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.act = activation(cfg.hidden_act)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, hidden: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        """(..., H) -> (..., V); `word_embeddings` is the (V, H) input embedding matrix."""
        return F.linear(self.norm(self.act(self.dense(hidden))), word_embeddings, self.bias)


class Classifier(nn.Module):
    """Dropout then a linear layer: sequence classification on the pooled output, or tagging per token."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        p = cfg.classifier_dropout if cfg.classifier_dropout is not None else cfg.hidden_dropout_prob
        self.dropout = nn.Dropout(p)
        self.linear = nn.Linear(cfg.hidden_size, cfg.num_labels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.dropout(x))


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the predicted positions; logits (M, V) or (B, T, V), labels to match."""
    return F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten(), ignore_index=IGNORE)


def classification_loss(logits: torch.Tensor, labels: torch.Tensor, problem_type: str | None) -> torch.Tensor:
    """Cross-entropy over classes; mean squared error when the task is regression (one output); for multi-label,
    binary cross-entropy of every label's sigmoid, averaged over labels and examples (as transformers does)."""
    if problem_type == "multi_label_classification":
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())
    if problem_type == "regression" or logits.shape[-1] == 1:
        return F.mse_loss(logits.squeeze(-1).float(), labels.float())
    return F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten(), ignore_index=IGNORE)


def span_logits(head: nn.Linear, hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """(B, T, 2) start and end logits from (B, T, H); padding gets the lowest logit, so that the span softmax
    (and its loss) runs over real tokens only. Google's and Hugging Face's losses also give probability to [PAD]."""
    logits = head(hidden)
    if attention_mask is not None:
        logits = logits.masked_fill(~attention_mask.bool()[..., None], torch.finfo(logits.dtype).min)
    return logits


def span_loss(start_logits: torch.Tensor, end_logits: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """Mean over examples of the start and end cross-entropies averaged; positions past the sequence carry no loss."""
    T = start_logits.shape[1]
    starts, ends = starts.clamp(0, T), ends.clamp(0, T)  # T is out of range: ignored, as in transformers
    start = F.cross_entropy(start_logits.float(), starts, ignore_index=T)
    end = F.cross_entropy(end_logits.float(), ends, ignore_index=T)
    return (start + end) / 2


@dataclass
class PreTrainingOutput:
    loss: torch.Tensor | None  # MLM + NSP, when both labels are given
    mlm_loss: torch.Tensor | None
    nsp_loss: torch.Tensor | None
    prediction_logits: torch.Tensor  # (M, V) at the predicted positions when mlm_labels is given, else (B, T, V)
    seq_relationship_logits: torch.Tensor  # (B, 2); class 0 = IsNext, 1 = NotNext


class BertForPreTraining(Pretrained):
    """The encoder with the masked-LM head (tied to the word embeddings) and the next-sentence head."""

    hf_architecture = "BertForPreTraining"
    head_prefixes = ("mlm.", "nsp.")

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, init=False)
        self.mlm = MaskedLMHead(config)
        self.nsp = nn.Linear(config.hidden_size, 2)
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        mlm_labels: torch.Tensor | None = None,
        nsp_labels: torch.Tensor | None = None,
        dense_logits: bool = False,
        packed_indices: torch.Tensor | None = None,
        mlm_positions: torch.Tensor | None = None,
    ) -> PreTrainingOutput:
        """mlm_labels (B, T) hold the original token where a prediction is made and -100 elsewhere.

        With mlm_labels the MLM head runs only at the predicted positions (about 15% of tokens, as in
        NVIDIA's BERT) and `prediction_logits` is (M, V) in row-major order of those positions;
        `dense_logits=True` (or no labels) gives logits at every position, (B, T, V).
        `packed_indices` (see BertModel) and `mlm_positions` (the flat positions where mlm_labels != -100)
        may come precomputed with the batch, so that a training step never waits on the device.
        """
        out = self.bert(input_ids, attention_mask, token_type_ids, packed_indices=packed_indices)
        hidden = out.last_hidden_state  # (B, T, H)
        seq_logits = self.nsp(out.pooler_output)  # (B, 2)
        if mlm_labels is not None and not dense_logits:
            picked = mlm_positions if mlm_positions is not None else (mlm_labels.flatten() != IGNORE).nonzero().squeeze(1)  # (M,)
            hidden = hidden.flatten(0, 1).index_select(0, picked)  # (M, H)
            mlm_targets = mlm_labels.flatten().index_select(0, picked)
        else:
            mlm_targets = mlm_labels
        logits = self.mlm(hidden, self.bert.embeddings.word_embeddings.weight)
        lm = mlm_loss(logits, mlm_targets) if mlm_targets is not None else None
        ns = F.cross_entropy(seq_logits.float(), nsp_labels) if nsp_labels is not None else None
        total = lm + ns if lm is not None and ns is not None else None
        return PreTrainingOutput(total, lm, ns, logits, seq_logits)


# ---- task heads, and the task model that puts one on the encoder ---------------------------------------------


class Head(nn.Module):
    """A task head: the encoder's output -> the task's outputs (an output dataclass, its `loss` None); `loss` gives
    their loss against targets. Its `parts` are the modules it holds, under the names transformers gives them: a
    TaskModel holds them at its top level, so checkpoints keep transformers' parameter names."""

    parts: ClassVar[tuple[str, ...]]  # attribute names of its modules (an optional one may be None)
    output: ClassVar[type]  # its output dataclass: `loss`, then the outputs
    targets: ClassVar[tuple[str, ...]]  # the keyword arguments of `loss` that a forward with targets takes
    pooled: ClassVar[bool] = False  # reads the pooled [CLS] vector (the encoder keeps its pooler)
    per_token: ClassVar[frozenset[str]] = frozenset()  # outputs given per token, (B, T, ...), not per row

    @classmethod
    def outputs(cls) -> tuple[str, ...]:
        """The names of its outputs, in order (as an exported graph names them)."""
        return tuple(f.name for f in dataclasses.fields(cls.output) if f.name != "loss")


@dataclass
class SequenceClassifierOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor  # (B, num_labels)


class SequenceClassificationHead(Head):
    """The pooled [CLS] vector -> N classes, one score (regression) or N independent labels (multi-label)."""

    parts = ("classifier",)
    output = SequenceClassifierOutput
    targets = ("labels",)
    pooled = True

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.classifier = Classifier(config)

    def forward(self, encoded: BertOutput, attention_mask: torch.Tensor | None) -> SequenceClassifierOutput:
        return SequenceClassifierOutput(None, self.classifier(encoded.pooler_output))

    def loss(self, out: SequenceClassifierOutput, labels: torch.Tensor, class_weights: torch.Tensor | None = None,
             reduction: str = "mean") -> torch.Tensor:
        """The loss of the config's problem type; with `class_weights`, the cross-entropy weighted by class (the
        "mean" is over the weights, as PyTorch's `weight=`)."""
        if class_weights is not None:
            return F.cross_entropy(out.logits.float(), labels, weight=class_weights, reduction=reduction)
        return classification_loss(out.logits, labels, self.config.problem_type)


@dataclass
class QuestionAnsweringOutput:
    loss: torch.Tensor | None
    start_logits: torch.Tensor  # (B, T)
    end_logits: torch.Tensor  # (B, T)


class SpanHead(Head):
    """Extractive QA: a start and an end logit for every token of question + passage (padding: the lowest)."""

    parts = ("qa_outputs",)
    output = QuestionAnsweringOutput
    targets = ("start_positions", "end_positions")
    per_token = frozenset({"start_logits", "end_logits"})

    def __init__(self, config: BertConfig):
        super().__init__()
        self.qa_outputs = nn.Linear(config.hidden_size, 2)

    def forward(self, encoded: BertOutput, attention_mask: torch.Tensor | None) -> QuestionAnsweringOutput:
        start_logits, end_logits = span_logits(self.qa_outputs, encoded.last_hidden_state, attention_mask).unbind(-1)
        return QuestionAnsweringOutput(None, start_logits.contiguous(), end_logits.contiguous())

    def loss(self, out: QuestionAnsweringOutput, start_positions: torch.Tensor, end_positions: torch.Tensor) -> torch.Tensor:
        return span_loss(out.start_logits, out.end_logits, start_positions, end_positions)


@dataclass
class TokenClassifierOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor  # (B, T, num_labels)


class TaggingHead(Head):
    """Sequence labelling (NER): a label for every token; -100 marks tokens without one.

    With `config.crf`, a linear-chain CRF over the labelled (first sub-token) positions gives the loss
    and, at prediction, the best whole tag sequence; `logits` stay the per-token emission scores.
    """

    parts = ("classifier", "crf")
    output = TokenClassifierOutput
    targets = ("labels",)
    per_token = frozenset({"logits"})

    def __init__(self, config: BertConfig):
        super().__init__()
        self.classifier = Classifier(config)
        self.crf = CRF.for_labels([config.id2label[i] for i in range(config.num_labels)]) if config.crf else None

    def forward(self, encoded: BertOutput, attention_mask: torch.Tensor | None) -> TokenClassifierOutput:
        return TokenClassifierOutput(None, self.classifier(encoded.last_hidden_state))

    def loss(self, out: TokenClassifierOutput, labels: torch.Tensor) -> torch.Tensor:
        """The CRF's negative log-likelihood of each sentence, or the mean cross-entropy of the labelled tokens."""
        if self.crf is not None:
            return -self.crf(*pack_words(out.logits, labels)).mean()
        return F.cross_entropy(out.logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE)


# The config fields task heads are built from (labels, problem type, CRF): a student takes its teacher's.
HEAD_FIELDS = ("id2label", "problem_type", "crf")
# Every model class by the name transformers knows it by; each TaskModel class adds itself.
MODEL_CLASSES: dict[str, type[Pretrained]] = {cls.hf_architecture: cls for cls in (BertModel, BertForPreTraining)}


class TaskModel(Pretrained):
    """The encoder with one task head: forward runs the encoder, then the head; the loss is the head's.

    A class of it names its `head_type` and is named as transformers names that model (a new head: a Head and
    `class BertForX(TaskModel): head_type = XHead`); `Cls(config)` builds the encoder and the head from the config.
    """

    head_type: ClassVar[type[Head]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        cls.hf_architecture = cls.__name__
        cls.head_prefixes = tuple(f"{part}." for part in cls.head_type.parts)
        super().__init_subclass__(**kwargs)
        MODEL_CLASSES[cls.hf_architecture] = cls

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=self.head_type.pooled, init=False)
        head = self.head_type(config)
        for name in head.parts:  # registered here, in this order: transformers' names, and BERT's init order
            setattr(self, name, getattr(head, name))
        object.__setattr__(self, "head", head)  # not registered again: its parameters are the parts above
        self.init_weights()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, **targets: torch.Tensor | None) -> Any:
        """Gives the head's outputs; given all of its targets (labels, or start and end positions), their loss too."""
        unknown = set(targets) - set(self.head_type.targets)
        if unknown:
            raise TypeError(f"{type(self).__name__}.forward() got unexpected arguments {sorted(unknown)}")
        out = self.head(self.bert(input_ids, attention_mask, token_type_ids), attention_mask)
        if all(targets.get(name) is not None for name in self.head_type.targets):
            out.loss = self.loss_of(out, **targets)
        return out

    def loss_of(self, out: Any, **targets: Any) -> torch.Tensor:
        """The loss of outputs against their targets (what forward gives when it has them), as the head computes it."""
        return self.head.loss(out, **targets)


class BertForSequenceClassification(TaskModel):
    """A single text or a pair -> the pooled [CLS] output -> N classes, or one score (regression)."""

    head_type = SequenceClassificationHead


class BertForQuestionAnswering(TaskModel):
    """Extractive QA: a start and an end logit for every token of question + passage."""

    head_type = SpanHead


class BertForTokenClassification(TaskModel):
    """Sequence labelling (NER), with a CRF over the tags when `config.crf`."""

    head_type = TaggingHead


def load_model(directory: str | Path, kind: type[Pretrained] | None = None) -> Pretrained:
    """Gives the model saved in `directory`, of the class its config.json names (or `kind`, checked).

    A folder of another kind (a QA model where a classifier is wanted, say) is an error naming both.
    """
    saved = architecture_of(directory)
    if kind is None:
        kind = MODEL_CLASSES.get(saved or "BertModel", BertModel)
    elif saved is not None and saved != kind.hf_architecture and saved not in ("BertModel", "BertForPreTraining"):
        raise BertkitError(f"{directory}: holds a {saved}, not a {kind.hf_architecture}")
    return kind.from_pretrained(directory)


def to_tensors(batch: dict[str, np.ndarray], device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Gives a task's collated batch (numpy, bertkit.tasks) as tensors on `device`, for a model's forward."""
    return {k: torch.from_numpy(v).to(device) for k, v in batch.items()}


def parameter_counts(model: nn.Module) -> dict[str, int]:
    """Gives parameter counts by part (embeddings, encoder layers, pooler, each head) and in total."""
    counts: dict[str, int] = {}
    for name, p in model.named_parameters():
        part = name.removeprefix("bert.").split(".")[0]
        counts[part] = counts.get(part, 0) + p.numel()
    counts["total"] = sum(p.numel() for p in model.parameters())
    counts["total without embeddings"] = counts["total"] - counts.get("embeddings", 0)
    return counts
