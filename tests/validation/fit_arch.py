"""The fit of the kernel-model parameters that no measurement gives, one value per GPU
architecture (:class:`simtrain.specs.arch.ArchProfile`):

* ``tile_k_overhead``: the fixed time of a GEMM's output tile outside its main loop, in K
  elements of that loop; fitted on the runs whose step is almost all GEMM time, so that it
  absorbs nothing else: Hopper on the dense NeMo runs (``published_h100.json``, set
  ``H100-nemo-dense``: compute is 92-96% of their simulated step), Ampere on both A100 papers
  (``published_a100.json``);
* ``expert_gemm_host_s``: the host's time to issue one expert GEMM of a grouped GEMM; fitted on
  Hopper's MoE runs (both MoE sets of ``published_h100.json``), after ``tile_k_overhead``.

``python tests/validation/fit_arch.py [NAME ...]`` (names from :data:`FITS`; all by default) runs
each fit's published runs for every value of its grid and prints the mean |error| of each source
set, then the value with the smallest mean of the fitted sets' means. The values found are
written into ``simtrain/specs/arch.py`` by hand, with the fit's figures in its docstring.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).parent
for path in (HERE.parent, HERE.parent.parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from simtrain.specs import arch  # noqa: E402
from simtrain.units import US  # noqa: E402
from validation import published_a100, published_h100  # noqa: E402


class Fit(NamedTuple):
    """One parameter of one architecture, the values tried and the source sets it is fitted on."""

    arch: str
    field: str
    grid: tuple[float, ...]
    sets: tuple[str, ...]


FITS = {
    "hopper-tile": Fit("hopper", "tile_k_overhead", (0, 128, 256, 384, 512), ("H100-nemo-dense",)),
    "ampere-tile": Fit("ampere", "tile_k_overhead", (0, 128, 256, 384), ("A100-korthikanti", "A100-megatron-sc21")),
    "hopper-host": Fit("hopper", "expert_gemm_host_s", tuple(x * US for x in (0, 20, 40, 50, 60, 70, 80)),
                       ("H100-nemo-moe", "H100-megatron-moe")),
}


def _errors(name: str) -> dict[str, float]:
    """Mean |error| per source set of architecture ``name``'s visible runs, at the current profile."""
    if name == "ampere":
        return {k: v[0] for k, v in published_a100.paper_errors(published_a100.run_all()).items()}
    return {k: v[0] for k, v in published_h100.set_errors(published_h100.run_all()).items()}


def fit(spec: Fit) -> float:
    """Print each grid value's errors and return the best value of ``spec``."""
    base = arch.ARCHS[spec.arch]
    best: tuple[float, float] | None = None
    try:
        for value in spec.grid:
            arch.ARCHS[spec.arch] = dataclasses.replace(base, **{spec.field: value})
            errors = _errors(spec.arch)
            score = sum(errors[s] for s in spec.sets) / len(spec.sets)
            cells = ", ".join(f"{k} {v:.1f}%" for k, v in errors.items())
            print(f"{spec.arch} {spec.field}={value:g}: {cells}; fitted mean {score:.2f}%", flush=True)
            if best is None or score < best[0]:
                best = (score, value)
    finally:
        arch.ARCHS[spec.arch] = base
    assert best is not None
    print(f"{spec.arch}: {spec.field} = {best[1]:g} (fitted mean |error| {best[0]:.2f}%)", flush=True)
    return best[1]


if __name__ == "__main__":  # pragma: no cover
    names = sys.argv[1:] or list(FITS)
    unknown = [n for n in names if n not in FITS]
    if unknown:
        print(f"fit_arch.py: unknown fit {unknown[0]!r}; valid: {', '.join(FITS)}", file=sys.stderr)
        sys.exit(2)
    for name in names:
        fit(FITS[name])
