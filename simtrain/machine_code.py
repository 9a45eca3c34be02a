"""A compiled function's machine code kept on disk as an object file, and loaded with llvmlite alone.

Loading numba's cached code means importing numba and refreshing its target context (importing
its implementation registries): about 0.3 s of a process's CPU (measured on a 2-core machine,
numba 0.68), where llvmlite's import and the load below take about 0.03 s. So :func:`build` takes
a function's LLVM IR from numba's compile once and adds an entry point, ``simtrain_entry(slots,
ret)``, that reads the arguments from 8-byte slots and calls the function with numba's native
calling convention (a status, 0 where it returned; a pointer for the return value and one for an
exception's description; each array as numba's data model passes it: meminfo, parent, items,
item size, data, shape, strides). Every other function is made internal, so that LLVM's global
dead-code elimination drops what the entry point does not call (numba's Python wrappers, the only
code that calls numba's C helpers); the object code is emitted for this CPU as numba's JIT would
(:func:`target_machine`). :func:`load` links it into an MCJIT engine of its own;
:class:`NativeFunction` fills the slots (an array's only where the caller passes another array)
and calls it through ctypes. :mod:`simtrain.code_cache` keeps it on disk. Where numba's IR has
typed pointers or llvmlite lacks the new pass manager, :func:`build` gives None and numba runs.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import operator
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ObjectCode", "NativeFunction", "NativeError", "build", "load", "target_machine", "arg_of",
           "parameters", "llvm", "host", "ENTRY", "FORMAT", "Arg"]

FORMAT = 2  #: the saved file's layout; part of every key
ENTRY = "simtrain_entry"  #: the entry point's symbol
#: An argument: (numpy dtype name, dimensions); 0 dimensions is a scalar.
Arg = tuple[str, int]
#: scalars as numba passes them (``numba.core.datamodel``: a boolean as a byte)
_SCALAR_LLVM = {"int64": "i64", "float64": "double", "bool": "i8"}
_SCALAR_TYPES: dict[str, tuple[type, ...]] = {"int64": (int, np.integer), "float64": (float, np.floating),
                                               "bool": (bool, np.bool_)}


class NativeError(RuntimeError):
    """A loaded function raised (numba's status ``status``): numba's run gives the exception."""

    def __init__(self, status: int):
        super().__init__(f"the compiled code raised (numba status {status}); set SIMTRAIN_MACHINE_CODE=0 to run it "
                         f"through numba, which names the exception")
        self.status = status


@dataclass(frozen=True)
class ObjectCode:
    """The machine code of one function: its arguments, what it returns and the object file."""

    args: tuple[Arg, ...]
    returns: str  # one of "none", "int64", "float64", "bool"
    code: bytes

    def to_bytes(self) -> bytes:
        head = {"format": FORMAT, "args": self.args, "returns": self.returns,
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
            return cls(tuple((str(d), int(n)) for d, n in meta["args"]), str(meta["returns"]), code)
        except (ValueError, KeyError, TypeError):
            return None


def arg_of(value: Any) -> Arg | None:
    """The argument ``value`` is: a writeable C-contiguous array's dtype and dimensions, or a
    scalar's type; None for anything else (numba then takes the call)."""
    if isinstance(value, np.ndarray):
        flags = value.flags
        return (value.dtype.name, value.ndim) if flags.c_contiguous and flags.writeable and value.ndim > 0 else None
    if isinstance(value, (bool, np.bool_)):
        return ("bool", 0)
    if isinstance(value, (int, np.integer)):
        return ("int64", 0)
    if isinstance(value, (float, np.floating)):
        return ("float64", 0)
    return None


def parameters(args: Sequence[Arg]) -> list[str]:
    """The native function's LLVM parameter types for ``args``: the return value's and the
    exception's pointers, then each scalar, and each array's seven fields (shape and strides one per
    dimension)."""
    out = ["ptr", "ptr"]
    for dtype, ndim in args:
        out += [_SCALAR_LLVM[dtype]] if ndim == 0 else ["ptr", "ptr", "i64", "i64", "ptr"] + ["i64"] * (2 * ndim)
    return out


class _Slots(threading.local):
    """One thread's slots for a function's arguments, its return slot, and the arrays whose fields
    the slots hold (held until the next call passes others, or :meth:`NativeFunction.release`)."""

    def __init__(self, size: int, arrays: int):
        self.i64 = np.zeros(size, dtype=np.int64)
        self.f64 = self.i64.view(np.float64)
        self.ret = np.zeros(1, dtype=np.int64)
        self.addresses = (self.i64.ctypes.data, self.ret.ctypes.data)
        self.bound: list[Any] = [None] * arrays


class NativeFunction:
    """A loaded function, called with the arguments it was built for (C-contiguous arrays of its
    types and scalars of its types, else TypeError); returns what numba's function returns, or
    raises :class:`NativeError` where it raised. An array's fields are written to the slots only
    where the call passes another array than the last call did: an array must not change shape in
    place between calls (numpy refuses to resize an array another object holds). ctypes lets go
    of the GIL for the call, and each thread has slots of its own, so threads may call it at once
    on arrays of their own."""

    def __init__(self, engine: Any, address: int, args: tuple[Arg, ...], returns: str):
        self._engine = engine  # the MCJIT engine that owns the code: alive as long as the function
        self.args, self.returns = args, returns
        self._fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)(address)
        self._arrays: list[tuple[int, int, Arg]] = []  # (argument, first slot, type)
        self._scalars: list[tuple[int, int, str]] = []  # (argument, slot, dtype)
        slot = 0
        for i, (dtype, ndim) in enumerate(args):
            if ndim:
                self._arrays.append((i, slot, (dtype, ndim)))
            else:
                self._scalars.append((i, slot, dtype))
            slot += 1 if ndim == 0 else 5 + 2 * ndim
        self._dtypes = [np.dtype(arg[0]) for _, _, arg in self._arrays]
        at = [i for i, _, _ in self._arrays]
        self._get = operator.itemgetter(*at) if len(at) > 1 else (lambda v: (v[at[0]],)) if at else (lambda v: ())
        self._slots = _Slots(slot, len(at))

    def __call__(self, *values: Any) -> Any:
        if len(values) != len(self.args):
            raise TypeError(f"{len(values)} arguments where the function takes {len(self.args)}")
        s = self._slots
        arrays = self._get(values)
        if not all(map(operator.is_, arrays, s.bound)):
            self._bind(s, arrays)
        for i, slot, dtype in self._scalars:
            v: Any = values[i]
            if not isinstance(values[i], _SCALAR_TYPES[dtype]) or (dtype == "int64" and isinstance(v, (bool, np.bool_))):
                raise TypeError(f"argument {i} is not a {dtype}")
            if dtype == "float64":
                s.f64[slot] = v
            else:
                s.i64[slot] = v
        status = self._fn(*s.addresses)
        if status:
            raise NativeError(status)
        kind = self.returns
        if kind == "none":
            return None
        if kind == "float64":
            return float(s.ret.view(np.float64)[0])
        if kind == "bool":
            return bool(s.ret.view(np.uint8)[0])  # (numba stores a boolean as its first byte)
        return int(s.ret[0])

    def _bind(self, s: _Slots, arrays: tuple[Any, ...]) -> None:
        for k, (v, (_, slot, arg), dtype) in enumerate(zip(arrays, self._arrays, self._dtypes)):
            if v is s.bound[k]:
                continue
            if not isinstance(v, np.ndarray) or v.dtype != dtype or v.ndim != arg[1] or not v.flags.c_contiguous \
                    or not v.flags.writeable:  # (numba types a read-only array apart, and refuses writes to it)
                raise TypeError(f"an argument is not a writeable C-contiguous {arg[1]}-D {arg[0]} array")
            s.i64[slot:slot + 5 + 2 * v.ndim] = [0, 0, v.size, v.itemsize, v.ctypes.data, *v.shape, *v.strides]
            s.bound[k] = v

    def release(self) -> None:
        """Let go of the arrays this thread's last call passed (their fields are written again at
        the next call)."""
        s = self._slots
        s.bound = [None] * len(s.bound)


def target_machine(ll: Any) -> Any:
    """An LLVM target machine for this CPU, as numba's JIT makes its own (``numba.core.codegen``:
    the host's CPU name and features, optimisation level 3, static relocation on x86)."""
    target = ll.Target.from_default_triple()
    arch = target.name
    reloc = "static" if arch.startswith("x86") else "pic" if arch.startswith("ppc") else "default"
    _, cpu, features = host()
    return target.create_target_machine(cpu=cpu, features=features, opt=3, reloc=reloc, codemodel="jitdefault",
                                        jit=True)


@functools.cache
def host() -> tuple[str, str, str]:
    """This process's LLVM target triple, CPU name and CPU features (llvmlite's, asked once: a
    process does not change CPU, and the features take a fraction of a millisecond to list)."""
    ll = llvm()
    return ll.get_process_triple(), ll.get_host_cpu_name(), ll.get_host_cpu_features().flatten()


def llvm() -> Any:
    """llvmlite's binding, its native target set up."""
    import llvmlite.binding as ll

    ll.initialize_native_target()
    ll.initialize_native_asmprinter()
    return ll


def _entry_ir(symbol: str, params: Sequence[str]) -> str:
    """The entry point: each argument read from its 8-byte slot (a byte from the slot's integer),
    then numba's function called with the return slot and an exception pointer."""
    lines = [f"define i32 @{ENTRY}(ptr %slots, ptr %ret) {{", "  %exc = alloca ptr"]
    passed = ["ptr %ret", "ptr %exc"]
    for k, ty in enumerate(params[2:]):
        lines.append(f"  %p{k} = getelementptr i64, ptr %slots, i64 {k}")
        if ty == "i8":
            lines += [f"  %w{k} = load i64, ptr %p{k}", f"  %v{k} = trunc i64 %w{k} to i8"]
        else:
            lines.append(f"  %v{k} = load {ty}, ptr %p{k}")
        passed.append(f"{ty} %v{k}")
    lines += [f"  %st = call i32 @\"{symbol}\"({', '.join(passed)})", "  ret i32 %st", "}"]
    return "\n".join(lines) + "\n"


def _numba_types(args: Sequence[Arg]) -> tuple[Any, ...]:
    from numba import types

    def scalar(dtype: str) -> Any:
        return types.boolean if dtype == "bool" else getattr(types, dtype)

    return tuple(scalar(d) if n == 0 else types.Array(scalar(d), n, "C") for d, n in args)


def build(dispatcher: Any, args: Sequence[Arg]) -> ObjectCode | None:
    """The machine code of numba ``dispatcher``'s function for ``args``, or None where it returns
    something else than nothing, an int, a float or a bool, would still call outside itself (a
    numba helper), or this LLVM lacks opaque pointers or a dead-code elimination pass."""
    from numba import types

    ll = llvm()
    result, text = _compiled(dispatcher, _numba_types(args))
    ret = result.signature.return_type
    returns = {types.none: "none", types.int64: "int64", types.float64: "float64", types.boolean: "bool"}.get(ret)
    symbol = result.fndesc.mangled_name
    params = [str(a.type) for a in ll.parse_assembly(text).get_function(symbol).arguments]
    if returns is None or params != parameters(args):
        return None
    module = ll.parse_assembly(text + _entry_ir(symbol, params))
    for fn in module.functions:
        if not fn.is_declaration and fn.name != ENTRY:
            fn.linkage = ll.Linkage.internal
    for gv in module.global_variables:
        if not gv.is_declaration:
            gv.linkage = ll.Linkage.internal
    tm = target_machine(ll)
    if not _drop_unused(ll, module, tm):
        return None
    if any(fn.is_declaration and not fn.name.startswith("llvm.") for fn in module.functions):
        return None
    return ObjectCode(tuple(args), returns, bytes(tm.emit_object(module)))


def _compiled(dispatcher: Any, sig: tuple[Any, ...]) -> tuple[Any, str]:
    """numba's compile result of ``dispatcher`` at ``sig`` and its LLVM IR: the dispatcher's own
    where it compiled now (so that numba's cache and this build share one compile), else, where it
    loaded its cached code (which keeps no IR), a fresh compile of the same function."""
    from numba import njit

    dispatcher.compile(sig)
    result = dispatcher.overloads[sig]
    if not getattr(result.library, "_disable_inspection", True):  # (True: numba loaded it from its cache)
        return result, result.library.get_llvm_str()
    options = {k: v for k, v in dispatcher.targetoptions.items() if k not in ("cache", "nopython")}
    fresh = njit(cache=False, **options)(dispatcher.py_func)
    fresh.compile(sig)
    result = fresh.overloads[sig]
    return result, result.library.get_llvm_str()


def _drop_unused(ll: Any, module: Any, tm: Any) -> bool:
    """LLVM's global dead-code elimination on ``module`` (the new pass manager's); False where this
    llvmlite lacks it."""
    if not hasattr(ll, "create_new_module_pass_manager"):
        return False
    pm = ll.create_new_module_pass_manager()
    pm.add_global_dead_code_eliminate_pass()
    pm.run(module, ll.create_pass_builder(tm, ll.create_pipeline_tuning_options()))
    return True


def load(code: ObjectCode) -> NativeFunction | None:
    """``code`` linked into an MCJIT engine of its own; None where its entry point is not there."""
    ll = llvm()
    engine = ll.create_mcjit_compiler(ll.parse_assembly(""), target_machine(ll))
    engine.add_object_file(ll.ObjectFileRef.from_data(code.code))
    engine.finalize_object()
    address = engine.get_function_address(ENTRY)
    return NativeFunction(engine, address, code.args, code.returns) if address else None
