"""The demo's report: OUT/report.md and OUT/report.html with the results table, curves, predictions,
timings and the machine."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from ..fileio import atomic_write_text
from ..tasks import FAMILIES, get_task
from .plots import plot_finetuning


def results_rows(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per task: its main metric from scratch and pre-trained, and the difference."""
    rows = []
    for task in FAMILIES:
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


INTRO = {  # what ten minutes on a laptop CPU buy, and why (docs/demo.md has the runs behind it)
    "en": "What ten minutes of pre-training on a laptop CPU buy: clear gains where the words of one text carry the "
          "answer, classifying a sentence by its book and tagging names, since masked-word prediction teaches which "
          "words go together and in what order; none on sentence pairs and questions, which ask the model to match one "
          "segment against the other, something minutes of masked words do not teach (both models stay at the answer "
          "priors they memorize: docs/demo.md lists about twenty tries that did not change it). A tiny model trained for "
          "minutes also sits below simple baselines on classification, pairs and QA: the last column says how far.",
}
INTRO["zh"] = INTRO["en"]


def write_report(out: Path, cfg: Any, stages: dict[str, Any], results: dict[str, dict[str, Any]],
                 predictions: dict[str, Any], inside: dict[str, Any], baselines: dict[str, Any],
                 machine: dict[str, str], total_seconds: float) -> Path:
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
        INTRO[cfg.lang],
        "",
        "| task | metric | from scratch | pre-trained | gain | 95% interval of the gain | a simple baseline |",
        "|---|---|---:|---:|---:|---:|---:|",
        *[f"| {FAMILIES[r['task']].title} | {r['metric']} | {r['scratch']:.1f} | {r['pretrained']:.1f} | {r['gain']:+.1f} | "
          f"{_interval(r)} | {_baseline(baselines.get(r['task']))} |" for r in rows],
        "",
        "Scores on the dev sets of the checkpoints kept: each model's best epoch by the task's metric. The interval is a paired bootstrap over the dev examples (both "
        "models' predictions of the same resampled examples): how far another dev set of the same kind could move the "
        "gain. It does not cover the randomness of training: a rerun moves the pre-trained model's scores by a few points. "
        "The baselines are measured on the same dev files when the data is built (scripts/demo_baselines.py).",
        "",
        f"Held-out masked-LM accuracy after pre-training: **{_pct(pre.get('mlm_acc'))}** (always guessing the most frequent "
        f"token: {_pct(pre.get('baseline'))}; with the words of each segment shuffled: {_pct(pre.get('shuffled'))}, "
        "the drop from the first is what the model reads from word order, beyond which words occur); "
        f"next-sentence accuracy {_pct(pre.get('nsp_acc'))}.",
        "",
        *_fill_mask(inside.get("fill_mask", [])),
        *_attention(inside.get("attention")),
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
        "The paper's examples where the built-in tasks allow them, with the answer a reader expects.",
        "",
    ]
    for task, shown in predictions.items():
        lines += [f"**{FAMILIES[task].title}**", "", "| input | expected | pre-trained | from scratch |", "|---|---|---|---|"]
        t = get_task(task)
        lines += [f"| {_cell(t.show_input(e['input'], e['pair']))} | {_cell(e['expected'])} | "
                  f"{_cell(t.show_prediction(e['pretrained']))} | {_cell(t.show_prediction(e['scratch']))} |" for e in shown]
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


def _fill_mask(panel: list[dict[str, Any]]) -> list[str]:
    """The task pre-training is: guessing a masked word, pre-trained model beside its twin, on held-out sentences."""
    if not panel:
        return []
    return ["## What pre-training learnt: the masked word", "",
            "Held-out sentences (from the classification dev file, which pre-training never saw) with one word masked, "
            "and each model's five likeliest tokens (`bertkit fill-mask`):", "",
            "| sentence | the word | pre-trained | from scratch |", "|---|---|---|---|",
            *[f"| {_cell(p['masked'])} | `{_cell(p['word'])}` | {_tokens(p['pretrained'])} | {_tokens(p['scratch'])} |"
              for p in panel], ""]


def _tokens(tokens: list[str]) -> str:
    return " ".join(f"`{_cell(t)}`" for t in tokens)


def _attention(shown: dict[str, Any] | None) -> list[str]:
    if not shown:
        return []
    return ["## Where the pre-trained model looks", "",
            f"`bertkit attention` on the pair \"{shown['text']}\" / \"{shown['pair']}\": the input representation as the "
            "paper's Figure 2 draws it, then every head of every layer (a row is a token, the columns what it attends to).",
            "", f"![attention of every head]({shown['picture']})", ""]


def _baseline(entry: dict[str, Any] | None) -> str:
    return "?" if not entry else f"{entry['score']:.1f} ({entry['baseline']})"


def _cell(text: str) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


def _interval(row: dict[str, Any]) -> str:
    return "?" if row["low"] is None else f"{row['low']:+.1f} to {row['high']:+.1f}"


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.1f}%"


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
