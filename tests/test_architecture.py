"""The package's shape: one-way imports, small modules and classes, simpy only in the engine."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "simtrain"
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 200


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return out


def _imports(tree: ast.Module, known: set[str]) -> set[str]:
    """simtrain modules imported anywhere in ``tree`` (module level or inside functions)."""
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name in known:
                found.add(name)
    return found


def test_only_the_engine_imports_simpy():
    users = sorted(name for name, tree in _modules().items()
                   if any(isinstance(n, (ast.Import, ast.ImportFrom)) and
                          ("simpy" in [a.name.split(".")[0] for a in n.names] if isinstance(n, ast.Import)
                           else (n.module or "").split(".")[0] == "simpy")
                          for n in ast.walk(tree)))
    assert users == ["simtrain.engine"]


def test_no_import_cycles():
    modules = _modules()
    known = set(modules)
    graph = nx.DiGraph()
    for name, tree in modules.items():
        graph.add_node(name)
        for dep in _imports(tree, known):
            if dep != name and not name.startswith(dep + "."):  # a package's own __init__ is not a cycle
                graph.add_edge(name, dep)
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, f"import cycles: {cycles[:5]}"


def test_modules_and_classes_stay_small():
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        name = path.relative_to(PACKAGE.parent)
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                size = node.end_lineno - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    too_long.append(f"{name}: class {node.name} {size} lines")
    assert not too_long, too_long


def test_engine_does_not_ask_what_kind_of_network_it_has():
    source = (PACKAGE / "engine.py").read_text(encoding="utf-8")
    for text in ("hasattr(", "isinstance(", "FlowNetwork", "AnalyticNetwork", "network.flow", "flows is None"):
        assert text not in source, f"engine.py contains {text!r}"
