"""The notebooks in notebooks/: each runs top to bottom without an error and is committed with
its outputs stripped. Their wall times are measured by ``benchmarks/bench_notebooks.py``, not here.

Execution needs nbclient, nbformat and ipykernel (the ``test`` extra); without them those tests
skip with the reason. Each notebook runs in a fresh ``python3`` kernel whose working directory is
notebooks/, as in ``jupyter lab notebooks/``, headless (``MPLBACKEND=Agg``), and leaves nothing there
that ``git status`` would show: what a notebook writes goes to a temporary folder.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
EXPECTED = (
    "01_schedules.ipynb",
    "02_analytic_vs_simulated.ipynb",
    "03_before_buying_hardware.ipynb",
    "04_long_context_and_moe.ipynb",
)
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 300  # per cell


def _ids(path: Path) -> str:
    return path.name


@pytest.mark.quick
def test_expected_notebooks_exist():
    missing = [name for name in EXPECTED if not (NOTEBOOK_DIR / name).is_file()]
    assert not missing, f"missing notebooks in {NOTEBOOK_DIR}: {missing}"


@pytest.mark.quick
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_committed_without_outputs(path: Path):
    """Outputs, execution counts and widget state stay out of git (strip them before committing)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb.get("nbformat") == 4, f"{path.name}: not an nbformat 4 notebook"
    dirty = []
    for i, cell in enumerate(nb["cells"]):
        if cell.get("cell_type") != "code":
            continue
        if cell.get("outputs"):
            dirty.append(f"cell {i} has {len(cell['outputs'])} output(s)")
        if cell.get("execution_count") is not None:
            dirty.append(f"cell {i} has execution_count {cell['execution_count']}")
    if "widgets" in nb.get("metadata", {}):
        dirty.append("notebook metadata holds widget state")
    assert not dirty, f"{path.name}: strip the outputs before committing: " + "; ".join(dirty)


@pytest.mark.quick
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_uses_only_the_top_level_api(path: Path):
    """A notebook imports ``simtrain`` and names from its ``__all__`` only, and reads nothing
    below it (``simtrain.x.y``): what it shows a reader works as shown."""
    import ast

    import simtrain

    bad = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        tree = ast.parse("".join(cell["source"]))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bad += [a.name for a in node.names if a.name.startswith("simtrain.")]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("simtrain"):
                if node.module != "simtrain":
                    bad.append(node.module)
                bad += [a.name for a in node.names if a.name not in simtrain.__all__]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "simtrain":
                if node.attr not in simtrain.__all__:
                    bad.append(f"simtrain.{node.attr}")
    assert not bad, f"{path.name}: {bad}"


def _notebook_tools():
    """nbformat and NotebookClient, or a skip naming what is missing."""
    try:
        import ipykernel  # noqa: F401  (the kernel nbclient starts)
        import nbformat
        from nbclient import NotebookClient
    except ImportError as exc:
        pytest.skip(f"executing notebooks needs nbclient, nbformat and ipykernel "
                    f"(pip install -e '.[test]'): {exc}")
    return nbformat, NotebookClient


def git_status(folder: Path) -> set[str]:
    """The lines of ``git status --porcelain`` for ``folder`` (new and changed files, those that
    .gitignore names left out); outside a git checkout, every file under it."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", "."], cwd=folder,
                             capture_output=True, text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return {str(p.relative_to(folder)) for p in folder.rglob("*")
                if p.is_file() and not {".ipynb_checkpoints", "__pycache__"} & set(p.parts)}
    return set(out.splitlines())


@pytest.mark.quick
@pytest.mark.parametrize("checkout", [False, True], ids=["plain folder", "git checkout"])
def test_git_status_sees_a_new_file(tmp_path: Path, checkout: bool):
    """The check of test_notebook_executes sees a file a notebook would leave, in a git checkout
    and, by listing the folder, outside one; not one that .gitignore names."""
    if checkout:
        try:
            subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            pytest.skip("git is not available")
        (tmp_path / ".gitignore").write_text(".ipynb_checkpoints/\n")
    folder = tmp_path / "notebooks"
    folder.mkdir()
    before = git_status(folder)
    for name in ("sweep/whatif-sweep.png", ".ipynb_checkpoints/a-checkpoint.ipynb"):
        (folder / name).parent.mkdir()
        (folder / name).write_bytes(b"")
    assert len(git_status(folder) - before) == 1


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_executes(path: Path, monkeypatch):
    nbformat, NotebookClient = _notebook_tools()
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv("MPLBACKEND", "Agg")  # inherited by the kernel: no display needed
    nb = nbformat.read(str(path), as_version=4)
    before = git_status(NOTEBOOK_DIR)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    try:
        client.execute()
    except CellExecutionError as exc:
        pytest.fail(f"{path.name} failed:\n{exc}", pytrace=False)
    errors = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
              if out.get("output_type") == "error"]
    assert not errors, f"{path.name}: error outputs: {[e.get('ename') for e in errors]}"
    left = git_status(NOTEBOOK_DIR) - before
    assert not left, f"{path.name} left files in notebooks/ (write them to a temporary folder): {sorted(left)}"
