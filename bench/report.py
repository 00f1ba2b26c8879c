"""Markdown for bench/RESULTS.md: a section per benchmark, the project's targets, the machine."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .common import BK, HF, Comparison


@dataclass(frozen=True)
class Options:
    """What to run, shared by every benchmark (from the command line)."""

    quick: bool = False
    presets: tuple[str, ...] | None = None  # None: each benchmark's own
    precisions: tuple[str, ...] = ("fp32", "bf16")
    batch_size: int = 32
    seq_len: int = 128
    memory: bool = True


@dataclass
class Section:
    key: str
    title: str
    body: str  # Markdown: a sentence on what was measured, the table(s), notes
    records: list[dict[str, Any]] = field(default_factory=list)  # the figures, for JSON and the targets
    load: dict[str, float] | None = None  # other processes' CPU use while it ran
    note: str | None = None  # e.g. that it was re-measured after the full run


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def rate(x: float, spread: float | None = None) -> str:
    text = f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"
    return text + (f" ±{100 * spread / 2:.0f}%" if spread is not None else "")


def mib(memory: dict[str, float] | None) -> str:
    return "—" if not memory else f"{memory['step_mib']:,.0f}"


def comparison_rows(comparisons: Sequence[Comparison], config_keys: Sequence[str], ms: bool = False,
                    memory: bool = False) -> str:
    """Gives the standard table: the config, both tokens/s (± half the IQR), the ratio, both MFUs, and
    optionally milliseconds per call and peak memory per side."""
    header = [*config_keys, "bertkit tok/s", "transformers tok/s", "ratio", "best-of ratio", "MFU bertkit",
              "MFU transformers"]
    header += ["bertkit ms", "transformers ms"] * ms + ["bertkit peak MiB", "transformers peak MiB"] * memory
    header += ["rounds"]
    rows = []
    for c in comparisons:
        row = [c.config[k] for k in config_keys]
        row += [rate(c.tok_s(BK), c.tok_s_spread(BK)), rate(c.tok_s(HF), c.tok_s_spread(HF)), f"**{c.ratio():.2f}x**",
                f"{c.best_ratio():.2f}x", f"{100 * c.mfu(BK):.1f}%", f"{100 * c.mfu(HF):.1f}%"]
        if ms:
            row += [f"{c.ms(BK):,.1f}", f"{c.ms(HF):,.1f}"]
        if memory:
            row += [mib(c.memory.get(BK)), mib(c.memory.get(HF))]
        rows.append([*row, f"{len(c.times[BK])}" + (f" (+{c.timings.discarded} discarded)" if c.timings.discarded else "")])
    return table(header, rows)


# ---- the project's targets -----------------------------------------------------------------------------

def _find(sections: dict[str, Section], key: str, **config: Any) -> dict[str, Any] | None:
    section = sections.get(key)
    for r in section.records if section else []:
        if all(r["config"].get(k) == v for k, v in config.items()):
            return r
    return None


def targets(sections: dict[str, Section]) -> str:
    """Gives the table of the project's targets, each met / not met with the measured figure."""
    rows: list[list[str]] = []

    def check(what: str, record: dict[str, Any] | None, value: Callable[[dict], float], goal: float,
              show: Callable[[float], str] = lambda v: f"{v:.2f}x") -> None:
        if record is None:
            rows.append([what, "not measured", "—"])
            return
        v = value(record)
        rows.append([what, show(v), "met" if v >= goal else "**not met**"])

    def speedup(r: dict) -> float:
        return r["ratio"]

    for preset, goal in (("tiny", 3.0), ("mini", 2.0), ("small", 1.5), ("base", 1.3)):
        for precision in ("fp32", "bf16"):
            check(f"pre-training step, {preset} {precision}: >= {goal}x transformers",
                  _find(sections, "pretrain", preset=preset, precision=precision), speedup, goal)
    check("MFU of the base fp32 pre-training step >= 50% of the fp32 GEMM peak",
          _find(sections, "pretrain", preset="base", precision="fp32"), lambda r: r[BK]["mfu"], 0.5,
          lambda v: f"{100 * v:.1f}%")
    for preset in ("tiny", "mini", "small", "base"):
        fp32, bf16 = (_find(sections, "pretrain", preset=preset, precision=p) for p in ("fp32", "bf16"))
        check(f"bf16 faster than fp32 (bertkit pre-training step, {preset})",
              {"fp32": fp32, "bf16": bf16} if fp32 and bf16 else None,
              lambda r: r["bf16"][BK]["tok_s"] / r["fp32"][BK]["tok_s"], 1.0 + 1e-9, lambda v: f"bf16 = {v:.2f}x fp32")
    for precision in ("fp32", "bf16"):
        check(f"inference base {precision}, full-length 32 x 128: >= 1.0x transformers",
              _find(sections, "inference", preset="base", workload="32 x 128 full", precision=precision), speedup, 1.0)
        check(f"inference base {precision}, SST-2 dev batches of 32: >= 1.5x transformers",
              _find(sections, "inference", preset="base", workload="SST-2 dev, 32", precision=precision), speedup, 1.5)
    for model in ("base", "MiniLM-L6"):
        for precision in ("fp32", "bf16"):
            check(f"fine-tuning {model} {precision}, SST-2 batches of 32: >= 1.5x transformers",
                  _find(sections, "finetune", model=model, precision=precision), speedup, 1.5)
    for r in sections["pretrain"].records if "pretrain" in sections else []:
        ours, theirs = r[BK]["memory"], r[HF]["memory"]
        if ours and theirs:
            check(f"peak memory of a pre-training step, {r['config']['preset']} {r['config']['precision']}: "
                  "<= transformers'", r, lambda _, o=ours, t=theirs: t["step_mib"] / o["step_mib"], 1.0,
                  lambda _, o=ours, t=theirs: f"{o['step_mib']:,.0f} vs {t['step_mib']:,.0f} MiB")
    return table(["target", "measured", "status"], rows)
