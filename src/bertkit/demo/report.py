"""The demo's report: OUT/report.md and OUT/report.html with the results table, curves, predictions,
timings and the machine."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from ..fileio import atomic_write_text
from .plots import plot_finetuning

TASK_NAMES = {"classify": "single-sentence classification", "pair": "sentence-pair classification",
              "qa": "extractive question answering", "ner": "named entity recognition"}


def results_rows(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per task: its main metric from scratch and pre-trained, and the difference."""
    rows = []
    for task in TASK_NAMES:
        pre, scratch = results.get(f"fine-tune {task} (pretrained)"), results.get(f"fine-tune {task} (scratch)")
        if not pre or not scratch:
            continue
        metric = pre["metric"]
        a, b = scratch["dev"].get(metric, float("nan")), pre["dev"].get(metric, float("nan"))
        interval = results.get(f"compare {task}") or {}  # the gain's 95% interval on the dev examples
        rows.append({"task": task, "metric": metric, "scratch": a, "pretrained": b, "gain": b - a,
                     "low": interval.get("low"), "high": interval.get("high"),
                     "seconds": pre.get("seconds", 0) + scratch.get("seconds", 0)})
    return rows


def write_report(out: Path, cfg: Any, stages: dict[str, Any], results: dict[str, dict[str, Any]],
                 predictions: dict[str, Any], machine: dict[str, str], total_seconds: float) -> Path:
    """Writes report.md and report.html into `out`; gives the HTML's path."""
    rows = results_rows(results)
    plot_finetuning(out, [r["task"] for r in rows])
    wins = sum(r["gain"] > 0 for r in rows)
    clear = sum(r["low"] is not None and r["low"] > 0 for r in rows)
    pre = stages.get("pre-train", {}).get("result") or {}
    lines = [
        f"# bertkit demo ({cfg.lang})",
        "",
        f"A {cfg.preset} BERT pre-trained for {pre.get('steps', '?')} steps on built-in public-domain text, then fine-tuned on "
        f"four tasks beside a randomly initialized twin (the same initialization, no pre-training). Pre-training wins on **{wins} of {len(rows)}** tasks; "
        f"on {clear} of them the 95% interval of the gain is above zero.",
        "",
        "| task | metric | from scratch | pre-trained | gain | 95% interval of the gain |",
        "|---|---|---:|---:|---:|---:|",
        *[f"| {TASK_NAMES[r['task']]} | {r['metric']} | {r['scratch']:.1f} | {r['pretrained']:.1f} | {r['gain']:+.1f} | {_interval(r)} |"
          for r in rows],
        "",
        "Scores on the dev sets after the last epoch. The interval is a paired bootstrap over the dev examples (both "
        "models' predictions of the same resampled examples): how far another dev set of the same kind could move the "
        "gain. It does not cover the randomness of training: a rerun moves the pre-trained model's scores by a few points.",
        "",
        f"Held-out masked-LM accuracy after pre-training: **{_pct(pre.get('mlm_acc'))}** (always guessing the most frequent "
        f"token: {_pct(pre.get('baseline'))}; with the words of each segment shuffled: {_pct(pre.get('shuffled'))}, "
        "the drop from the first is what the model reads from word order, beyond which words occur); "
        f"next-sentence accuracy {_pct(pre.get('nsp_acc'))}.",
        "",
        "## Pre-training",
        "",
        "![pre-training curves](pretrain.png)",
        "",
        "## Fine-tuning (dev metric after every epoch)",
        "",
        "![fine-tuning curves](finetune.png)",
        "",
        "## Predictions",
        "",
    ]
    for task, by_init in predictions.items():
        lines += [f"**{TASK_NAMES[task]}**", ""]
        for init, preds in by_init.items():
            for p in preds:
                lines.append(f"- {init}: `{_brief(task, p)}`")
        lines.append("")
    lines += ["## Timings", "", "| stage | seconds |", "|---|---:|",
              *[f"| {name} | {v['seconds']:.0f} |" for name, v in stages.items()],
              f"| **total** | **{total_seconds:.0f}** |", "",
              "## Machine", "", *[f"- {k}: {v}" for k, v in machine.items()], "",
              f"Command: `bertkit demo --lang {cfg.lang} --minutes {cfg.minutes:g}`", ""]
    md = "\n".join(lines)
    atomic_write_text(out / "report.md", md)
    atomic_write_text(out / "report.html", _html(md, cfg.lang))
    return out / "report.html"


def _interval(row: dict[str, Any]) -> str:
    return "?" if row["low"] is None else f"{row['low']:+.1f} to {row['high']:+.1f}"


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.1f}%"


def _brief(task: str, p: dict[str, Any]) -> str:
    """A one-line summary of a prediction: label and confidence, answer span, or entities."""
    if task in ("classify", "pair"):
        probs = p.get("probabilities", {})
        return f"{p.get('label')} ({max(probs.values(), default=0):.2f})"
    if task == "qa":
        return f"{p.get('answer')!r} [{p.get('start')}:{p.get('end')}]"
    return ", ".join(f"{e['type']}:{e['text']}" for e in p.get("entities", [])) or "(no entities)"


def _html(md: str, lang: str) -> str:
    """A small, self-styled HTML rendering of the report's Markdown (headings, tables, images, lists)."""
    body, table = [], []

    def flush_table() -> None:
        if table:
            head, *rest = table
            cells = lambda row, tag: "".join(f"<{tag}>{_inline(c)}</{tag}>" for c in row)  # noqa: E731
            body.append("<table><thead><tr>" + cells(head, "th") + "</tr></thead><tbody>"
                        + "".join("<tr>" + cells(r, "td") + "</tr>" for r in rest) + "</tbody></table>")
            table.clear()

    for line in md.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not all(set(c) <= set("-:") for c in cells):
                table.append(cells)
            continue
        flush_table()
        if line.startswith("# "):
            body.append(f"<h1>{_inline(line[2:])}</h1>")
        elif line.startswith("## "):
            body.append(f"<h2>{_inline(line[3:])}</h2>")
        elif line.startswith("!["):
            alt, src = line[2:].split("](")
            body.append(f'<img src="{html.escape(src.rstrip(")"))}" alt="{html.escape(alt)}">')
        elif line.startswith("- "):
            body.append(f"<li>{_inline(line[2:])}</li>")
        elif line.strip():
            body.append(f"<p>{_inline(line)}</p>")
    flush_table()
    style = ("body{font:15px/1.5 system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .7em;text-align:right}"
             "td:first-child,th:first-child{text-align:left}th{background:#f3f3f3}img{max-width:100%}"
             "code{background:#f5f5f5;padding:0 .2em}li{list-style:none;margin:.2em 0}")
    return (f'<!doctype html><html lang="{lang}"><head><meta charset="utf-8"><title>bertkit demo</title>'
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")


def _inline(text: str) -> str:
    """Markdown's **bold** and `code` inside escaped text."""
    out, parts = [], html.escape(text).split("`")
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"<code>{part}</code>")
        else:
            bold = part.split("**")
            out.append("".join(f"<b>{b}</b>" if j % 2 else b for j, b in enumerate(bold)))
    return "".join(out)
