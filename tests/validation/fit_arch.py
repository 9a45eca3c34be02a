"""The fit of the one kernel-model parameter per GPU architecture that no measurement gives:
``tile_k_overhead`` (:class:`simtrain.specs.arch.ArchProfile`), the fixed time of a GEMM's output
tile outside its main loop, in K elements of that loop.

``python tests/validation/fit_arch.py [hopper|ampere ...]`` runs the visible published runs of
each architecture for every value of its :data:`GRID` and prints the mean |error| of each source set,
then the value with the smallest mean of the set means. It fits on the sets whose step is almost
all GEMM time, so that the parameter absorbs nothing else: Hopper on the dense NeMo runs
(``published_h100.json``, set ``H100-nemo-dense``: compute is 92-96% of their simulated step),
Ampere on both A100 papers (``published_a100.json``). The MoE runs are reported beside the fit,
not fitted. The value found is written into ``simtrain/specs/arch.py`` by hand, with the fit's
figures in its docstring.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

HERE = Path(__file__).parent
for path in (HERE.parent, HERE.parent.parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from simtrain.specs import arch  # noqa: E402
from validation import published_a100, published_h100  # noqa: E402

GRID = {"hopper": (0, 256, 512, 768, 1024, 1280, 1536), "ampere": (0, 128, 256, 384)}
FITTED_SETS = {"hopper": ("H100-nemo-dense",), "ampere": ("A100-korthikanti", "A100-megatron-sc21")}


def _errors(name: str) -> dict[str, float]:
    """Mean |error| per source set of architecture ``name``'s visible runs, at the current profile."""
    if name == "ampere":
        return {k: v[0] for k, v in published_a100.paper_errors(published_a100.run_all()).items()}
    return {k: v[0] for k, v in published_h100.set_errors(published_h100.run_all()).items()}


def fit(name: str) -> int:
    """Print each grid value's errors and return the best value for architecture ``name``."""
    base = arch.ARCHS[name]
    best: tuple[float, int] | None = None
    try:
        for value in GRID[name]:
            arch.ARCHS[name] = dataclasses.replace(base, tile_k_overhead=value)
            errors = _errors(name)
            score = sum(errors[s] for s in FITTED_SETS[name]) / len(FITTED_SETS[name])
            cells = ", ".join(f"{k} {v:.1f}%" for k, v in errors.items())
            print(f"{name} tile_k_overhead={value:5d}: {cells}; fitted mean {score:.2f}%", flush=True)
            if best is None or score < best[0]:
                best = (score, value)
    finally:
        arch.ARCHS[name] = base
    assert best is not None
    print(f"{name}: tile_k_overhead = {best[1]} (fitted mean |error| {best[0]:.2f}%)", flush=True)
    return best[1]


if __name__ == "__main__":  # pragma: no cover
    for name in sys.argv[1:] or list(FITTED_SETS):
        fit(name)
