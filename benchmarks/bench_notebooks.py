"""Wall time of each notebook in notebooks/, executed top to bottom in a fresh kernel.

Run: python benchmarks/bench_notebooks.py      (needs the ``test`` extra: nbclient, nbformat, ipykernel)
Not a test: machines are noisy; the test suite only checks that each notebook runs.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"


def main() -> None:
    import nbformat
    from nbclient import NotebookClient

    os.environ["MPLBACKEND"] = "Agg"
    print(f"{'notebook':<36} {'wall s':>8}")
    for path in sorted(NOTEBOOK_DIR.glob("*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        with tempfile.TemporaryDirectory() as tmp:
            client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp}})
            start = time.perf_counter()
            client.execute()
            wall = time.perf_counter() - start
        print(f"{path.name:<36} {wall:>8.1f}")


if __name__ == "__main__":
    main()
