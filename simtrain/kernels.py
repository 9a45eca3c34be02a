"""numba functions called through their saved machine code where it can be had.

Importing a module of numba functions imports numba, whose import and cached-code load cost about
0.3 s of a process (measured on a 2-core machine). A :class:`Kernels` names a module's functions
without importing it; each :class:`Kernel`, called, runs the function's machine code for the
arguments' types (:mod:`simtrain.machine_code`: saved by an earlier process, or built now from
numba's compile and saved), loaded without numba. Where none can be had (no folder can be
written, ``SIMTRAIN_MACHINE_CODE=0``, arguments numba takes but the machine code does not, as a
non-contiguous array), the call goes to numba's dispatcher: the same function, the same results.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from simtrain import code_cache, machine_code
from simtrain.machine_code import Arg, NativeFunction

__all__ = ["Kernel", "Kernels", "ENV_SWITCH"]

#: Set to 0 to run compiled code through numba only (its exceptions named).
ENV_SWITCH = "SIMTRAIN_MACHINE_CODE"


class Kernel:
    """One compiled function of ``module``, called as its numba dispatcher is called. With
    ``keep_arrays`` its machine code holds the arrays of its last call (the next call passing the
    same ones skips writing their fields: a flow model's functions, called thousands of times on
    the same arrays); without, it lets go of them after each call (a run's loop, whose arrays are
    a run's largest)."""

    def __init__(self, module: str, name: str, sources: Sequence[Path], keep_arrays: bool = True):
        self.module, self.name, self.sources, self.keep_arrays = module, name, tuple(sources), keep_arrays
        self._fast: Callable[..., Any] | None = None  # what the last call ran: machine code or numba's dispatcher
        self._numba: Callable[..., Any] | None = None
        self._by_args: dict[tuple[Arg, ...], NativeFunction | None] = {}

    def __call__(self, *values: Any) -> Any:
        if not self.keep_arrays:
            try:
                return self._call(values)
            finally:
                self.release()
        return self._call(values)

    def _call(self, values: tuple[Any, ...]) -> Any:
        fast = self._fast
        if fast is not None:
            try:
                return fast(*values)
            except TypeError:  # machine code for other types (checked before it runs): look again
                if fast is self._numba:
                    raise
        fast = self._fast = self._resolve(values)
        return fast(*values)

    def prepare(self, args: Sequence[Arg]) -> bool:
        """Have the machine code for ``args`` ready (loaded, or built and saved) for the next call;
        whether there is any (else numba's dispatcher runs)."""
        native = self._native_for(tuple(args))
        self._fast = native if native is not None else self.dispatcher()
        return native is not None

    def saved(self, args: Sequence[Arg]) -> bool:
        """Whether the machine code for ``args`` is loaded in this process or saved by an earlier
        one (looked up, not loaded)."""
        key = tuple(args)
        if self._by_args.get(key) is not None:
            return True
        folder = _folder()
        return folder is not None and code_cache.is_saved(self._file_name(), self.sources, key, folder)

    def _file_name(self) -> str:
        return f"{self.module.rsplit('.', 1)[-1]}.{self.name}"

    def release(self) -> None:
        """Let go of the arrays the machine code's last call in this thread passed."""
        release = getattr(self._fast, "release", None)  # (machine code has it; numba's dispatcher not)
        if release is not None:
            release()

    def dispatcher(self) -> Callable[..., Any]:
        """numba's dispatcher of the function (importing numba)."""
        if self._numba is None:
            self._numba = getattr(importlib.import_module(self.module), self.name)
        return self._numba

    def _resolve(self, values: tuple[Any, ...]) -> Callable[..., Any]:
        """The machine code for ``values``' types, or numba's dispatcher where there is none
        (numba's then runs every later call: it takes any types)."""
        args = tuple(map(machine_code.arg_of, values))
        if any(a is None for a in args):
            return self.dispatcher()
        native = self._native_for(args)  # type: ignore[arg-type]  # (no None, checked above)
        return self.dispatcher() if native is None else native

    def _native_for(self, args: tuple[Arg, ...]) -> NativeFunction | None:
        if args not in self._by_args:
            folder = _folder()
            self._by_args[args] = None if folder is None else code_cache.obtain(
                self._file_name(), self.sources, args, folder, self._fresh_dispatcher)
        return self._by_args[args]

    def _fresh_dispatcher(self) -> Callable[..., Any]:
        """numba's dispatcher, numba's own saved code of every compiled function of the source
        files' modules forgotten first (called only to build machine code for sources not seen
        before). numba keys its saved code by each function's own file, so a function whose
        callee in another file changed would load its code from before the change, and that
        code would then be saved under the new sources' key."""
        dispatcher = self.dispatcher()  # (its module imported, and with it those it calls)
        files = {path.resolve() for path in self.sources}
        for module in list(sys.modules.values()):
            file = getattr(module, "__file__", None)
            if file is None or Path(file).resolve() not in files:
                continue
            for value in vars(module).values():
                cache = getattr(value, "_cache", None)
                if hasattr(value, "py_func") and cache is not None and hasattr(cache, "flush"):
                    cache.flush()
        return dispatcher


def _folder() -> Path | None:
    """Where machine code is kept; None where it is switched off (``SIMTRAIN_MACHINE_CODE=0``) or
    no folder can be written."""
    return code_cache.cache_folder() if os.environ.get(ENV_SWITCH, "1") != "0" else None


class Kernels:
    """The compiled functions of ``module`` as attributes (:class:`Kernel`, ``keep_arrays`` as
    given), made at first use."""

    def __init__(self, module: str, sources: Sequence[Path], keep_arrays: bool = True):
        self._module, self._sources, self._keep = module, tuple(sources), keep_arrays

    def __getattr__(self, name: str) -> Kernel:
        if name.startswith("_"):
            raise AttributeError(name)
        kernel = Kernel(self._module, name, self._sources, self._keep)
        setattr(self, name, kernel)  # (found as an attribute from now on)
        return kernel
