"""The CRF against brute-force enumeration of every tag sequence on tiny inputs."""

from __future__ import annotations

import itertools

import torch

from bertkit.crf import CRF, pack_words
from bertkit.schemes import tag_set


def _path_score(crf: CRF, em: torch.Tensor, path: tuple[int, ...]) -> torch.Tensor:
    start, trans, end = crf._scores()
    s = start[path[0]] + em[0, path[0]]
    for t in range(1, len(path)):
        s = s + trans[path[t - 1], path[t]] + em[t, path[t]]
    return s + end[path[-1]]


def _brute(crf: CRF, em: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
    """Gives log Z and the best path of one (T, C) sequence by enumerating all C^T paths."""
    paths = list(itertools.product(range(em.shape[1]), repeat=em.shape[0]))
    scores = torch.stack([_path_score(crf, em, p) for p in paths])
    return torch.logsumexp(scores, 0), paths[int(scores.argmax())]


def test_likelihood_and_viterbi_equal_brute_force_with_mask():
    torch.manual_seed(0)
    C, T = 3, 4
    crf = CRF(C)
    with torch.no_grad():
        crf.transitions.normal_()
        crf.start.normal_()
        crf.end.normal_()
    em = torch.randn(3, T, C)
    lengths = [4, 2, 1]
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    tags = torch.randint(0, C, (3, T)).masked_fill(~mask, -100)
    ll = crf(em, tags, mask)
    best = crf.decode(em, mask)
    for b, n in enumerate(lengths):
        log_z, path = _brute(crf, em[b, :n])
        gold = _path_score(crf, em[b, :n], tuple(tags[b, :n].tolist()))
        torch.testing.assert_close(ll[b], gold - log_z)
        assert tuple(best[b]) == path


def test_constraints_rule_out_forbidden_transitions():
    torch.manual_seed(1)
    labels = tag_set(["LOC", "PER"], "BIOES")  # O, B/I/E/S-LOC, B/I/E/S-PER
    crf = CRF.for_labels(labels)
    em = torch.randn(20, 6, len(labels)) * 3
    for path in crf.decode(em):
        tags = [labels[i] for i in path]
        assert tags[0][0] in "OBS" and tags[-1][0] in "OES"
        for a, b in itertools.pairwise(tags):
            if a[0] in "BI":
                assert b[0] in "IE" and b[2:] == a[2:], (a, b)
            else:
                assert b[0] in "OBS", (a, b)
    _, path = _brute(crf, em[0, :3])
    assert tuple(crf.decode(em[:1, :3])[0]) == path  # constraints are part of the scores brute force sees


def test_gradients_equal_brute_force_and_empty_rows_give_zero():
    torch.manual_seed(2)
    crf = CRF(4)
    em = torch.randn(2, 5, 4, requires_grad=True)
    mask = torch.tensor([[True] * 5, [False] * 5])
    ll = crf(em, torch.zeros(2, 5, dtype=torch.long), mask)
    (-ll.sum()).backward()
    # the same log-likelihood by enumerating all 4^5 paths, and its gradients by autograd through the enumeration
    leaf = em.detach()[0].clone().requires_grad_(True)
    log_z, _ = _brute(crf, leaf)
    brute = _path_score(crf, leaf, (0,) * 5) - log_z
    grads = torch.autograd.grad(-brute, [leaf, crf.start, crf.transitions, crf.end])
    torch.testing.assert_close(ll[0], brute.detach())
    torch.testing.assert_close(em.grad[0], grads[0])
    for got, want in zip((crf.start.grad, crf.transitions.grad, crf.end.grad), grads[1:], strict=True):
        torch.testing.assert_close(got, want)
    # the row without words: log-likelihood 0, no gradient, no tags
    assert ll[1] == 0 and (em.grad[1] == 0).all()
    assert crf.decode(em.detach(), mask)[1] == []


def test_pack_words_moves_first_subtokens_left():
    labels = torch.tensor([[-100, 2, -100, 1, -100], [-100, 3, 0, 0, -100]])
    emissions = torch.arange(2 * 5 * 1, dtype=torch.float).view(2, 5, 1)
    em, tags, mask = pack_words(emissions, labels)
    assert tags.tolist() == [[2, 1, 0], [3, 0, 0]]
    assert mask.tolist() == [[True, True, False], [True, True, True]]
    assert em[0, :2, 0].tolist() == [1.0, 3.0] and em[1, :, 0].tolist() == [6.0, 7.0, 8.0]
