"""A compiled function's machine code kept on disk as an object file, and loaded with llvmlite alone.

numba keeps what it compiles in its own cache, but loading from there means importing numba and
refreshing its target context (importing its implementation registries): about 0.4 s of a
process's CPU (measured on a 2-core machine, numba 0.68), where llvmlite's import and the load
below take about 0.07 s. So :func:`build` asks numba for a function's LLVM IR once (a fresh
compile; its callees come from numba's cache), makes every function but the entry point internal,
lets LLVM's global dead-code elimination drop what the entry point does not call (numba's Python
wrappers, the only code that calls numba's C helpers), and emits the object code for this CPU as
numba's JIT would (:func:`target_machine`). :func:`load` links it into an MCJIT engine of its own
and calls it through ctypes with numba's native calling convention: a status (0: returned), a
pointer for the return value and one for an exception's description, then each array as numba's
data model passes it (meminfo, parent, items, item size, data, shape, strides).

:func:`save` and :func:`load_saved` keep the code in a folder (:func:`cache_folder`) under a key of
everything it depends on (:func:`cache_key`): the source files, the Python, numba and llvmlite
versions, and the CPU (name, features, triple), as numba keys its own cache.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ObjectCode", "NativeFunction", "build", "load", "save", "load_saved", "cache_key", "cache_folder",
           "target_machine", "ENV_FOLDER"]

FORMAT = 1  #: the saved file's layout; part of every key
ENV_FOLDER = "SIMTRAIN_CACHE_DIR"  #: where the saved code goes, where set
#: numba's array and scalar arguments as LLVM parameter types (numba's data model, ``numba.core.datamodel``)
_SCALARS = {"int64": "i64", "float64": "double"}
_CTYPES = {"ptr": ctypes.c_void_p, "i64": ctypes.c_int64, "double": ctypes.c_double}

#: An argument: (numpy dtype name, dimensions); 0 dimensions is a scalar (int64 or float64 only).
Arg = tuple[str, int]


@dataclass(frozen=True)
class ObjectCode:
    """The machine code of one native function: its symbol, its arguments and the object file."""

    symbol: str
    args: tuple[Arg, ...]
    code: bytes

    def to_bytes(self) -> bytes:
        head = {"format": FORMAT, "symbol": self.symbol, "args": self.args,
                "sha256": hashlib.sha256(self.code).hexdigest()}
        return json.dumps(head).encode() + b"\n" + self.code

    @classmethod
    def from_bytes(cls, data: bytes) -> ObjectCode | None:
        """The code in ``data``, or None where ``data`` is not a whole file of this format."""
        head, sep, code = data.partition(b"\n")
        try:
            meta = json.loads(head)
            if not sep or meta["format"] != FORMAT or hashlib.sha256(code).hexdigest() != meta["sha256"]:
                return None
            return cls(str(meta["symbol"]), tuple((str(d), int(n)) for d, n in meta["args"]), code)
        except (ValueError, KeyError, TypeError):
            return None


def parameters(args: Sequence[Arg]) -> list[str]:
    """The native function's LLVM parameter types for ``args``: the return value's and the
    exception's pointers, then each array's seven fields (shape and strides one per dimension)."""
    out = ["ptr", "ptr"]
    for dtype, ndim in args:
        out += [_SCALARS[dtype]] if ndim == 0 else ["ptr", "ptr", "i64", "i64", "ptr"] + ["i64"] * (2 * ndim)
    return out


class NativeFunction:
    """A loaded function, called with numpy arrays (C-contiguous, of the types it was built for)
    and scalars; returns numba's status (0 where it returned; else it raised). ctypes lets go of
    the GIL for the call (numba's dispatcher holds it), and each call has its own return and
    exception slots, so threads may call it at once on arrays of their own."""

    def __init__(self, engine: Any, address: int, args: tuple[Arg, ...]):
        self._engine = engine  # the MCJIT engine that owns the code: alive as long as the function
        self.args = args
        self._fn = ctypes.CFUNCTYPE(ctypes.c_int32, *(_CTYPES[p] for p in parameters(args)))(address)

    def __call__(self, *values: Any) -> int:
        if len(values) != len(self.args):
            raise TypeError(f"{len(values)} arguments where the function takes {len(self.args)}")
        ret, exc = ctypes.create_string_buffer(64), ctypes.c_void_p()  # (what a void function returns: nothing)
        flat: list[Any] = [ctypes.addressof(ret), ctypes.addressof(exc)]
        for v, (dtype, ndim) in zip(values, self.args):
            if ndim == 0:
                flat.append(v)
                continue
            if not isinstance(v, np.ndarray) or v.dtype != np.dtype(dtype) or v.ndim != ndim or \
                    not v.flags.c_contiguous:
                raise TypeError(f"an argument is not a C-contiguous {ndim}-D {dtype} array")
            flat += [None, None, v.size, v.itemsize, v.ctypes.data, *v.shape, *v.strides]
        return int(self._fn(*flat))


def target_machine(ll: Any) -> Any:
    """An LLVM target machine for this CPU, as numba's JIT makes its own (``numba.core.codegen``:
    the host's CPU name and features, optimisation level 3, static relocation on x86)."""
    target = ll.Target.from_default_triple()
    arch = target.name
    reloc = "static" if arch.startswith("x86") else "pic" if arch.startswith("ppc") else "default"
    return target.create_target_machine(cpu=ll.get_host_cpu_name(), features=ll.get_host_cpu_features().flatten(),
                                        opt=3, reloc=reloc, codemodel="jitdefault", jit=True)


def _llvm() -> Any:
    import llvmlite.binding as ll

    ll.initialize_native_target()
    ll.initialize_native_asmprinter()
    return ll


def build(dispatcher: Any, args: Sequence[Arg]) -> ObjectCode | None:
    """The machine code of numba ``dispatcher``'s function for ``args``, or None where it would
    still call outside itself (a numba helper) or this llvmlite lacks dead-code elimination."""
    from numba import njit, types

    ll = _llvm()
    nb = [getattr(types, d) if n == 0 else types.Array(getattr(types, d), n, "C") for d, n in args]
    options = {k: v for k, v in dispatcher.targetoptions.items() if k not in ("cache", "nopython")}
    fresh = njit(cache=False, **options)(dispatcher.py_func)
    fresh.compile(tuple(nb))
    result = fresh.overloads[tuple(nb)]
    symbol = result.fndesc.mangled_name
    module = ll.parse_assembly(result.library.get_llvm_str())
    for fn in module.functions:
        if not fn.is_declaration and fn.name != symbol:
            fn.linkage = ll.Linkage.internal
    for gv in module.global_variables:
        if not gv.is_declaration:
            gv.linkage = ll.Linkage.internal
    tm = target_machine(ll)
    if not _drop_unused(ll, module, tm):
        return None
    outside = [fn.name for fn in module.functions if fn.is_declaration and not fn.name.startswith("llvm.")]
    if outside or [str(a.type) for a in module.get_function(symbol).arguments] != parameters(args):
        return None
    return ObjectCode(symbol, tuple(args), bytes(tm.emit_object(module)))


def _drop_unused(ll: Any, module: Any, tm: Any) -> bool:
    """LLVM's global dead-code elimination on ``module``, by the new pass manager or the legacy one;
    False where this llvmlite has neither."""
    if hasattr(ll, "create_new_module_pass_manager"):
        pm = ll.create_new_module_pass_manager()
        pm.add_global_dead_code_eliminate_pass()
        pm.run(module, ll.create_pass_builder(tm, ll.create_pipeline_tuning_options()))
        return True
    if hasattr(ll, "create_module_pass_manager"):
        legacy = ll.create_module_pass_manager()
        legacy.add_global_dce_pass()
        legacy.run(module)
        return True
    return False


def load(code: ObjectCode) -> NativeFunction | None:
    """``code`` linked into an MCJIT engine of its own; None where its symbol is not there."""
    ll = _llvm()
    engine = ll.create_mcjit_compiler(ll.parse_assembly(""), target_machine(ll))
    engine.add_object_file(ll.ObjectFileRef.from_data(code.code))
    engine.finalize_object()
    address = engine.get_function_address(code.symbol)
    return NativeFunction(engine, address, code.args) if address else None


def cache_folder() -> Path | None:
    """Where saved code goes: ``$SIMTRAIN_CACHE_DIR`` where set, else this package's
    ``__pycache__`` (as numba's cache) where it can be written, else the user's cache folder
    (``$XDG_CACHE_HOME/simtrain`` or ``~/.cache/simtrain``); None where none can be written."""
    env = os.environ.get(ENV_FOLDER)
    user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "simtrain"
    for folder in ([Path(env)] if env else [Path(__file__).parent / "__pycache__", user]):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            return folder
    return None


def cache_key(name: str, sources: Sequence[Path], args: Sequence[Arg]) -> str:
    """A hash of what the machine code of ``name`` depends on: its source files' bytes, its
    arguments, the file format, Python's, numba's and llvmlite's versions and the CPU."""
    import llvmlite

    ll = _llvm()
    h = hashlib.sha256()
    for part in (str(FORMAT), name, json.dumps(list(args)), sys.version, llvmlite.__version__, _numba_version(),
                 ll.get_process_triple(), ll.get_host_cpu_name(), ll.get_host_cpu_features().flatten()):
        h.update(part.encode() + b"\0")
    for path in sources:
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def _numba_version() -> str:
    """numba's version file, read without importing numba (whose import this module avoids)."""
    spec = importlib.util.find_spec("numba")
    origin = spec.origin if spec is not None else None
    if origin is None:
        return ""
    path = Path(origin).parent / "_version.py"
    return path.read_text() if path.is_file() else origin


def _path(folder: Path, name: str, key: str) -> Path:
    return folder / f"{name}-{key[:32]}.o"


def save(code: ObjectCode, name: str, key: str, folder: Path) -> Path:
    """Write ``code`` under ``key`` in ``folder`` (atomically: a temporary file, then renamed)."""
    path = _path(folder, name, key)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(code.to_bytes())
        os.chmod(tmp, 0o644)  # (mkstemp's 0600 would keep it from the installation's other users)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_saved(name: str, key: str, folder: Path) -> NativeFunction | None:
    """The function saved under ``key`` in ``folder``, loaded; None where there is none (or it is
    not a whole file)."""
    try:
        data = _path(folder, name, key).read_bytes()
    except OSError:
        return None
    code = ObjectCode.from_bytes(data)
    return load(code) if code is not None else None
