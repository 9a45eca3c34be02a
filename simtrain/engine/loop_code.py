"""The compiled loop's machine code for this process (:mod:`~simtrain.machine_code`).

The first compiled run of an installation builds it from numba's compile of
:func:`simtrain.engine.compiled.run_loop` and saves it; later processes load it without importing
numba. Where no folder can be written, the build finds the code still calling outside itself, or
``SIMTRAIN_MACHINE_CODE=0`` is set, there is none, and :mod:`~simtrain.engine.priced` calls
numba's dispatcher as before: the same loop, the same spans.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import numpy as np

from simtrain import machine_code
from simtrain.machine_code import Arg, NativeError, NativeFunction

NAME = "run_loop"
#: Set to 0 to run compiled code through numba only (its exceptions named).
ENV_SWITCH = "SIMTRAIN_MACHINE_CODE"
#: the loop's arguments ``I``, ``F`` and ``o``
ARGS: tuple[Arg, ...] = (("int32", 1), ("float64", 1), ("int64", 1))
_PACKAGE = Path(__file__).resolve().parent.parent
#: the files the loop's code comes from: its functions, its layout's constants, the program's codes
SOURCES = (_PACKAGE / "engine" / "compiled.py", _PACKAGE / "engine" / "loop_layout.py",
           _PACKAGE / "workload" / "opfields.py")


def enabled() -> bool:
    """Whether saved machine code may be used (``SIMTRAIN_MACHINE_CODE`` is not ``0``)."""
    return os.environ.get(ENV_SWITCH, "1") != "0"


@cache
def native_loop() -> NativeFunction | None:
    """The loop's machine code, loaded once per process: saved by an earlier process, or built
    now (numba compiles it) and saved; None where it cannot be had (numba's dispatcher then runs)."""
    folder = machine_code.cache_folder() if enabled() else None
    if folder is None:
        return None
    return machine_code.obtain(NAME, SOURCES, ARGS, folder, _dispatcher)


def _dispatcher() -> object:
    from simtrain.engine import compiled

    return compiled.run_loop


def run_native(I: np.ndarray, F: np.ndarray, o: np.ndarray) -> bool:
    """Run the loop on ``I``, ``F``, ``o`` through its machine code; False where there is none or
    it raised (the arrays are then as it left them)."""
    native = native_loop()
    if native is None:
        return False
    try:
        native(I, F, o)
    except NativeError:
        return False
    finally:
        native.release()  # (the loop's arrays: not kept past the run)
    return True
