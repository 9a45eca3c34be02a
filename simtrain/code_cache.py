"""Machine code on disk: where it is kept, under which key, and how a process gets it.

:func:`obtain` gives a function's machine code (:mod:`simtrain.machine_code`): saved in a folder
(:func:`cache_folder`) by an earlier process under a key of everything it depends on
(:func:`cache_key`: the source files, the Python, numba and llvmlite versions and the CPU, as numba
keys its own cache), or built now from numba's compile and saved, atomically (:func:`save`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from simtrain.machine_code import FORMAT, Arg, NativeFunction, ObjectCode, build, host, load

__all__ = ["cache_folder", "cache_key", "save", "load_saved", "is_saved", "obtain", "ENV_FOLDER"]

ENV_FOLDER = "SIMTRAIN_CACHE_DIR"  #: where the saved code goes, where set


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

    h = hashlib.sha256()
    for part in (str(FORMAT), name, json.dumps(list(args)), sys.version, llvmlite.__version__, _numba_version(),
                 *host()):
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


def obtain(name: str, sources: Sequence[Path], args: Sequence[Arg], folder: Path,
           dispatcher: Callable[[], Any]) -> NativeFunction | None:
    """The machine code of ``name`` for ``args``: saved in ``folder`` by an earlier process, or
    built now from ``dispatcher()`` (numba's) and saved; None where it cannot be had."""
    try:
        key = cache_key(name, sources, args)
        loaded = load_saved(name, key, folder)
        if loaded is not None:
            return loaded
        try:
            code = build(dispatcher(), args)
        except Exception:  # (numba's or LLVM's: numba's dispatcher runs the same function)
            return None
        if code is None:
            return None
        try:
            save(code, name, key, folder)
        except OSError:
            pass  # (a folder another user owns, a full disk: this process still has the code)
        return load(code)
    except (OSError, RuntimeError):  # (llvmlite's errors are RuntimeErrors)
        return None


def is_saved(name: str, sources: Sequence[Path], args: Sequence[Arg], folder: Path) -> bool:
    """Whether ``folder`` holds the code of ``name`` for ``args`` (a file under its key)."""
    try:
        return _path(folder, name, cache_key(name, sources, args)).is_file()
    except (OSError, RuntimeError):
        return False


def load_saved(name: str, key: str, folder: Path) -> NativeFunction | None:
    """The function saved under ``key`` in ``folder``, loaded; None where there is none (or it is
    not a whole file)."""
    try:
        data = _path(folder, name, key).read_bytes()
    except OSError:
        return None
    code = ObjectCode.from_bytes(data)
    return load(code) if code is not None else None
