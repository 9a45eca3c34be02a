"""The flow model's compiled functions, called through their saved machine code where it can be had.

:mod:`~simtrain.network.flowcore` and :mod:`~simtrain.network.flowahead` are numba functions;
importing them imports numba, whose import and cached-code load cost about 0.3 s of a process
(measured on a 2-core machine). :data:`CORE` and :data:`AHEAD` name the same functions; each,
called, runs the function's machine code for the arguments' types (:mod:`simtrain.machine_code`:
saved by an earlier process, or built now from numba's compile and saved), loaded without numba.
Where none can be had (no folder can be written, ``SIMTRAIN_MACHINE_CODE=0``, arguments numba
takes but the machine code does not, as a non-contiguous array), the call goes to numba's
dispatcher: the same function, the same results.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from simtrain import machine_code
from simtrain.machine_code import Arg, NativeFunction

__all__ = ["Kernel", "Kernels", "CORE", "AHEAD", "SOURCES", "ENV_SWITCH"]

#: Set to 0 to run compiled code through numba only (its exceptions named).
ENV_SWITCH = "SIMTRAIN_MACHINE_CODE"
_HERE = Path(__file__).resolve().parent
#: the files the functions' code comes from (their constants and the tolerance they share)
SOURCES = tuple(_HERE / f for f in ("flowcore.py", "flowahead.py", "flow_layout.py", "maxmin.py"))


class Kernel:
    """One compiled function of ``module``, called as its numba dispatcher is called."""

    def __init__(self, module: str, name: str, sources: Sequence[Path]):
        self.module, self.name, self.sources = module, name, tuple(sources)
        self._fast: Callable[..., Any] | None = None  # what the last call ran: machine code or numba's dispatcher
        self._numba: Callable[..., Any] | None = None
        self._by_args: dict[tuple[Arg, ...], NativeFunction | None] = {}

    def __call__(self, *values: Any) -> Any:
        fast = self._fast
        if fast is not None:
            try:
                return fast(*values)
            except TypeError:  # machine code for other types (checked before it runs): look again
                if fast is self._numba:
                    raise
        fast = self._fast = self._resolve(values)
        return fast(*values)

    def dispatcher(self) -> Callable[..., Any]:
        """numba's dispatcher of the function (importing numba)."""
        if self._numba is None:
            self._numba = getattr(importlib.import_module(self.module), self.name)
        return self._numba

    def _resolve(self, values: tuple[Any, ...]) -> Callable[..., Any]:
        """The machine code for ``values``' types, or numba's dispatcher where there is none
        (numba's then runs every later call: it takes any types)."""
        args = tuple(map(machine_code.arg_of, values))
        if any(a is None for a in args) or os.environ.get(ENV_SWITCH, "1") == "0":
            return self.dispatcher()
        key: tuple[Arg, ...] = args  # type: ignore[assignment]  # (no None, checked above)
        if key not in self._by_args:
            folder = machine_code.cache_folder()
            self._by_args[key] = None if folder is None else machine_code.obtain(
                f"{self.module.rsplit('.', 1)[-1]}.{self.name}", self.sources, key, folder, self.dispatcher)
        native = self._by_args[key]
        return self.dispatcher() if native is None else native


class Kernels:
    """The compiled functions of ``module`` as attributes (:class:`Kernel`), made at first use."""

    def __init__(self, module: str, sources: Sequence[Path]):
        self._module, self._sources = module, tuple(sources)

    def __getattr__(self, name: str) -> Kernel:
        if name.startswith("_"):
            raise AttributeError(name)
        kernel = Kernel(self._module, name, self._sources)
        setattr(self, name, kernel)  # (found as an attribute from now on)
        return kernel


CORE = Kernels("simtrain.network.flowcore", SOURCES)
AHEAD = Kernels("simtrain.network.flowahead", SOURCES)
