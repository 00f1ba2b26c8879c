"""Writes docs/commands.md: every bertkit command with every option, from the argument parser itself
(tests/test_cli.py checks that the file is up to date).

    python scripts/command_reference.py [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bertkit.cli import build_parser

DOC = Path(__file__).resolve().parents[1] / "docs" / "commands.md"


def option_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if action.option_strings:
            name = ", ".join(f"`{o}`" for o in action.option_strings)
            if action.nargs != 0:
                name += f" `{action.metavar or action.dest.upper()}`" if not action.choices else \
                    " `" + "|".join(map(str, action.choices)) + "`"
        else:
            name = f"`{action.metavar or action.dest}`" + (" ..." if action.nargs in ("*", "+") else "")
        text = (action.help or "").replace("\n", " ")
        if action.default not in (None, False, argparse.SUPPRESS) and action.nargs != 0 and "default" not in text:
            text += f" (default {action.default})"
        cells = (name, text.strip())
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")  # a bare | would end the cell
    return rows


def render() -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help for a in sub._choices_actions}
    lines = ["# Commands", "", "Every `bertkit` command with every option, generated from the argument parser by "
             "`python scripts/command_reference.py`. `bertkit COMMAND --help` says the same. Commands that take "
             "`key=value` overrides accept any setting of their `--config` file (README: Pre-training settings, "
             "Fine-tuning settings).", ""]
    for name, p in sub.choices.items():
        lines += [f"## `bertkit {name}`", "", helps.get(name) or "", ""]
        if p.description:
            lines += [p.description, ""]
        lines += ["| option | what |", "|---|---|", *option_rows(p), ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/commands.md is not up to date")
    args = parser.parse_args()
    text = render()
    if args.check:
        if DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC} is out of date: run python scripts/command_reference.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(DOC)
    return 0


if __name__ == "__main__":
    sys.exit(main())
