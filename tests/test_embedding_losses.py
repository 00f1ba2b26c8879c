"""The embedders' losses against sentence-transformers' own on fixed batches (1e-6), GradCache against the
whole batch (loss and every gradient, 1e-5; dropout replayed), and the torchrun gather: 2 processes (gloo)
with half the batch each train as 1 process with all of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from bertkit.tasks.embedding_losses import cached_backward, cosent_loss, matryoshka, mnrl_loss

losses = pytest.importorskip("sentence_transformers.sentence_transformer.losses")


def batch(n: int = 8, h: int = 16, columns: int = 3, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, h, generator=g, dtype=torch.float64) for _ in range(columns)]


def st(loss: type, **options: object) -> object:
    return loss(None, **options)  # the model is only needed for its forward, which these calls skip


@pytest.mark.parametrize("columns", [2, 3, 4])  # pairs, triplets, a positive and two hard negatives
@pytest.mark.parametrize("scale", [20.0, 1.0])
def test_mnrl_equals_sentence_transformers(columns: int, scale: float) -> None:
    vectors = batch(columns=columns)
    ours = mnrl_loss(vectors[0], vectors[1:], scale=scale)
    ref = st(losses.MultipleNegativesRankingLoss, scale=scale).compute_loss_from_embeddings(vectors, None)
    torch.testing.assert_close(ours, ref, atol=1e-6, rtol=0)


def test_symmetric_mnrl_equals_sentence_transformers() -> None:
    vectors = batch(columns=2)
    try:  # sentence-transformers 6 folds the symmetric loss into MNRL's directions
        symmetric = st(losses.MultipleNegativesRankingLoss, directions=("query_to_doc", "doc_to_query"),
                       partition_mode="per_direction")
    except TypeError:
        symmetric = st(losses.MultipleNegativesSymmetricRankingLoss)
    ref = symmetric.compute_loss_from_embeddings(vectors, None)
    torch.testing.assert_close(mnrl_loss(vectors[0], vectors[1:], symmetric=True), ref, atol=1e-6, rtol=0)
    assert not torch.isclose(mnrl_loss(vectors[0], vectors[1:]), ref)  # the backward half counts


@pytest.mark.parametrize("gold", [[0.0, 1.2, 3.5, 3.5, 5.0, 0.4, 2.2, 4.9], [1, 0, 1, 1, 0, 0, 1, 0]])
def test_cosent_equals_sentence_transformers(gold: list[float]) -> None:
    a, b = batch(columns=2)
    labels = torch.tensor(gold, dtype=torch.float64)
    ref = st(losses.CoSENTLoss).compute_loss_from_embeddings([a, b], labels)
    torch.testing.assert_close(cosent_loss(a, b, labels), ref, atol=1e-6, rtol=0)


def test_matryoshka_sums_the_loss_over_leading_slices() -> None:
    vectors = batch(h=32)
    base = st(losses.MultipleNegativesRankingLoss)
    ref = sum(w * base.compute_loss_from_embeddings([v[:, :d] for v in vectors], None)
              for d, w in ((32, 1.0), (16, 1.0), (8, 0.5)))
    ours = matryoshka(lambda a, *c: mnrl_loss(a, c), vectors, dims=(32, 16, 8), weights=(1.0, 1.0, 0.5))
    torch.testing.assert_close(ours, ref, atol=1e-6, rtol=0)


def tiny_encoder(dropout: float) -> torch.nn.Module:
    from bertkit import BertConfig
    from bertkit.model import BertModel

    torch.manual_seed(0)
    return BertModel(BertConfig.preset("tiny", vocab_size=200, num_hidden_layers=2, hidden_dropout_prob=dropout,
                                       attention_probs_dropout_prob=dropout)).double()


def encoded(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    mask = (ids != 0).long()
    hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state  # (n, T, H)
    return (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)  # (n, H): mean pooling


def pieces(ids: torch.Tensor, size: int) -> list[torch.Tensor]:
    return list(ids.split(size))


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_gradcache_gives_the_loss_and_gradients_of_the_whole_batch(dropout: float) -> None:
    g = torch.Generator().manual_seed(1)
    columns = [torch.randint(1, 200, (12, 9), generator=g) for _ in range(3)]
    for col in columns:
        col[::3, 6:] = 0  # padding, unevenly
    loss_of = lambda v: mnrl_loss(v[0], v[1:], symmetric=True)  # noqa: E731

    model = tiny_encoder(dropout)
    torch.manual_seed(7)
    if dropout:  # dropout draws per forward pass: the reference encodes the same pieces in the same order
        whole = loss_of([torch.cat([encoded(model, p) for p in pieces(c, 5)]) for c in columns])
    else:
        whole = loss_of([encoded(model, c) for c in columns])
    whole.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    model = tiny_encoder(dropout)
    torch.manual_seed(7)
    cached = cached_backward(lambda p: encoded(model, p), [pieces(c, 5) for c in columns], loss_of)
    torch.testing.assert_close(cached, whole.detach(), atol=1e-5, rtol=0)
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert grads.keys() == expected.keys() and len(grads) > 20
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected[name], atol=1e-5, rtol=0, msg=name)


def _gathered(rank: int, world: int, init: str, out: str) -> None:
    torch.distributed.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        encoder = torch.nn.Linear(6, 4).double()
        anchors, positives, negatives = (x.chunk(world)[rank] for x in _inputs())
        loss = mnrl_loss(encoder(anchors), [encoder(positives), encoder(negatives)], symmetric=True, gathered=True)
        loss.backward()
        for p in encoder.parameters():  # what DDP does: gradients averaged over the processes
            torch.distributed.all_reduce(p.grad)
            p.grad /= world
        torch.save({"loss": loss.detach(), "grads": [p.grad for p in encoder.parameters()]}, f"{out}.{rank}")
    finally:
        torch.distributed.destroy_process_group()


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return [torch.randn(8, 6, generator=g, dtype=torch.float64) for _ in range(3)]


@pytest.mark.slow  # two processes
def test_two_processes_with_gathered_negatives_train_as_one_with_the_whole_batch(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    mp.spawn(_gathered, args=(2, f"file://{tmp_path / 'rendezvous'}", str(tmp_path / "out")), nprocs=2)
    parts = [torch.load(tmp_path / f"out.{r}") for r in range(2)]
    torch.manual_seed(0)
    encoder = torch.nn.Linear(6, 4).double()
    anchors, positives, negatives = _inputs()
    whole = mnrl_loss(encoder(anchors), [encoder(positives), encoder(negatives)], symmetric=True)
    whole.backward()
    torch.testing.assert_close((parts[0]["loss"] + parts[1]["loss"]) / 2, whole.detach(), atol=1e-10, rtol=0)
    for r in range(2):
        for grad, expected in zip(parts[r]["grads"], (p.grad for p in encoder.parameters()), strict=True):
            torch.testing.assert_close(grad, expected, atol=1e-10, rtol=0)
    single = mnrl_loss(encoder(anchors[:4]), [encoder(positives[:4]), encoder(negatives[:4])])
    assert not torch.isclose(parts[0]["loss"], single)  # the other process's negatives took part
