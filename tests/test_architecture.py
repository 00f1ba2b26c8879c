"""The package's shape, kept by tests: data flows one way (no import cycles, imports inside functions included),
no module grows past 600 lines, and using a model (`import bertkit`, `bertkit predict`) never loads the training
loop. README.md's "Package map" says which module does which job."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable
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


def family_names(families: Iterable[str]) -> tuple[str, ...]:
    """The family names code must not compare with outside tasks/: all but those that also name a `bertkit` command
    ("embed": the command and `bertkit.pipeline`'s kind for it, which run any encoder and tell no family apart)."""
    from bertkit.cli import COMMANDS

    return tuple(name for name in families if name not in COMMANDS)


def test_only_the_task_families_know_their_names() -> None:
    """What differs by family lives in tasks/ (the Task protocol, the family registry): elsewhere no code asks
    which family a task is."""
    from bertkit.tasks import FAMILIES

    families = family_names(FAMILIES)
    outside = [f for f in family_comparisons(SRC, families) if not f.startswith("tasks/")]
    assert outside == []
    assert family_comparisons(SRC / "tasks", families), "the finder finds the comparisons tasks/ makes"


# ---- what else tells families apart: head classes, one family's fields, tables keyed by family ----------------

# Where families and heads are defined, and the public API's lazy-import map (names its classes, decides nothing).
OWNERS = ("tasks/", "heads.py", "config.py", "__init__.py")
# The demo walks through the built-in families: its data, examples and prose come per family.
CONTENT = ("demo/",)
# Files that still read one family's options until they take them from the Task (none now)
PENDING: tuple[str, ...] = ()


def family_markers() -> dict[str, set[str]]:
    """The names that tell one family (or head) from another: the task model and head classes, the outputs only
    some heads give, the config's problem types, and the family names."""
    from bertkit import tasks
    from bertkit.heads import MODEL_CLASSES, TaskModel
    from bertkit.tasks import FAMILIES

    task_models = [cls for cls in MODEL_CLASSES.values() if issubclass(cls, TaskModel)]
    heads = {cls.head_type for cls in task_models}
    outputs = [name for head in heads for name in head.outputs()]
    return {
        "classes": {cls.__name__ for cls in (*task_models, *heads)},
        "fields": {name for name in outputs if outputs.count(name) == 1} | {"problem_type"},
        "keys": {*family_names(FAMILIES), *(cls.__name__ for cls in task_models), "regression", "multi_label_classification"},
        # the modules that define a family's Task (shared ones, metrics or readers, are anyone's to import)
        "modules": {cls.__module__.rpartition(".")[2] for cls in vars(tasks).values()
                    if isinstance(cls, type) and cls is not tasks.Task and hasattr(cls, "featurize")},
    }


def family_leaks(root: Path, markers: dict[str, set[str]]) -> list[str]:
    """Gives "module:line: what" for each place that tells families apart: isinstance/issubclass (or `is`) with a
    task model or head class, a read of one family's field (`.start_logits`, getattr(x, "problem_type")), a table
    keyed by family, head class or problem type (a dict, a .get or a subscript with such a key), an import of a
    family's own module (rather than bertkit.tasks' interface), a class-weighted cross-entropy outside the heads."""
    found = []

    def name_of(node: ast.AST) -> str | None:
        return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None

    for path in sorted(root.rglob("*.py")):
        where = str(path.relative_to(root))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            what = None
            if isinstance(node, ast.Call) and name_of(node.func) in ("isinstance", "issubclass") and len(node.args) == 2:
                kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
                if any(name_of(k) in markers["classes"] for k in kinds):
                    what = "isinstance with a task model or head class"
            elif isinstance(node, ast.Compare) and any(name_of(o) in markers["classes"] for o in node.comparators):
                what = "compared with a task model or head class"
            elif isinstance(node, ast.Compare) and any(isinstance(o, ast.Constant) and o.value in markers["keys"]
                                                       for o in node.comparators):
                what = "compared with a family, task model or problem type by name"
            elif isinstance(node, ast.Attribute) and node.attr in markers["fields"]:
                what = f"reads .{node.attr}"
            elif (isinstance(node, ast.Call) and name_of(node.func) in ("getattr", "hasattr") and len(node.args) > 1
                  and isinstance(node.args[1], ast.Constant) and node.args[1].value in markers["fields"]):
                what = f"reads {node.args[1].value!r}"
            elif isinstance(node, ast.Dict) and any((isinstance(k, ast.Constant) and k.value in markers["keys"])
                                                    or name_of(k) in markers["classes"] for k in node.keys if k):
                what = "a table keyed by family, head class or problem type"
            elif (isinstance(node, ast.Call) and name_of(node.func) == "get" and node.args
                  and isinstance(node.args[0], ast.Constant) and node.args[0].value in markers["keys"]):
                what = f"looks up {node.args[0].value!r}"
            elif (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                  and node.slice.value in markers["keys"]):
                what = f"looks up {node.slice.value!r}"
            elif isinstance(node, ast.ImportFrom) and any(
                    f"tasks.{family}" in f"{'.' * node.level}{node.module or ''}" for family in markers["modules"]):
                what = "imports a family's module"
            elif (isinstance(node, ast.Call) and name_of(node.func) == "cross_entropy"
                  and any(k.arg == "weight" for k in node.keywords)):
                what = "the class-weighted loss written again"
            if what:
                found.append(f"{where}:{node.lineno}: {what}")
    return found


def test_no_family_logic_outside_the_families_and_heads() -> None:
    """A new family or head is added in tasks/ and heads.py alone: nothing else tells families apart."""
    markers = family_markers()
    assert {"BertForQuestionAnswering", "SpanHead"} <= markers["classes"] and "start_logits" in markers["fields"]
    leaks = family_leaks(SRC, markers)
    outside = [f for f in leaks if not f.startswith((*OWNERS, *CONTENT, *PENDING))]
    assert outside == []


def test_the_leak_finder_finds_each_kind(tmp_path: Path) -> None:
    (tmp_path / "leaky.py").write_text(
        "def f(model, out, task, cfg, x):\n"
        "    if isinstance(model, BertForQuestionAnswering):\n"
        "        return out.start_logits\n"
        "    kind = {'multi_label_classification': 'labels'}.get(cfg.problem_type)\n"
        "    table = {'BertForTokenClassification': ('logits',)}\n"
        "    per_token = cfg.architecture == 'BertForTokenClassification'\n"
        "    from .tasks.classify import DEFAULT_NAMES\n"
        "    loss = F.cross_entropy(out.logits, x, weight=cfg.weights)\n"
        "    return getattr(out, 'end_logits'), table, kind, x['qa'], x.get('ner'), type(model) is SpanHead\n")
    found = family_leaks(tmp_path, family_markers())
    kinds = {f.split(": ", 1)[1] for f in found}
    assert kinds == {"isinstance with a task model or head class", "reads .start_logits", "reads .problem_type",
                     "a table keyed by family, head class or problem type", "reads 'end_logits'", "looks up 'qa'",
                     "looks up 'ner'", "compared with a task model or head class", "imports a family's module",
                     "the class-weighted loss written again",
                     "compared with a family, task model or problem type by name"}, kinds
