"""The notebooks in notebooks/: each runs top to bottom without an error and is committed with
its outputs stripped. Their wall times are measured by ``benchmarks/bench_notebooks.py``, not here.

Execution needs nbclient, nbformat and ipykernel (the ``test`` extra); without them those tests
skip with the reason. Each notebook runs in a fresh ``python3`` kernel whose working directory is
a temporary folder, headless (``MPLBACKEND=Agg``).
"""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_executes(path: Path, tmp_path: Path, monkeypatch):
    nbformat, NotebookClient = _notebook_tools()
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv("MPLBACKEND", "Agg")  # inherited by the kernel: no display needed
    nb = nbformat.read(str(path), as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    except CellExecutionError as exc:
        pytest.fail(f"{path.name} failed:\n{exc}", pytrace=False)
    errors = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
              if out.get("output_type") == "error"]
    assert not errors, f"{path.name}: error outputs: {[e.get('ename') for e in errors]}"
