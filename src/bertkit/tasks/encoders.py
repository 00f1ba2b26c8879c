"""How the embed and rerank families train (their `Learner`s, bertkit.tasks.base): the model, the loss over a batch of
groups, and the files a trained folder carries. Torch lives here, apart from the families' data side.

An embedder is a `SentenceEncoder`: BERT, then the pooling of its last layer into one vector a text. A batch holds
every text of its groups in turn (anchor, positive, negatives of group 0, then of group 1, ...), encoded together;
`EmbedObjective` cuts the vectors into columns and takes the loss (bertkit.tasks.embedding_losses). With
`gradient_cache` it runs its own backward passes (GradCache), a piece of the batch at a time. A reranker is a pair
model with one logit (sentence-transformers' CrossEncoder): binary cross-entropy a pair, or a softmax over each
query's group (listwise).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..config import BertConfig
from ..errors import BertkitError
from ..model import BertModel
from ..sentence_files import SentenceConfig, write_sentence_config
from .base import Features
from .embedding_losses import cached_backward, cosent_loss, gather, matryoshka, mnrl_loss
from .groups import GroupFeatures, regroup

log = logging.getLogger("bertkit")
Batch = dict[str, torch.Tensor]
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


# ---- embedders ------------------------------------------------------------------------------------------

@dataclass
class SentenceOutput:
    sentence_embedding: torch.Tensor  # (B, H)


class SentenceEncoder(nn.Module):
    """BERT and a pooling: texts -> one vector each (mean of the token vectors, [CLS]'s, or the pooler's output)."""

    def __init__(self, bert: BertModel, pooling: str):
        super().__init__()
        self.bert, self.pooling = bert, pooling

    @property
    def config(self) -> BertConfig:
        return self.bert.config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> SentenceOutput:
        out = self.bert(input_ids, attention_mask, token_type_ids)
        if self.pooling == "pooler":
            assert out.pooler_output is not None
            return SentenceOutput(out.pooler_output)
        hidden = out.last_hidden_state
        if self.pooling == "cls":
            return SentenceOutput(hidden[:, 0])
        mask = (attention_mask if attention_mask is not None else torch.ones_like(input_ids))[..., None].to(hidden.dtype)
        return SentenceOutput((hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0))  # padding is zero already

    def gradient_checkpointing_enable(self) -> None:
        self.bert.gradient_checkpointing_enable()

    def save_pretrained(self, folder: Path) -> None:
        self.bert.save_pretrained(folder)


def sentence_encoder(folder: Path, pooling: str) -> SentenceEncoder:
    """The encoder of any model folder, pooled; without "pooler" pooling its pooler is frozen (kept as it was, so
    that the folder loads in transformers' BertModel whole, and left out of training)."""
    bert = BertModel.from_pretrained(folder)
    if pooling != "pooler":
        assert bert.pooler is not None
        bert.pooler.requires_grad_(False)
    elif any(n.startswith("pooler.") for n in bert.load_report.newly_initialized):
        log.warning("%s: has no trained pooler; --pooling pooler trains one from scratch", folder)
    return SentenceEncoder(bert, pooling)


class EmbedLearner:
    def __init__(self, task: Any):  # an EmbedTask
        self.task = task

    def check(self, base: Path, train: Features) -> None:
        if train.rows and "score" in train.rows[0] and self.task.loss == "mnrl":
            raise BertkitError(f"{train.data.source}: scored pairs; --loss mnrl trains on pairs or groups (a positive "
                               "each), scored pairs train with --loss cosent")
        hidden = BertConfig.load(base).hidden_size
        if self.task.matryoshka and self.task.matryoshka[0] > hidden:
            raise BertkitError(f"--matryoshka {','.join(map(str, self.task.matryoshka))}: {self.task.matryoshka[0]} is "
                               f"larger than the model's vectors ({hidden} dimensions)")

    def model(self, base: Path, labels: list[str]) -> SentenceEncoder:
        return sentence_encoder(base, self.task.pooling)

    def load(self, folder: Path) -> SentenceEncoder:
        return sentence_encoder(folder, self.task.pooling)

    def objective(self, device: torch.device) -> EmbedObjective:
        return EmbedObjective(self.task)

    def training_features(self, features: Features) -> GroupFeatures:
        scored = bool(features.rows) and "score" in features.rows[0]
        # random batches, as sentence-transformers' trainer draws them: batches by length would gather the groups
        # that share a text (a paragraph's several questions), each a false negative of the others
        return regroup(features, ("score",) if scored else (), bucket=False)

    def save(self, model: SentenceEncoder, folder: Path) -> None:
        model.save_pretrained(folder)
        if self.task.pooling == "pooler":
            log.warning("%s: sentence-transformers has no pooler pooling: serve it with --pooling pooler", folder)
            return
        config = SentenceConfig(self.task.pooling, self.task.normalize_vectors, self.task.max_seq_length)
        write_sentence_config(folder, config, model.config.hidden_size, _version())

    def student(self, teacher: SentenceEncoder, build: Callable[[BertModel], BertModel]) -> SentenceEncoder:
        """The student encoder, pooled as the teacher; its vectors learn the teacher's, so it keeps their width."""
        encoder = build(teacher.bert)
        if encoder.config.hidden_size != teacher.config.hidden_size:
            raise BertkitError(f"an embedder's student learns the teacher's vectors: it needs their width "
                               f"({teacher.config.hidden_size}), not {encoder.config.hidden_size}; use --student layers:...")
        if self.task.pooling != "pooler" and encoder.pooler is not None:
            encoder.pooler.requires_grad_(False)
        return SentenceEncoder(encoder, self.task.pooling)

    def hard_loss(self, outputs: SentenceOutput, batch: Batch) -> None:
        return None  # the pairs' own loss needs whole groups: distillation's rows are single texts


def encode_columns(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Every text's vector, (texts, H) in the batch's order, each column (the anchors, the positives, ...) encoded as
    its own batch cut to its longest text: short queries are not padded to the length of their passages."""
    position = batch["position"]
    columns = int(position[-1]) + 1  # the last text of a batch is its last group's last column
    out: torch.Tensor | None = None
    for c in range(columns):
        rows = (position == c).nonzero().squeeze(1)
        vectors = _encode(model, {k: batch[k][rows] for k in INPUTS}, last=c == columns - 1)
        if out is None:
            out = vectors.new_zeros(position.shape[0], vectors.shape[1])
        out = out.index_copy(0, rows, vectors)
    assert out is not None
    return out


def _encode(model: nn.Module, inputs: Batch, last: bool) -> torch.Tensor:
    """The vectors of one part of a batch, its padding cut to its longest text. Under torchrun, DistributedDataParallel
    prepares one backward pass a forward: the `last` part's; the others run without (no_sync)."""
    longest = int(inputs["attention_mask"].sum(1).max())
    quiet = not last and torch.is_grad_enabled() and hasattr(model, "no_sync")
    with model.no_sync() if quiet else contextlib.nullcontext():  # type: ignore[operator]
        return model(**{k: v[:, :longest] for k, v in inputs.items()}).sentence_embedding


def _version() -> str:
    try:
        return metadata.version("bertkit")
    except metadata.PackageNotFoundError:
        return "unknown"


class EmbedObjective:
    """The embed task's loss on a batch of groups, averaged over its groups (anchors, or scored pairs)."""

    loss_terms = ("loss",)
    per = {"loss": "n"}

    def __init__(self, task: Any):  # an EmbedTask
        self.task = task

    def counts(self, batch: Batch) -> dict[str, torch.Tensor]:
        return {"n": batch["row"][-1] + 1}

    def loss(self, vectors: torch.Tensor, batch: Batch) -> torch.Tensor:
        """The mean loss of the batch's groups from every text's vector, (texts, H) in the batch's order."""
        groups = int(batch["row"][-1]) + 1
        columns = list(vectors.float().view(groups, -1, vectors.shape[-1]).unbind(1))  # anchors, positives, negatives
        task = self.task
        if task.loss == "cosent":
            gold = gather(batch["score"].view(groups, -1)[:, 0])[0]  # outside torchrun, as it is

            def each(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
                return cosent_loss(gather(a)[0], gather(b)[0], gold, task.scale)
        else:
            def each(a: torch.Tensor, *candidates: torch.Tensor) -> torch.Tensor:
                return mnrl_loss(a, candidates, task.scale, task.symmetric, gathered=True)
        if task.matryoshka:
            return matryoshka(each, columns, task.matryoshka)
        return each(*columns)

    def __call__(self, model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
        return {"loss": self.loss(encode_columns(model, batch), batch) * self.counts(batch)["n"]}

    @property
    def backward(self) -> Callable[..., dict[str, torch.Tensor]] | None:
        """With GradCache: runs the batch's forward and backward passes itself (see bertkit.train.Objective)."""
        return self._cached if self.task.gradient_cache else None

    def _cached(self, model: nn.Module, batch: Batch, to_loss: Callable[[dict[str, torch.Tensor]], torch.Tensor]
                ) -> dict[str, torch.Tensor]:
        size = self.task.gradient_cache
        n = batch["input_ids"].shape[0]
        pieces = [{k: batch[k][lo : lo + size] for k in INPUTS} for lo in range(0, n, size)]

        def encode(piece: Batch) -> torch.Tensor:
            # under torchrun, gradients are averaged across processes once: with the last piece's backward pass
            return _encode(model, piece, last=piece is pieces[-1]).float()

        sums: dict[str, torch.Tensor] = {}

        def loss_of(columns: list[torch.Tensor]) -> torch.Tensor:
            sums["loss"] = self.loss(columns[0], batch) * self.counts(batch)["n"]
            return to_loss(sums)

        cached_backward(encode, [pieces], loss_of)
        return {k: v.detach() for k, v in sums.items()}


# ---- rerankers ----------------------------------------------------------------------------------------

class RerankLearner:
    def __init__(self, task: Any):  # a RerankTask
        self.task = task

    def check(self, base: Path, train: Features) -> None:
        if self.task.loss == "listwise":
            _check_groups(train)

    def model(self, base: Path, labels: list[str]) -> nn.Module:
        from ..heads import BertForSequenceClassification

        return BertForSequenceClassification.from_pretrained(base, id2label={0: "score"}, problem_type=None)

    def load(self, folder: Path) -> nn.Module:
        from ..heads import BertForSequenceClassification

        return BertForSequenceClassification.from_pretrained(folder)

    def objective(self, device: torch.device) -> RerankObjective:
        return RerankObjective(self.task.loss)

    def training_features(self, features: Features) -> Features:
        if self.task.loss == "bce":
            return features
        _check_groups(features)
        return regroup(features, ("relevance",))

    def save(self, model: nn.Module, folder: Path) -> None:
        model.save_pretrained(folder)  # type: ignore[operator]

    def student(self, teacher: nn.Module, build: Callable[[nn.Module], nn.Module]) -> nn.Module:
        return build(teacher)

    def hard_loss(self, outputs: Any, batch: Batch) -> torch.Tensor:
        """Binary cross-entropy of each pair's logit against its relevance, averaged over the pairs."""
        return F.binary_cross_entropy_with_logits(outputs.logits[:, 0].float(), batch["relevance"].float())


def _check_groups(features: Features) -> None:
    """A BertkitError unless every example holds two candidates or more (a group a listwise loss can rank)."""
    if len(features) and np.bincount(features.example_index).min() < 2:
        raise BertkitError(f"{features.data.source}: --loss listwise ranks each query's group: it needs groups "
                           "(query, positive, negatives), not pairs; use --loss bce for labelled pairs")


class RerankObjective:
    """bce: binary cross-entropy of each pair's logit against its relevance (0-1), averaged over pairs. listwise:
    cross-entropy of the softmax over each group's logits against its relevances (the positive first), over groups."""

    loss_terms = ("loss",)
    per = {"loss": "n"}

    def __init__(self, loss: str):
        self.listwise = loss == "listwise"

    def counts(self, batch: Batch) -> dict[str, torch.Tensor]:
        if self.listwise:
            return {"n": batch["row"][-1] + 1}
        return {"n": torch.tensor(batch["input_ids"].shape[0], device=batch["input_ids"].device)}

    def __call__(self, model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
        logits = model(**{k: batch[k] for k in INPUTS}).logits[:, 0].float()
        target = batch["relevance"].float()
        if not self.listwise:
            return {"loss": F.binary_cross_entropy_with_logits(logits, target, reduction="sum")}
        groups = int(batch["row"][-1]) + 1
        target = target.view(groups, -1)
        target = target / target.sum(1, keepdim=True).clamp(min=1e-12)
        return {"loss": F.cross_entropy(logits.view(groups, -1), target, reduction="sum")}
