"""Calibrate: time the kernels of a scenario's layout on a device and write them as a calibration
table, which a later run reads instead of the kernel model's times (:mod:`simtrain.costs.calibration`).

The timer is any callable from a :class:`~simtrain.costs.kernels.Kernel` to seconds:
:class:`~simtrain.costs.measure.TorchTimer` times it with PyTorch on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from simtrain.api.resolve import resolve
from simtrain.costs.calibration import measured
from simtrain.costs.kernels import Kernel
from simtrain.costs.measure import layout_kernels
from simtrain.errors import SpecError
from simtrain.outputs.files import atomic_open


def calibrate(settings: dict[str, Any], out: str | Path, time_of: Callable[[Kernel], float]) -> tuple[int, str]:
    """Time the kernels of the scenario ``settings`` with ``time_of`` and write the table to
    ``out``; returns (kernels measured, the table's comment)."""
    sc = resolve(settings)
    par = sc.parallel
    table = measured(layout_kernels(sc.model, par), time_of)
    comment = (f"simtrain calibration: {sc.model.name}, TP={par.tp} CP={par.cp} EP={par.ep} mbs {par.mbs} "
               f"seq {par.seq}, attention {par.attention}{', fp8' if par.fp8 else ''}; "
               f"timed on {getattr(time_of, 'device', 'a stand-in timer')}")
    try:
        with atomic_open(out) as fh:
            fh.write(table.to_csv(comment))
    except OSError as exc:
        raise SpecError(f"--out {out}: cannot write ({exc.strerror})") from None
    return len(table.entries), comment
