"""Pictures of runs: `bertkit plot RUN` (the curves of a run's log.jsonl) and the demo's fine-tuning panels."""

from __future__ import annotations

from pathlib import Path

from ..errors import BertkitError
from ..fileio import atomic_write
from ..runlog import read_log

# (panel title, [(log key, label)]) in the order drawn; panels with no data are left out.
PANELS: list[tuple[str, list[tuple[str, str]]]] = [
    ("loss", [("loss", "train"), ("eval_loss", "held-out")]),
    ("MLM accuracy", [("mlm_acc", "train"), ("eval_mlm_acc", "held-out"), ("eval_mlm_baseline_acc", "most frequent token"), ("eval_mlm_shuffled_acc", "held-out, words shuffled")]),
    ("NSP accuracy", [("nsp_acc", "train"), ("eval_nsp_acc", "held-out")]),
    ("dev metric", [("eval_accuracy", "accuracy"), ("eval_f1", "F1"), ("eval_exact_match", "exact match")]),
    ("learning rate", [("lr", "lr")]),
    ("throughput (tokens/s)", [("tokens_per_s", "tokens/s")]),
]


def plot_run(run_dir: Path, out: Path | None = None, title: str | None = None) -> Path:
    """Draws RUN_DIR/log.jsonl to `out` (default RUN_DIR/curves.png); gives the path written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_log(Path(run_dir) / "log.jsonl")
    if not rows:
        raise BertkitError(f"{run_dir}: no log.jsonl with metrics (is this a run folder?)")
    panels = [(name, [(k, label) for k, label in series if any(k in r for r in rows)]) for name, series in PANELS]
    panels = [(name, series) for name, series in panels if series]
    cols = 2
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(11, 3.2 * nrows), squeeze=False)
    for ax, (name, series) in zip(axes.flat, panels, strict=False):
        for key, label in series:
            pts = [(r["step"], r[key]) for r in rows if key in r]
            # a series of one point (a short run logs once) is drawn as a marker, or it would not show
            style = "--" if "baseline" in key else ("o-" if key.startswith("eval_") or len(pts) == 1 else "-")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label, markersize=3)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if len(series) > 1:
            ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title or Path(run_dir).name)
    fig.tight_layout()
    out = Path(out) if out else Path(run_dir) / "curves.png"
    atomic_write(out, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
    return out


def plot_finetuning(out: Path, tasks: list[str]) -> Path:
    """Dev metric after every epoch, pre-trained against from scratch, one panel per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tasks), figsize=(3.6 * len(tasks), 3.2), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        for init, style in (("pretrained", "o-"), ("scratch", "s--")):
            log = read_log(out / "finetune" / f"{task}-{init}" / "run" / "log.jsonl")
            evals = [r for r in log if any(k.startswith("eval_") for k in r)]
            if not evals:
                continue
            metric = "eval_accuracy" if "eval_accuracy" in evals[0] else "eval_f1"
            ax.plot([r["step"] for r in evals], [r[metric] for r in evals], style, label=init, markersize=4)
            ax.set_ylabel(metric.removeprefix("eval_"))
        ax.set_title(task)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "finetune.png"
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
    return path
