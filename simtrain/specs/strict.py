"""Strict reading of user tables (TOML files, JSON configs, flags).

Every problem raises a :class:`SpecError` whose message names the source, the key and the value:
unknown keys (with a close-match suggestion), missing keys, wrong types, impossible values.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import Any

from simtrain.errors import SpecError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

_MISSING = object()


def read_text(path: str | Path, label: str | None = None) -> str:
    """The text of a user's file; a missing or unreadable file is a :class:`SpecError` naming it
    (as ``label``, e.g. ``"--calibration FILE"``, when given)."""
    path = Path(path)
    name = label or str(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{name}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{name}: cannot read ({exc.__class__.__name__}: {exc})") from None


def read_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file; a syntax error names the file and the line."""
    return parse_toml(read_text(path), str(path))


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """Parse TOML text; ``source`` names it in error messages."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source}: malformed TOML: {exc}") from None


class Table:
    """A view on one table of user input that checks every key it hands out.

    ``where`` names the table in messages (``"h100.toml [node]"``). Call :meth:`done` after the
    last :meth:`get` so that keys nobody asked for are reported as unknown.
    """

    def __init__(self, data: Any, where: str):
        if not isinstance(data, dict):
            raise SpecError(f"{where}: expected a table, got {type(data).__name__} {data!r}")
        self.data = data
        self.where = where
        self._seen: set[str] = set()

    def has(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = _MISSING, *,
            min_value: float | None = None, positive: bool = False,
            choices: tuple[Any, ...] | None = None) -> Any:
        """The value of ``key``, checked for type, range and membership."""
        self._seen.add(key)
        if key not in self.data:
            if default is _MISSING:
                raise SpecError(f"{self.where}: missing key {key!r}")
            return default
        value = self.data[key]
        return check_value(f"{self.where}: {key}", value, kind, min_value=min_value,
                           positive=positive, choices=choices)

    def sub(self, key: str, default_empty: bool = False) -> "Table":
        """A nested table."""
        self._seen.add(key)
        if key not in self.data:
            if default_empty:
                return Table({}, f"{self.where} [{key}]")
            raise SpecError(f"{self.where}: missing table [{key}]")
        return Table(self.data[key], f"{self.where} [{key}]")

    def done(self) -> None:
        """Raise for keys that were never asked for."""
        extra = sorted(set(self.data) - self._seen)
        if extra:
            key = extra[0]
            close = difflib.get_close_matches(key, sorted(self._seen), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            known = ", ".join(sorted(self._seen))
            raise SpecError(f"{self.where}: unknown key {key!r}{hint} (valid keys: {known})")


def check_value(name: str, value: Any, kind: type | tuple[type, ...], *,
                min_value: float | None = None, positive: bool = False,
                choices: tuple[Any, ...] | None = None) -> Any:
    """Check one value; ints are accepted where floats are asked for, bools never pass as ints."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok and float in kinds and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        names = " or ".join(k.__name__ for k in kinds)
        raise SpecError(f"{name} = {value!r}: expected {names}")
    if isinstance(value, float) and value != value:
        raise SpecError(f"{name} = {value!r}: not a number")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value in (float("inf"), float("-inf")):
            raise SpecError(f"{name} = {value!r}: must be finite")
        if positive and value <= 0:
            raise SpecError(f"{name} = {value!r}: must be > 0")
        if min_value is not None and value < min_value:
            raise SpecError(f"{name} = {value!r}: must be >= {min_value}")
    if choices is not None and value not in choices:
        close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise SpecError(f"{name} = {value!r}: must be one of {', '.join(map(str, choices))}{hint}")
    return value
