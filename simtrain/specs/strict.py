"""Strict reading of user tables (TOML files, JSON configs, flags).

Every problem raises a :class:`SpecError` whose message names the source, the key and the value:
unknown keys (with a close-match suggestion), missing keys, wrong types, impossible values.

Reading is bounded: a file is read once, at most :data:`MAX_TEXT_BYTES` (+1 to tell that it is
larger), so a link to ``/dev/zero`` ends at once; binary input (not UTF-8, or NUL bytes), nesting
deeper than the parser's recursion limit and integers longer than Python's int-string conversion
limit (4,300 digits, PEP 651's ``sys.set_int_max_str_digits``) are each one :class:`SpecError`
naming the file. A value echoed in a message is cut to :data:`SHOWN_CHARS` characters.
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path
from typing import Any

from simtrain.errors import SpecError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

_MISSING = object()

#: The largest TOML or JSON file read: 64 MiB, far above any topology, model or experiment
#: (the largest preset is a few KiB) and small enough to parse in memory.
MAX_TEXT_BYTES = 64 * 2**20
#: The longest value echoed in an error message, in characters.
SHOWN_CHARS = 80
#: The largest integer a setting can hold: numpy's int64 (``np.iinfo(np.int64).max``).
MAX_INT = 2**63 - 1


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)``, cut to ``limit`` characters with ``...`` (an error line stays one short line).

    >>> shown("x" * 100, 10)
    "'xxxxxx..."
    """
    try:
        text = repr(value)
    except ValueError:  # an int beyond the int-string conversion limit
        text = f"<an integer of about {value.bit_length() * 0.30103:.0f} digits>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def clip(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters with ``...``, unquoted (:func:`shown` quotes).

    >>> clip("abcdef", 5)
    'ab...'
    """
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:g} MiB" if n_bytes >= 2**20 else f"{n_bytes:,} bytes"


def read_bytes(path: str | Path, label: str | None = None, max_bytes: int = MAX_TEXT_BYTES) -> bytes:
    """At most ``max_bytes`` of a user's file, read once; a missing, unreadable or larger file is a
    :class:`SpecError` naming it (as ``label`` when given)."""
    path = Path(path)
    name = label or str(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise SpecError(f"{name}: file not found") from None
    except IsADirectoryError:
        raise SpecError(f"{name}: is a folder, not a file") from None
    except OSError as exc:
        raise SpecError(f"{name}: cannot read ({exc.__class__.__name__}: {exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise SpecError(f"{name}: larger than {_size(max_bytes)}; not an input file this command reads")
    return data


def read_text(path: str | Path, label: str | None = None, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of a user's file (:func:`read_bytes`); binary content is a
    :class:`SpecError` naming the file (as ``label``, e.g. ``"--calibration FILE"``, when given)."""
    name = label or str(path)
    data = read_bytes(path, label, max_bytes)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{name}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                        f"expected a text file") from None
    nul = text.find("\x00")
    if nul >= 0:
        raise SpecError(f"{name}: binary data (a NUL byte at offset {nul}); expected a text file")
    return text


def read_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file; a syntax error names the file and the line."""
    return parse_toml(read_text(path), str(path))


def _parse_guarded(parse: Any, text: str, source: str, what: str) -> Any:
    """``parse(text)`` with the parser's RecursionError (deep nesting) and MemoryError as one line."""
    try:
        return parse(text)
    except RecursionError:
        raise SpecError(f"{source}: malformed {what}: arrays or tables nested too deeply "
                        f"(beyond the parser's recursion limit of {sys.getrecursionlimit()})") from None
    except MemoryError:
        raise SpecError(f"{source}: {what} too large to hold in memory") from None


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """Parse TOML text; ``source`` names it in error messages."""
    try:
        data: dict[str, Any] = _parse_guarded(tomllib.loads, text, source, "TOML")
        return data
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source}: malformed TOML: {clip(str(exc), 200)}") from None
    except ValueError as exc:  # an integer beyond Python's int-string conversion limit
        raise SpecError(f"{source}: malformed TOML: {_int_limit(exc)}") from None


def _int_limit(exc: ValueError) -> str:
    text = str(exc)
    if "integer string conversion" in text:
        return f"an integer of more than {sys.get_int_max_str_digits()} digits"
    return clip(text, 200)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str, source: str) -> Any:
    """Parse JSON text (strictly: no ``NaN`` or ``Infinity``, no key twice in one object);
    ``source`` names it in messages."""
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise SpecError(f"{source}: the key {shown(key)} is given twice in one object ({shown(out[key])} "
                                f"and {shown(value)}); keep one")
            out[key] = value
        return out

    try:
        return _parse_guarded(lambda t: json.loads(t, parse_constant=_no_constant, object_pairs_hook=unique), text,
                              source, "JSON")
    except json.JSONDecodeError as exc:
        raise SpecError(f"{source}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except ValueError as exc:
        raise SpecError(f"{source}: malformed JSON: {_int_limit(exc)}") from None


def read_json(path: str | Path, label: str | None = None) -> Any:
    """Parse a JSON file (:func:`read_text`, :func:`parse_json`)."""
    return parse_json(read_text(path, label), label or str(path))


class Table:
    """A view on one table of user input that checks every key it hands out.

    ``where`` names the table in messages (``"h100.toml [node]"``). Call :meth:`done` after the
    last :meth:`get` so that keys nobody asked for are reported as unknown.
    """

    def __init__(self, data: Any, where: str):
        if not isinstance(data, dict):
            raise SpecError(f"{where}: expected a table, got {type(data).__name__} {shown(data)}")
        self.data = data
        self.where = where
        self._seen: set[str] = set()

    def has(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = _MISSING, *,
            min_value: float | None = None, positive: bool = False,
            choices: tuple[Any, ...] | None = None, max_value: float | None = None) -> Any:
        """The value of ``key``, checked for type, range and membership."""
        self._seen.add(key)
        if key not in self.data:
            if default is _MISSING:
                raise SpecError(f"{self.where}: missing key {key!r}")
            return default
        value = self.data[key]
        return check_value(f"{self.where}: {key}", value, kind, min_value=min_value,
                           positive=positive, choices=choices, max_value=max_value)

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
            raise SpecError(f"{self.where}: unknown key {shown(key)}{hint} (valid keys: {known})")


def check_value(name: str, value: Any, kind: type | tuple[type, ...], *,
                min_value: float | None = None, positive: bool = False,
                choices: tuple[Any, ...] | None = None, max_value: float | None = None) -> Any:
    """Check one value; ints are accepted where floats are asked for, bools never pass as ints.
    Every number must be finite, an integer at most :data:`MAX_INT` in size, and at most
    ``max_value`` where given."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if is_int and abs(value) > MAX_INT:
        raise SpecError(f"{name} = {shown(value)}: out of range (at most {MAX_INT:,} in size)")
    if not ok and float in kinds and is_int:
        value, ok = float(value), True
    if not ok:
        names = " or ".join(k.__name__ for k in kinds)
        raise SpecError(f"{name} = {shown(value)}: expected {names}")
    if isinstance(value, float) and value != value:
        raise SpecError(f"{name} = {value!r}: not a number")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value in (float("inf"), float("-inf")):
            raise SpecError(f"{name} = {value!r}: must be finite")
        if positive and value <= 0:
            raise SpecError(f"{name} = {value!r}: must be > 0")
        if min_value is not None and value < min_value:
            raise SpecError(f"{name} = {value!r}: must be >= {min_value}")
        if max_value is not None and value > max_value:
            raise SpecError(f"{name} = {value!r}: must be at most {max_value:g}")
    if choices is not None and value not in choices:
        close = difflib.get_close_matches(str(value)[:SHOWN_CHARS], [str(c) for c in choices], n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise SpecError(f"{name} = {shown(value)}: must be one of {', '.join(map(str, choices))}{hint}")
    return value
