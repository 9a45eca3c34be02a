"""The package's shape: one-way imports, small modules and classes, simpy only in the engine."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

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
    assert users == ["simtrain.engine.simulator", "simtrain.engine.streams"]


# The layers of the data flow, bottom first: a module imports only from its own layer and the
# layers below it. A module's layer is its package's (a top-level module's is its own name's),
# unless MODULE_LAYERS places it higher.
LAYERS = (
    ("foundations", {"simtrain", "errors", "units", "presets", "machine_code", "code_cache", "kernels"}),
    ("specs", {"specs", "schedules", "topology", "costs"}),
    ("program", {"workload", "network"}),
    ("run", {"engine"}),
    ("results", {"results", "analytic", "scenario", "settings"}),
    ("library", {"api", "outputs", "layout_search", "importers"}),
    ("command line", {"cli", "__main__"}),
)
MODULE_LAYERS = {
    "simtrain.workload.bound": "library",  # the search's step bound: schedules built as the API builds them
    "simtrain.workload.fixed_cost": "results",  # simtrain schedule's replay, measured as a run's metrics are
}


def _layer(module: str) -> int:
    names = [name for name, _ in LAYERS]
    if module in MODULE_LAYERS:
        return names.index(MODULE_LAYERS[module])
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else parts[0]
    found = [k for k, (_, members) in enumerate(LAYERS) if key in members]
    assert found, f"{module}: in no layer of tests/test_architecture.py's LAYERS"
    return found[0]


@pytest.mark.quick
def test_imports_go_down_the_layers():
    """Specs and schedules know nothing of programs, programs nothing of the run's results, and
    so on up to the command line: no module imports from a layer above its own."""
    modules = _modules()
    known = set(modules)
    upward = sorted(f"{name} ({LAYERS[_layer(name)][0]}) imports {dep} ({LAYERS[_layer(dep)][0]})"
                    for name, tree in modules.items() for dep in _imports(tree, known) if _layer(dep) > _layer(name))
    assert not upward, upward


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


@pytest.mark.quick
def test_engine_does_not_ask_what_kind_of_network_it_has():
    for module in ("simulator.py", "streams.py"):
        source = (PACKAGE / "engine" / module).read_text(encoding="utf-8")
        for text in ("hasattr(", "isinstance(", "FlowNetwork", "AnalyticNetwork", "network.flow", "flows is None"):
            assert text not in source, f"engine/{module} contains {text!r}"


#: What the command line may not import: it simulates, estimates, searches, calibrates and times
#: collectives only through simtrain.api (its modules hold argparse and printing).
CLI_NEVER_IMPORTS = ("simtrain.engine.simulator", "simtrain.workload.lower", "simtrain.results.metrics", "simtrain.analytic",
                     "simtrain.layout_search", "simtrain.network.planner", "simtrain.network.solver",
                     "simtrain.network.chains", "simtrain.costs.calibration")


@pytest.mark.quick
def test_the_command_line_runs_only_through_the_api():
    modules = _modules()
    known = set(modules)
    found = sorted(f"{name} imports {dep}" for name, tree in modules.items() if name.startswith("simtrain.cli")
                   for dep in _imports(tree, known) if dep.startswith(CLI_NEVER_IMPORTS))
    assert not found, found


@pytest.mark.quick
def test_the_top_level_names_resolve_and_import_nothing_first():
    """``simtrain``'s public names are the API's verbs and building blocks, each found on first use;
    ``import simtrain`` alone loads no other simtrain module (the command line's start-up)."""
    import subprocess
    import sys

    import simtrain

    assert simtrain.__all__ == sorted(simtrain.__all__) and {"Scenario", "resolve", "simulate", "estimate", "compare",
                                                             "collective", "calibrate", "search", "whatif"} <= set(simtrain.__all__)
    for name in simtrain.__all__:
        assert getattr(simtrain, name) is not None, name
        assert name in dir(simtrain)
    with pytest.raises(AttributeError, match="no attribute 'simulat'"):
        simtrain.simulat  # noqa: B018
    code = "import sys, simtrain; print(sorted(m for m in sys.modules if m.startswith('simtrain.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.quick
def test_every_package_is_installed():
    """``pip install .`` (the README's first command) installs the packages pyproject.toml lists:
    each package of the source tree is among them."""
    from simtrain.specs.strict import tomllib

    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
                 ["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(PACKAGE.parent).parts) for p in PACKAGE.rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)


# ---- tests follow the layout ---------------------------------------------------------------------

TESTS = Path(__file__).resolve().parent

# Modules without a test module of their own, and where they are exercised instead. Every other
# module simtrain/<package>/<name>.py has tests/<package>/test_<name>.py (tests/test_<name>.py at the
# top level). Packages' __init__.py files (docstrings and re-exports; presets/ holds data) need none.
TESTED_THROUGH_OTHERS = {
    "__main__.py": "python -m simtrain: tests/test_reliability.py runs it in fresh processes",
    "errors.py": "the exception types: every error test raises and matches them",
    "units.py": "constants and converters used by every loader, cost and report",
    "network/fixed.py": "the fixed-latency network tests/engine/test_simulator.py runs on",
    "engine/streams.py": "the streams of a run: tests/engine/test_simulator.py",
    "network/flow_layout.py": "the rows and fields of the flow model's arrays: tests/network/test_flowcore.py",
    "network/links.py": "link statistics: tests/network/test_solver.py and tests/network/test_flow.py",
    "network/interface.py": "the engine's side of it: tests/engine/test_simulator.py drives a network by hand",
    "schedules/ir.py": "actions and schedules, built by every test of tests/schedules/",
    "specs/gpu.py": "GPU presets and tables: tests/test_doctests.py and tests/topology/test_build.py",
    "specs/strict.py": "strict tables: the loaders' error tests and tests/test_fuzz_loaders.py",
    "workload/options.py": "the lowering's options, set by tests/workload/test_lower.py and tests/engine/test_simulator.py",
}
# Top-level test modules that check the project across modules rather than one module.
CROSS_CUTTING = {
    "test_architecture.py": "the package's shape and the tests' layout",
    "test_docs.py": "the README and docs/*.md: generated blocks, links, examples, pictures",
    "test_equivalence.py": "folded, fast-path runs against every rank simulated, on random layouts",
    "test_doctests.py": "the examples in docstrings",
    "test_benchmarks.py": "the benchmarks' quick forms run to the end",
    "test_cli_fuzz.py": "every flag and --config key of every command under generated values",
    "test_fuzz_loaders.py": "every loader under random and mutated input",
    "test_golden.py": "byte-identical reports of the golden scenarios",
    "test_interrupts.py": "signals, killed and concurrent runs and searches, in real processes",
    "test_notebooks.py": "the notebooks run and are committed without outputs",
    "test_reliability.py": "no hangs, reproducible across processes, properties of random configurations",
}
# Folders of test suites that check the whole simulator against published measurements.
SUITES = {"validation": "published runs and benchmarks, each with its citation"}


def _test_module_of(module: Path) -> Path:
    rel = module.relative_to(PACKAGE)
    return TESTS / rel.parent / f"test_{rel.name}"


@pytest.mark.quick
def test_every_module_has_its_test_module():
    """A reader finds the tests of what they change: tests/ mirrors simtrain/, one test module per
    module, or the module says above where it is exercised instead."""
    modules = {m.relative_to(PACKAGE).as_posix(): m for m in sorted(PACKAGE.rglob("*.py")) if m.name != "__init__.py"}
    missing = [f"{rel}: no {_test_module_of(m).relative_to(TESTS.parent).as_posix()}" for rel, m in modules.items()
               if rel not in TESTED_THROUGH_OTHERS and not _test_module_of(m).is_file()]
    assert not missing, missing
    own = [rel for rel in TESTED_THROUGH_OTHERS if rel in modules and _test_module_of(modules[rel]).is_file()]
    assert not own, f"these have a test module now; drop them from TESTED_THROUGH_OTHERS: {own}"
    gone = sorted(set(TESTED_THROUGH_OTHERS) - set(modules))
    assert not gone, f"no such modules: {gone}"


@pytest.mark.quick
def test_every_test_module_names_its_module():
    """The other way round: tests/<package>/test_<name>.py tests simtrain/<package>/<name>.py; a
    top-level test module tests a top-level module or is one of the cross-cutting suites."""
    orphans = []
    for test in sorted(TESTS.rglob("test_*.py")):
        rel = test.relative_to(TESTS)
        source = PACKAGE / rel.parent / test.name.removeprefix("test_")
        if not source.is_file() and not (len(rel.parts) == 1 and rel.name in CROSS_CUTTING) and rel.parts[0] not in SUITES:
            orphans.append(rel.as_posix())
    assert not orphans, f"test modules that name no module of simtrain/: {orphans}"


def _marks_quick(tree: ast.Module) -> bool:
    """``pytest.mark.quick`` anywhere in the module: ``pytestmark``, a decorator or a ``pytest.param``'s marks."""
    return any(isinstance(node, ast.Attribute) and node.attr == "quick" and isinstance(node.value, ast.Attribute)
               and node.value.attr == "mark" for node in ast.walk(tree))


@pytest.mark.quick
def test_every_test_module_has_a_quick_test():
    """``pytest -m quick`` touches every test module's area: each module with tests marks at least one
    of its fast tests ``quick`` (a new module chooses its own)."""
    without = []
    for test in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(test.read_text(encoding="utf-8"), str(test))
        has_tests = any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")
                        for node in ast.walk(tree))
        if has_tests and not _marks_quick(tree):
            without.append(test.relative_to(TESTS).as_posix())
    assert not without, f"test modules with no test marked pytest.mark.quick: {without}"


@pytest.mark.quick
def test_ruff_finds_nothing():
    """Static checks: ruff with the rules of ``pyproject.toml`` (pyflakes' unused and undefined
    names, and syntax) over the package, the tests, the benchmarks and the docs' scripts."""
    import subprocess
    import sys

    root = PACKAGE.parent
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                           "simtrain", "tests", "benchmarks", "docs"], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_finds_nothing(tmp_path):
    """Static types: mypy with ``[tool.mypy]`` of ``pyproject.toml``, strict over the modules it
    lists (specs, schedules, workload, network, the engine and the metrics; the other modules are
    followed for their types, their own errors unreported). Not quick: a cold run takes seconds.
    Its cache goes to a temporary folder, so every run is cold and nothing is written to the tree."""
    import subprocess
    import sys

    root = PACKAGE.parent
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "pyproject.toml",
                           "--cache-dir", str(tmp_path / "mypy-cache")], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
