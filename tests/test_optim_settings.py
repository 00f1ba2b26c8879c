"""Optimizers, the learning-rate schedule, and strict typed settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from bertkit import BertConfig, BertForPreTraining, BertkitError, settings
from bertkit.optim import Lamb, build_optimizer, linear_schedule, parameter_groups, warmup_steps_for


def test_weight_decay_skips_layernorm_and_biases() -> None:
    model = BertForPreTraining(BertConfig.preset("tiny", vocab_size=50))
    decay, no_decay = parameter_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[id(p)] for p in no_decay["params"]} == {
        n for n, p in model.named_parameters() if n.endswith("bias") or "norm" in n
    }
    assert all(p.ndim == 2 for p in decay["params"]) and decay["weight_decay"] == 0.01


def test_schedule_matches_transformers() -> None:
    from transformers import get_linear_schedule_with_warmup

    def lrs(make) -> list[float]:
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=5e-5)
        sched = make(opt)
        out = []
        for _ in range(100):
            out.append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
        return out

    ours = lrs(lambda o: linear_schedule(o, 10, 100))
    theirs = lrs(lambda o: get_linear_schedule_with_warmup(o, 10, 100))
    assert ours == pytest.approx(theirs, abs=1e-12)
    assert warmup_steps_for(1000, 0.1) == 100 and warmup_steps_for(1000, 250) == 250


def test_lamb_matches_its_formula() -> None:
    torch.manual_seed(0)
    w0 = torch.randn(4, 3)
    grads = [torch.randn(4, 3) for _ in range(3)]
    p = torch.nn.Parameter(w0.clone())
    opt = Lamb([p], lr=0.1, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.01)
    w, m, v = w0.clone(), torch.zeros(4, 3), torch.zeros(4, 3)
    for t, g in enumerate(grads, start=1):
        p.grad = g.clone()
        opt.step()
        m = 0.9 * m + 0.1 * g
        v = 0.99 * v + 0.01 * g * g
        update = (m / (1 - 0.9**t)) / ((v / (1 - 0.99**t)).sqrt() + 1e-6) + 0.01 * w
        w = w - 0.1 * (w.norm() / update.norm()) * update
    torch.testing.assert_close(p.data, w, atol=1e-6, rtol=0)


def test_adamw_is_decoupled_and_fused_on_cpu() -> None:
    model = torch.nn.Linear(3, 3)
    opt = build_optimizer(model, "adamw", lr=1e-3)
    assert opt.defaults["fused"] is True and opt.defaults["eps"] == 1e-6
    with pytest.raises(BertkitError, match="adamw or lamb"):
        build_optimizer(model, "sgd")


@dataclass(frozen=True)
class Inner:
    lr: float = 1e-4
    steps: int = 10
    name: str = "adamw"
    path: Path | None = None
    betas: tuple[float, float] = (0.9, 0.999)

    def __post_init__(self) -> None:
        settings.check(self.steps > 0, f"inner.steps must be positive, got {self.steps}")


@dataclass(frozen=True)
class Outer:
    inner: Inner = field(default_factory=Inner)
    flag: bool = False


def test_settings_file_then_flags_then_overrides(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text('flag = true\n[inner]\nlr = 3e-4\nsteps = 5\nname = "lamb"\n')
    cfg = settings.load(Outer, f, overrides=["inner.steps=7", "inner.path=/x", "inner.betas=[0.8, 0.9]"],
                        flags={"inner.lr": 1e-3, "inner.name": None})
    assert cfg == Outer(Inner(lr=1e-3, steps=7, name="lamb", path=Path("/x"), betas=(0.8, 0.9)), flag=True)


def test_settings_are_strict(tmp_path: Path) -> None:
    with pytest.raises(BertkitError, match=r"unknown key inner\.stpes \(did you mean inner\.steps\?\)"):
        settings.load(Outer, overrides=["inner.stpes=3"])
    with pytest.raises(BertkitError, match="inner.steps must be int, got 'many'"):
        settings.load(Outer, overrides=["inner.steps=many"])
    with pytest.raises(BertkitError, match="inner.steps must be positive, got -1"):
        settings.load(Outer, overrides=["inner.steps=-1"])
    with pytest.raises(BertkitError, match="not key=value"):
        settings.load(Outer, overrides=["inner.steps"])
    bad = tmp_path / "bad.toml"
    bad.write_text("[inner\n")
    with pytest.raises(BertkitError, match="bad.toml: not valid TOML"):
        settings.load(Outer, bad)
    with pytest.raises(BertkitError, match="no such config file"):
        settings.load(Outer, tmp_path / "missing.toml")
