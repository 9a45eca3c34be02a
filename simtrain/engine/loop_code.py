"""The compiled loop's functions for this process, through their saved machine code (:mod:`simtrain.kernels`).

:data:`LOOP` names :func:`simtrain.engine.compiled.run_loop` and :func:`simtrain.engine.records.fill`
without importing them (and numba). The first compiled run of an installation builds their
machine code from numba's compile and saves it; later processes load it without numba. Where
there is none, numba's dispatchers run: the same loop, the same spans.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simtrain.kernels import Kernels
from simtrain.machine_code import Arg, NativeError

__all__ = ["LOOP", "RECORDS", "ARGS", "FILL_ARGS", "SOURCES", "run", "ready"]

#: the loop's arguments ``I``, ``F`` and ``o``
ARGS: tuple[Arg, ...] = (("int32", 1), ("float64", 1), ("int64", 1))
#: the records' fill's: records, costs, ops, positions, two dependency columns, classes, durations, prices
FILL_ARGS: tuple[Arg, ...] = (("int32", 2), ("float64", 1), ("int32", 1), ("int32", 1), ("int32", 1), ("int32", 1),
                              ("int8", 1), ("float64", 1), ("float64", 1))
_PACKAGE = Path(__file__).resolve().parent.parent
#: the files the loop's code comes from: its functions, its layout's constants, the program's codes
SOURCES = (_PACKAGE / "engine" / "compiled.py", _PACKAGE / "engine" / "records.py",
           _PACKAGE / "engine" / "loop_layout.py", _PACKAGE / "workload" / "opfields.py")
LOOP = Kernels("simtrain.engine.compiled", SOURCES, keep_arrays=False)  # (a run's largest arrays: let go)
RECORDS = Kernels("simtrain.engine.records", SOURCES, keep_arrays=False)


def run(I: np.ndarray, F: np.ndarray, o: np.ndarray) -> bool:
    """Run the loop on ``I``, ``F``, ``o``; False where its machine code raised midway (the arrays
    are then as it left them: the caller runs numba's dispatcher on a fresh start, which raises
    what it raised)."""
    try:
        LOOP.run_loop(I, F, o)
    except NativeError:
        return False
    return True


def ready() -> bool:
    """Whether the loop's machine code is saved (or loaded): a compiled run then costs its load,
    not numba's compile."""
    return LOOP.run_loop.saved(ARGS)
