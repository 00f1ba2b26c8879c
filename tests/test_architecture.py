"""The package's shape, kept by tests: data flows one way (no import cycles, imports inside functions included),
no module grows past 600 lines, and using a model (`import bertkit`, `bertkit predict`) never loads the training
loop. README.md's "Package map" says which module does which job."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "bertkit"
MAX_LINES = 600


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Gives each bertkit module the bertkit modules it imports, at the top or inside a function."""
    files = {module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join([*base, node.module] if node.module else base)
                found = [target, *(f"{target}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            else:
                continue
            graph[name] |= {f for f in found if f in files and f != name}
    return graph


def cycle_from(graph: dict[str, set[str]]) -> list[str] | None:
    """Gives one import cycle as a path of module names, or None (depth-first search, three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_import_graph_has_no_cycle() -> None:
    graph = import_graph()
    assert {"bertkit.model", "bertkit.heads", "bertkit.crf", "bertkit.pretraining.dataset"} <= set(graph)
    assert "bertkit.hf" in graph["bertkit.model"] and "bertkit.crf" in graph["bertkit.heads"]  # the graph is read
    assert cycle_from(graph) is None, " -> ".join(cycle_from(graph) or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycle_from({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle_from({"a": {"b"}, "b": set(), "c": {"b"}}) is None


def test_no_module_is_over_600_lines() -> None:
    sizes = {module_name(p): sum(1 for _ in p.open(encoding="utf-8")) for p in SRC.rglob("*.py")}
    assert len(sizes) > 30
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_using_a_model_does_not_load_the_training_loop() -> None:
    code = ("import sys, bertkit, bertkit.cli, bertkit.predict; "
            "print(sorted(m for m in sys.modules if m.startswith('bertkit')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "'bertkit.predict'" in loaded and "'bertkit.tasks'" in loaded
    for training in ("bertkit.train", "bertkit.finetune", "bertkit.pretrain", "bertkit.pretraining", "bertkit.checkpoint"):
        assert f"'{training}'" not in loaded, training


def test_the_readme_package_map_is_the_import_order() -> None:
    """README's "Package map" lists the modules top to bottom; none imports from a row below its own."""
    import re

    readme = (SRC.parents[1] / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("### Package map") :].split("\n\n")[2]
    row_of = {}
    for i, line in enumerate(line for line in table.splitlines() if line.startswith("| `")):
        for name in re.findall(r"`([a-z_]+)/?`", line.split("|")[1]):
            row_of[f"bertkit.{name}"] = i
    graph = import_graph()

    def row(module: str) -> int | None:
        return row_of.get(".".join(module.split(".")[:2]))

    listed = {m for m in graph if m not in ("bertkit", "bertkit.__main__")}
    assert {m for m in listed if row(m) is None} == set(), "modules missing from the map"
    upward = [(m, d) for m in listed for d in graph[m] if d != "bertkit" and row(d) > row(m)]  # type: ignore[operator]
    assert upward == []


def family_comparisons(root: Path, families: tuple[str, ...]) -> list[str]:
    """Gives "module:line" of every comparison of something with a task family's name (== "qa", in ("pair", "qa"))."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            literals = [o for o in operands if isinstance(o, ast.Constant)]
            literals += [e for o in operands if isinstance(o, (ast.Tuple, ast.List, ast.Set)) for e in o.elts]
            if any(isinstance(c, ast.Constant) and c.value in families for c in literals):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_only_the_task_families_know_their_names() -> None:
    """What differs by family lives in tasks/ (the Task protocol, the family registry): elsewhere no code asks
    which family a task is."""
    from bertkit.tasks import FAMILIES

    families = tuple(FAMILIES)
    outside = [f for f in family_comparisons(SRC, families) if not f.startswith("tasks/")]
    assert outside == []
    assert family_comparisons(SRC / "tasks", families), "the finder finds the comparisons tasks/ makes"
