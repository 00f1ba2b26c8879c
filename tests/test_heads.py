"""Heads by composition: each task model is the encoder and a Head; a new head is a Head and one class line, and
what reads model classes (loading, export, the task families) learns of it from there."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

from bertkit import BertConfig
from bertkit.export import _outputs
from bertkit.heads import MODEL_CLASSES, Head, TaskModel, load_model
from bertkit.model import BertOutput, Pretrained
from bertkit.tasks import FAMILIES, get_task

OPTIONS = [("classify", {}), ("classify", {"regression": True}), ("classify", {"multi_label": True}), ("pair", {}),
           ("qa", {}), ("ner", {}), ("ner", {"crf": True})]


@pytest.mark.parametrize(("name", "options"), OPTIONS)
def test_every_family_reads_what_its_head_gives(name: str, options: dict) -> None:
    task = get_task(name, **options)
    head = MODEL_CLASSES[task.architecture].head_type
    assert set(task.outputs) <= set(head.outputs())
    assert {task.per_token} == {n in head.per_token for n in task.outputs}
    assert {k for k in options if k in FAMILIES[name].options} == set(options)


def test_a_task_model_is_the_encoder_and_its_heads_parts() -> None:
    cfg = BertConfig.preset("tiny", vocab_size=100).with_labels(["O", "B-X", "I-X"])
    tagger = MODEL_CLASSES["BertForTokenClassification"](cfg)
    assert tagger.crf is None and tagger.bert.pooler is None  # a tagger reads tokens, not the pooled [CLS]
    assert {k.split(".")[0] for k in tagger.state_dict()} == {"bert", "classifier"}
    with_crf = MODEL_CLASSES["BertForTokenClassification"](cfg.replace(crf=True))
    assert {k.split(".")[0] for k in with_crf.state_dict()} == {"bert", "classifier", "crf"}
    assert not any(k.startswith("head.") for k in with_crf.state_dict())  # the head's parts are counted once
    with pytest.raises(TypeError, match="unexpected arguments"):
        tagger(torch.tensor([[2, 5, 3]]), start_positions=torch.tensor([1]))


@dataclass
class EmbeddingOutput:
    loss: torch.Tensor | None
    embeddings: torch.Tensor  # (B, 8)


class MeanPoolHead(Head):
    """The mean of the real tokens' hidden states, projected to 8 numbers."""

    parts = ("projection",)
    output = EmbeddingOutput
    targets = ("labels",)

    def __init__(self, config: BertConfig):
        super().__init__()
        self.projection = nn.Linear(config.hidden_size, 8)

    def forward(self, encoded: BertOutput, attention_mask: torch.Tensor | None) -> EmbeddingOutput:
        hidden = encoded.last_hidden_state  # (B, T, H), zero at padding
        count = hidden.new_tensor(hidden.shape[1]) if attention_mask is None else attention_mask.sum(1, keepdim=True)
        return EmbeddingOutput(None, self.projection(hidden.sum(1) / count))

    def loss(self, out: EmbeddingOutput, labels: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(out.embeddings, labels)


def test_a_new_head_is_a_head_and_one_class_line(tmp_path: Path) -> None:
    class BertForMeanEmbedding(TaskModel):
        head_type = MeanPoolHead

    try:
        assert MODEL_CLASSES["BertForMeanEmbedding"] is BertForMeanEmbedding and "projection." in Pretrained.every_head
        torch.manual_seed(0)
        model = BertForMeanEmbedding(BertConfig.preset("tiny", vocab_size=100)).eval()
        ids, mask = torch.tensor([[2, 7, 9, 3], [2, 8, 3, 0]]), torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
        out = model(ids, mask, labels=torch.zeros(2, 8))
        assert out.embeddings.shape == (2, 8) and out.loss is not None and out.loss.item() > 0
        model.save_pretrained(tmp_path)
        again = load_model(tmp_path).eval()  # found by the name config.json gives it
        assert type(again) is BertForMeanEmbedding and again.load_report.newly_initialized == []
        torch.testing.assert_close(again(ids, mask).embeddings, model(ids, mask).embeddings)
        assert _outputs(BertForMeanEmbedding) == (("embeddings",), frozenset())  # what an export would name
    finally:
        del MODEL_CLASSES["BertForMeanEmbedding"]
        Pretrained.every_head.discard("projection.")
