"""OUT/model/README.md: a model card in Hugging Face's format (YAML metadata, then prose) for a fine-tuned
model: the task and its labels, the data it was trained and scored on, its dev and test scores, the
command that made it and the bertkit version."""

from __future__ import annotations

import json
import shlex
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from .fileio import atomic_write_text
from .tasks import family, get_task


def command_line() -> str | None:
    """The bertkit command being run, as a user would type it; None when bertkit is called from Python."""
    argv = list(sys.argv)
    if not argv or Path(argv[0]).name not in ("bertkit", "cli.py", "__main__.py"):
        return None
    return shlex.join(["bertkit", *argv[1:]])


def version() -> str:
    try:
        return metadata.version("bertkit")
    except metadata.PackageNotFoundError:
        return "unknown"


def _yaml_value(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False)  # JSON scalars and lists are YAML


def write_model_card(directory: Path, meta: dict[str, Any], summary: dict[str, Any], data: dict[str, str | None]) -> str:
    """Gives (and writes to directory/README.md) the card of a fine-tuned model: `meta` is its task file,
    `summary` fine-tuning's results (best run, test scores), `data` the train/dev/test files."""
    task, settings = meta["task"], meta["settings"]
    variant = get_task(task, **meta["task_options"]).variant
    kind = family(task).title + (f" ({variant})" if variant else "")
    best = summary["best"]
    header = ["---", "library_name: bertkit", f"pipeline_tag: {family(task).pipeline_tag}",
              f"base_model: {_yaml_value(str(settings['base_model']))}", "tags:", "- bert", "- bertkit", f"- {task}"]
    metrics = [(split, name, value) for split, scores in (("dev", best["dev"]), ("test", summary.get("test", {})))
               for name, value in scores.items() if isinstance(value, float)]
    if metrics:
        header += ["model-index:", f"- name: {_yaml_value(directory.resolve().parent.name)}", "  results:",
                   f"  - task: {{type: {family(task).pipeline_tag}}}", "    metrics:"]
        header += [f"    - {{type: {name}, value: {value:.4g}, name: {split} {name}}}" for split, name, value in metrics]
    header.append("---")
    labels, name = meta["labels"], directory.resolve().parent.name
    architecture = json.loads((directory / "config.json").read_text(encoding="utf-8"))["architectures"][0]
    body = [
        f"# {name}", "",
        f"A BERT fine-tuned with bertkit {version()} for {kind}, from `{settings['base_model']}`"
        + (f" at revision `{settings['revision']}`" if settings.get("revision") else "") + ".", "",
        *_distilled(meta.get("distilled")),
        f"- Labels ({len(labels)}): " + ", ".join(f"`{label}`" for label in labels[:50]) + (" ..." if len(labels) > 50 else ""),
        f"- Trained on `{data.get('train')}`, chosen on `{data.get('dev')}`" + (f", tested on `{data['test']}`" if data.get("test") else ""),
        f"- Kept: the checkpoint after step {best.get('step')} (epoch {best.get('epoch')}) of the run with batch size "
        f"{best['batch_size']}, learning rate {best['lr']:g} and {best['epochs']} epochs, the best by dev `{summary['metric']}`",
        "", "## Scores (percent)", "",
    ]
    names = list(best["dev"])
    body += ["| split | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for split, scores in (("dev", best["dev"]), ("test", summary.get("test"))):
        if scores:
            body.append(f"| {split} | " + " | ".join(f"{scores[n]:.2f}" if n in scores else "" for n in names) + " |")
    command = command_line()
    made = ["```bash", command, "```"] if command else ["From Python (`bertkit.finetune`); the settings are in `settings.json` "
                                                         "beside this folder."]
    body += ["", "## How it was made", "", *made, "",
             "## How to use it", "", "```bash", f'bertkit predict --model {directory} "..."', "```", "",
             f"The folder has Hugging Face's layout: transformers loads the weights as `{architecture}`; bertkit's "
             "decoding (labels, thresholds, tag scheme, CRF) is in `bertkit_task.json`.", ""]
    text = "\n".join([*header, "", *body])
    atomic_write_text(directory / "README.md", text)
    return text


def _distilled(recipe: dict[str, Any] | None) -> list[str]:
    """The card's line on a distilled student: its teacher and the recipe (`bertkit distill`)."""
    if not recipe or recipe.get("alone"):
        return []
    w = recipe["losses"]
    parts = [f"soft targets x{w['soft']:g} at T={w['temperature']:g}", f"labels x{w['hard']:g}"]
    parts += [f"{name} x{w[name]:g}" for name in ("hidden", "attention") if w[name]]
    unlabeled = f", with {recipe['unlabeled_rows']:,} unlabeled rows" if recipe.get("unlabeled_rows") else ""
    return [f"- Distilled from the teacher `{recipe['teacher']}` into the student `{recipe['student']}`"
            + (f" (from `{recipe['student_init']}`)" if recipe.get("student_init") else "")
            + f": {', '.join(parts)}{unlabeled}"]
