"""The demo's report: OUT/report.md and OUT/report.html with the results table, curves, predictions,
timings and the machine."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from ..fileio import atomic_write_text
from ..tasks import get_task
from .plots import plot_finetuning
from .prose import TASKS, WORDS, claims, reference_note, stage_name, task_title


def results_rows(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per main task: its main metric from scratch, pre-trained and (when run) from the reference model, and
    the pre-trained model's gain with its 95% interval."""
    rows = []
    for task in TASKS:
        pre, scratch = results.get(f"fine-tune {task} (pretrained)"), results.get(f"fine-tune {task} (scratch)")
        if not pre or not scratch:
            continue
        metric = pre["metric"]
        a, b = scratch["dev"].get(metric, float("nan")), pre["dev"].get(metric, float("nan"))
        interval = results.get(f"compare {task}") or {}  # the gain's 95% interval on the dev examples
        reference = results.get(f"fine-tune {task} (reference)")
        rows.append({"task": task, "metric": metric, "scratch": a, "pretrained": b, "gain": b - a,
                     "low": interval.get("low"), "high": interval.get("high"),
                     "reference": reference["dev"].get(metric) if reference else None,
                     "seconds": pre.get("seconds", 0) + scratch.get("seconds", 0)})
    return rows


def write_report(out: Path, cfg: Any, stages: dict[str, Any], results: dict[str, dict[str, Any]],
                 predictions: dict[str, Any], inside: dict[str, Any], baselines: dict[str, Any],
                 machine: dict[str, str], total_seconds: float, reference: dict[str, Any] | None = None) -> Path:
    """Writes report.md and report.html into `out`, in the demo's language; gives the HTML's path."""
    w = WORDS[cfg.lang]
    rows = results_rows(results)
    plot_finetuning(out, [r["task"] for r in rows])
    pre = stages.get("pre-train", {}).get("result") or {}
    ran = reference is not None and "path" in reference
    name = reference_name(reference) if reference else ""
    inits = ("pretrained", "scratch", *(("reference",) if ran else ()))
    heads = {"pretrained": w["pretrained"], "scratch": w["scratch"], "reference": f"{name}"}
    pictures = w["pictures"]
    lines = [
        f"# {w['title']}", "",
        w["lead"].format(preset=cfg.preset, steps=pre.get("steps", "?"),
                         reference=w["with_reference"].format(name=f"`{name}`", what=reference_note(name, cfg.lang))
                         if ran else ""), "",
        *[line for c in claims(rows, baselines, reference, cfg.lang, minutes=cfg.minutes, name=name) for line in (c, "")],
        w["columns"].format(reference=f"{name} | " if ran else ""),
        "|---|---|---:|---:|---:|---:|" + ("---:|" if ran else "") + "---:|",
        *[f"| {task_title(r['task'], cfg.lang)} | {w.get('metrics', {}).get(r['metric'], r['metric'])} | "
          f"{r['scratch']:.1f} | {r['pretrained']:.1f} | {r['gain']:+.1f} | {_interval(r, w['to'])} | "
          + (f"{_num(r['reference'])} | " if ran else "") + f"{_baseline(baselines.get(r['task']), w)} |" for r in rows],
        "", w["dev"], "",
        w["mlm"].format(acc=_pct(pre.get("mlm_acc")), base=_pct(pre.get("baseline")), shuffled=_pct(pre.get("shuffled")),
                        nsp=_pct(pre.get("nsp_acc"))), "",
        *_seeds(predictions.get("seeds", []), inits, heads, cfg.lang),
        *_fill_mask(inside.get("fill_mask", []), w),
        *_attention(inside.get("attention"), w),
        f"## {w['pretraining']}", "", f"![{pictures['pretrain']}](pretrain.png)", "",
        f"## {w['finetuning']}", "", f"![{pictures['finetune']}](finetune.png)", "",
        f"## {w['examples']}", "", w["examples_lead"], "",
    ]
    for task, shown in predictions.items():
        if task == "seeds":
            continue
        t = get_task(task)
        lines += [f"**{task_title(task, cfg.lang)}**{'：' if cfg.lang == 'zh' else ': '}{w['what'][task]}", "",
                  f"| {w['input']} | {w['expected']} | " + " | ".join(heads[i] for i in inits) + " |",
                  "|---|---|" + "---|" * len(inits)]
        lines += [f"| {_cell(t.show_input(e['input'], e['pair']))} | {_cell(e['expected'])} | "
                  + " | ".join(_cell(t.show_prediction(e[i])) + _mark(t.matches(e[i], e["expected"])) for i in inits if i in e) + " |"
                  for e in shown]
        lines.append("")
    lines += [f"## {w['timings']}", "", f"| {w['stage']} | {w['seconds']} |", "|---|---:|",
              *[f"| {stage_name(stage, cfg.lang)} | {v['seconds']:.0f} |" for stage, v in stages.items()],
              f"| **{w['total']}** | **{total_seconds:.0f}** |", "",
              f"## {w['machine']}", "", *[f"- {w.get('machine_keys', {}).get(k, k)}: {v}" for k, v in machine.items()], "",
              f"{w['command']}: `bertkit demo --lang {cfg.lang} --minutes {cfg.minutes:g}"
              + (f" --reference {name}" if reference else "") + "`", ""]
    md = "\n".join(lines)
    atomic_write_text(out / "report.md", md)
    atomic_write_text(out / "report.html", _html(md, cfg.lang))
    return out / "report.html"


def reference_name(reference: dict[str, Any]) -> str:
    """The reference model by its name, never by a path of this machine: a Hugging Face name as given; for a folder,
    the name its model card gives (its first heading), else the folder's name (with its parent's, for OUT/model)."""
    given = str(reference.get("name", ""))
    folder = Path(given).expanduser()
    if not folder.is_dir():
        return given
    card = folder / "README.md"
    if card.is_file():
        text = card.read_text(encoding="utf-8", errors="replace")
        if text.startswith("---"):
            text = text.split("---", 2)[-1]  # past the YAML metadata
        heading = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), "")
        if heading:
            return heading
    folder = folder.resolve()
    return f"{folder.parent.name}/{folder.name}" if folder.name == "model" and folder.parent.name else folder.name


def _mark(right: bool) -> str:
    return " ✓" if right else " ✗"


def _seeds(shown: list[dict[str, Any]], inits: tuple[str, ...], heads: dict[str, str], lang: str) -> list[str]:
    """The walkthrough's examples: each input, the expected answer, every model's, right or wrong."""
    if not shown:
        return []
    w = WORDS[lang]
    lines = [f"## {w['seeds']}", "", w["seeds_lead"].format(lang=lang), "",
             f"| {w['task']} | {w['input']} | {w['expected']} | " + " | ".join(heads[i] for i in inits) + " |",
             "|---|---|---|" + "---|" * len(inits)]
    for e in shown:
        t = get_task(e["family"])
        cells = [_cell(t.show_prediction(e[i]["answer"])) + (" ✓" if e[i]["right"] else " ✗") for i in inits if i in e]
        lines.append(f"| {w['seed_task'].get(e['job'], e['job'])} | {_cell(t.show_input(e['input'], e['pair']))} | "
                     f"{_cell(e['expected'])} | " + " | ".join(cells) + " |")
    return [*lines, "", wrong_answers(shown, inits, heads, lang), ""]


def wrong_answers(shown: list[dict[str, Any]], inits: tuple[str, ...], heads: dict[str, str], lang: str) -> str:
    """One sentence naming, for every model, the examples it answered wrong (or that all are right)."""
    w = WORDS[lang]
    items = []
    for init in inits:
        wrong = [w["seed_name"].get(e["job"], e["job"]) for e in shown if init in e and not e[init]["right"]]
        if wrong:
            examples = (", ".join(wrong[:-1]) + " and " + wrong[-1] if len(wrong) > 1 else wrong[0]) if lang == "en" \
                else "、".join(wrong)
            items.append(w["wrong_item"].format(model=heads[init], examples=examples))
    return w["wrong"].format(items=("; " if lang == "en" else "；").join(items)) if items else w["all_right"]


def _fill_mask(panel: list[dict[str, Any]], w: dict[str, Any]) -> list[str]:
    """The task pre-training is: guessing a masked word, pre-trained model beside its twin, on held-out sentences."""
    if not panel:
        return []
    return [f"## {w['fill_mask']}", "", w["fill_mask_lead"], "",
            f"| {w['sentence']} | {w['word']} | {w['pretrained']} | {w['scratch']} |", "|---|---|---|---|",
            *[f"| {_cell(p['masked'])} | `{_cell(p['word'])}` | {_tokens(p['pretrained'])} | {_tokens(p['scratch'])} |"
              for p in panel], ""]


def _tokens(tokens: list[str]) -> str:
    return " ".join(f"`{_cell(t)}`" for t in tokens)


def _attention(shown: dict[str, Any] | None, w: dict[str, Any]) -> list[str]:
    if not shown:
        return []
    return [f"## {w['attention']}", "", w["attention_lead"].format(text=shown["text"], pair=shown["pair"]),
            "", f"![{w['pictures']['attention']}]({shown['picture']})", ""]


def _baseline(entry: dict[str, Any] | None, w: dict[str, Any]) -> str:
    return "?" if not entry else f"{entry['score']:.1f} ({w.get('baselines', {}).get(entry['baseline'], entry['baseline'])})"


def _cell(text: str) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


def _interval(row: dict[str, Any], to: str = "to") -> str:
    return "?" if row["low"] is None else f"{row['low']:+.1f} {to} {row['high']:+.1f}"


def _num(x: float | None) -> str:
    return "?" if x is None else f"{x:.1f}"


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
