"""The compiled loop's machine code for this process (:mod:`~simtrain.engine.machine_code`).

The first compiled run of an installation builds it from numba's compile of
:func:`simtrain.engine.compiled.run_loop` and saves it; later processes load it without importing
numba. Where no folder can be written, or the build finds the code still calling outside itself,
there is none, and :mod:`~simtrain.engine.priced` calls numba's dispatcher as before: the same
loop, the same spans.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from simtrain.engine import machine_code
from simtrain.engine.machine_code import Arg, NativeFunction

NAME = "run_loop"
#: the loop's arguments ``I``, ``F`` and ``o``
ARGS: tuple[Arg, ...] = (("int32", 1), ("float64", 1), ("int64", 1))
_PACKAGE = Path(__file__).resolve().parent.parent
#: the files the loop's code comes from: its functions, its layout's constants, the program's codes
SOURCES = (_PACKAGE / "engine" / "compiled.py", _PACKAGE / "engine" / "loop_layout.py",
           _PACKAGE / "workload" / "opfields.py")


@cache
def native_loop() -> NativeFunction | None:
    """The loop's machine code, loaded once per process: saved by an earlier process, or built
    now (numba compiles it) and saved; None where it cannot be had (numba's dispatcher then runs)."""
    folder = machine_code.cache_folder()
    if folder is None:
        return None
    try:
        key = machine_code.cache_key(NAME, SOURCES, ARGS)
        loaded = machine_code.load_saved(NAME, key, folder)
        if loaded is not None:
            return loaded
        from simtrain.engine import compiled

        try:
            code = machine_code.build(compiled.run_loop, ARGS)
        except Exception:  # (numba's or LLVM's: the dispatcher runs the same loop)
            return None
        if code is None:
            return None
        try:
            machine_code.save(code, NAME, key, folder)
        except OSError:
            pass  # (another folder's permissions, a full disk: this process still has the code)
        return machine_code.load(code)
    except (OSError, RuntimeError):  # (llvmlite's errors are RuntimeErrors)
        return None
