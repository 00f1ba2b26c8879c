"""The real pretrained weights of all-MiniLM-L6-v2: bertkit's encoder equals transformers' to 1e-5,
and its sentence embeddings behave like embeddings."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

import bertkit

SENTENCES = [
    "A man is playing a guitar.",
    "Someone plays an acoustic guitar on stage while the crowd sings along.",
    "The stock market fell sharply on Monday after the central bank raised interest rates.",
    "Cats sleep.",
    "Naïve café-goers in Zürich didn't expect ünïcödé, did they?",
    "",
]


@pytest.fixture(scope="module")
def minilm(shared_data: Path) -> Path:
    return shared_data / "models/all-MiniLM-L6-v2"


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask[..., None].float()
    return torch.nn.functional.normalize((hidden * m).sum(1) / m.sum(1), dim=-1)


def test_minilm_hidden_states_match_transformers(minilm: Path) -> None:
    tok = bertkit.Tokenizer.from_pretrained(minilm)
    batch = tok(SENTENCES, padding=True, truncation=True, max_length=128, return_tensors="pt")
    ours = bertkit.BertModel.from_pretrained(minilm).eval()
    assert ours.load_report.newly_initialized == [] and ours.load_report.unused == []
    hf = transformers.BertModel.from_pretrained(minilm).eval()
    with torch.no_grad():
        a, b = ours(**batch), hf(**batch)
    valid = batch["attention_mask"].bool()
    assert valid.sum(1).unique().numel() > 3, "sentences of different lengths"
    torch.testing.assert_close(a.last_hidden_state[valid], b.last_hidden_state[valid], atol=1e-5, rtol=0)
    torch.testing.assert_close(a.pooler_output, b.pooler_output, atol=1e-5, rtol=0)


def test_minilm_embeddings_rank_a_paraphrase_first(minilm: Path) -> None:
    tok = bertkit.Tokenizer.from_pretrained(minilm)
    model = bertkit.BertModel.from_pretrained(minilm).eval()
    query = "How do I reset my password?"
    candidates = ["What are the steps to change my login password?", "The weather in Lisbon is mild in winter.",
                  "My password does not matter to the recipe.", "Bananas are rich in potassium."]
    batch = tok([query, *candidates], padding=True, return_tensors="pt")
    with torch.no_grad():
        emb = mean_pool(model(**batch).last_hidden_state, batch["attention_mask"])
    sims = emb[1:] @ emb[0]
    assert sims.argmax().item() == 0, sims
    assert sims[0] > 0.6 and sims[1] < 0.3


def test_minilm_loads_into_every_task_model(minilm: Path) -> None:
    clf = bertkit.BertForSequenceClassification.from_pretrained(minilm, id2label={0: "neg", 1: "pos"})
    assert clf.load_report.newly_initialized == ["classifier.linear.weight", "classifier.linear.bias"]
    qa = bertkit.BertForQuestionAnswering.from_pretrained(minilm)
    assert qa.load_report.newly_initialized == ["qa_outputs.weight", "qa_outputs.bias"]
    assert qa.load_report.unused == ["bert.pooler.dense.bias", "bert.pooler.dense.weight"]
    pt = bertkit.BertForPreTraining.from_pretrained(minilm)
    assert set(pt.load_report.newly_initialized) == {
        "mlm.bias", "mlm.dense.weight", "mlm.dense.bias", "mlm.norm.weight", "mlm.norm.bias", "nsp.weight", "nsp.bias"}
