"""Argument types of the command line: each turns one flag's text into a value or says, in one
line, what it expected. Ranges are the :class:`~simtrain.settings.Rule` objects of the settings
table, so a flag and a ``--config`` key are refused with the same words."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from simtrain.errors import SimtrainError
from simtrain.specs.strict import shown
from simtrain.settings import NON_NEGATIVE, NON_NEGATIVE_FINITE, POSITIVE, POSITIVE_FINITE, Rule, Setting


def _convert(text: str, kind: type) -> Any:
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid integer {shown(text)}") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid number {shown(text)}") from None
    return text


def value_type(kind: type, rule: Rule | None = None) -> Callable[[str], Any]:
    """An argument type: the text as ``kind`` (int, float or str), within ``rule``."""

    def parse(text: str) -> Any:
        value = _convert(text, kind)
        if rule is not None and not rule.test(value):
            raise argparse.ArgumentTypeError(f"{value} {rule.phrase}")
        return value

    return parse


def list_type(kind: type, rule: Rule | None = None) -> Callable[[str], tuple[Any, ...]]:
    """An argument type for comma-separated values, each as :func:`value_type` reads it."""
    item = value_type(kind, rule)

    def parse(text: str) -> tuple[Any, ...]:
        parts = [x.strip() for x in text.split(",") if x.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"invalid list {text!r}: expected values like a,b")
        try:
            return tuple(item(x) for x in parts)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"invalid list {text!r}: {exc}") from None

    return parse


def setting_type(setting: Setting) -> Callable[[str], Any] | None:
    """The argument type of a setting's flag (None: the text as it is); a count of tokens takes
    :func:`parse_count`'s suffixes."""
    kind = setting.flag_kind
    if setting.count:
        return count_type(setting.rule)
    return None if kind is str else value_type(kind, setting.rule)


#: Decimal multipliers of a count of tokens: thousand, million, billion, trillion.
COUNT_SUFFIXES = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
_COUNT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?([kmbt]?)$", re.IGNORECASE)
#: The most digits and the largest exponent a count's text may carry: beyond any count a
#: setting's range admits (a 64-bit integer has 19 digits).
_MAX_EXPONENT = 30


def parse_count(text: str) -> int:
    """A whole count, such as tokens, from digits with an optional exponent and a decimal suffix
    K, M, B, T (1T = 10**12): ``300B``, ``1.5e12``, ``1T``, ``2_000`` is not (no separators). A
    value that is not a whole number, or text that is not a count, is an error naming it.

    >>> parse_count("1T"), parse_count("1.5e12"), parse_count("300B"), parse_count("2.5K"), parse_count("-3")
    (1000000000000, 1500000000000, 300000000000, 2500, -3)
    """
    from fractions import Fraction

    text = str(text).strip()
    m = _COUNT.match(text)
    if m is None:
        raise argparse.ArgumentTypeError(f"invalid count {shown(text)}: expected a whole number, digits with an "
                                         f"optional exponent or suffix K, M, B, T (powers of 1000), e.g. 300B, "
                                         f"1.5e12, 1T")
    if len(m.group(1)) > _MAX_EXPONENT or (m.group(2) and abs(int(m.group(2)[1:])) > _MAX_EXPONENT):
        raise argparse.ArgumentTypeError(f"invalid count {shown(text)}: beyond 1e{_MAX_EXPONENT}, far more than any "
                                         f"count here takes")
    number = text[: len(text) - len(m.group(3))]
    value = Fraction(number) * COUNT_SUFFIXES[m.group(3).upper()]
    if value.denominator != 1:
        raise argparse.ArgumentTypeError(f"invalid count {shown(text)}: {float(value):g} is not a whole number")
    return int(value)


def count_type(rule: Rule | None = None) -> Callable[[str], int]:
    """An argument type: :func:`parse_count` of the text, within ``rule``."""

    def parse(text: str) -> int:
        value = parse_count(text)
        if rule is not None and not rule.test(value):
            raise argparse.ArgumentTypeError(f"{text.strip()} {rule.phrase}")
        return value

    return parse


positive_int = value_type(int, POSITIVE)
nonneg_int = value_type(int, NON_NEGATIVE)
nonneg_float = value_type(float, NON_NEGATIVE_FINITE)
positive_float = value_type(float, POSITIVE_FINITE)


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An argument type: an integer from ``low`` to ``high``."""
    return value_type(int, Rule(lambda v: low <= v <= high, f"must be from {low} to {high:,}"))


#: The most worker processes a search starts (``--jobs``): far beyond the cores of one machine
#: (the largest x86 servers have a few hundred), so a larger number is a typo.
MAX_JOBS = 4096
jobs_int = int_in(1, MAX_JOBS)


def costs(text: str) -> tuple[float, float, float]:
    """``F,I,W``: three finite numbers >= 0, the costs of ``simtrain schedule``'s actions."""
    try:
        parts = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid costs {text!r}: expected F,I,W, e.g. 1,1,1") from None
    if len(parts) != 3 or any(not (p >= 0) or p == float("inf") for p in parts):
        raise argparse.ArgumentTypeError(f"invalid costs {text!r}: expected three numbers >= 0, F,I,W")
    return parts[0], parts[1], parts[2]


def check_suffix(path: str, suffixes: tuple[str, ...], flag: str) -> None:
    """Refuse an output file whose name does not end in one of ``suffixes``."""
    if not path.lower().endswith(suffixes):
        raise SimtrainError(f"{flag} {path}: the file name must end in {' or '.join(suffixes)}")


def _probe_write(folder: Path, flag: str, path: str) -> None:
    """Create and remove a temporary file in ``folder``: the one test of writability that holds
    for root, read-only mounts and special file systems alike (``access(2)`` answers for
    permissions only)."""
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(prefix=".simtrain-probe.", dir=folder)
    except OSError as exc:
        raise SimtrainError(f"{flag} {path}: cannot write into {folder} ({exc.strerror or exc})") from None
    os.close(fd)
    try:
        os.unlink(tmp)
    except OSError:  # pragma: no cover - removed by someone else meanwhile
        pass


#: Bytes a temporary file beside an output adds to its name (``.NAME.XXXXXXXX.tmp``,
#: :func:`simtrain.outputs.files.atomic_open`), with room to spare.
_TEMP_NAME_BYTES = 32


def _check_names(path: Path, flag: str) -> None:
    """Refuse a path with a name longer than the file system takes (``NAME_MAX``, 255 bytes on
    Linux, less what a temporary beside it adds) or longer than ``PATH_MAX`` (4,096 bytes)."""
    limit = 255
    try:
        limit = os.pathconf(_existing_ancestor(path), "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        pass
    if len(os.fsencode(str(path))) >= 4096:
        raise SimtrainError(f"{flag} {path}: the path is longer than 4,096 bytes")
    for part in path.parts:
        if len(os.fsencode(part)) > limit - _TEMP_NAME_BYTES:
            raise SimtrainError(f"{flag} {path}: the name {part} is longer than the {limit - _TEMP_NAME_BYTES} "
                                f"bytes an output name can have here")


def _existing_ancestor(path: Path) -> Path:
    """The deepest of ``path`` and its parents that exists (the current folder at worst)."""
    for candidate in (path, *path.parents):
        try:
            os.lstat(candidate)
            return candidate
        except OSError:
            continue
    return Path(".")


def check_output_folder(path: str, flag: str = "--out") -> None:
    """Refuse, before any work, an output folder that is not a folder or cannot be created or
    written (a file, a special file, a read-only or special file system, a file among its
    parents); creates nothing."""
    if not str(path).strip():
        raise SimtrainError(f"{flag} {path!r}: empty; give a folder (. for the current one)")
    target = Path(path)
    _check_names(target, flag)
    base = _existing_ancestor(target)
    if not base.is_dir():
        what = "is not a folder" if base == target else f"cannot be created: {base} is not a folder"
        raise SimtrainError(f"{flag} {path}: {what}")
    _probe_write(base, flag, path)


def check_output_file(path: str, suffixes: tuple[str, ...], flag: str) -> None:
    """Refuse, before any work, an output file with the wrong suffix (:func:`check_suffix`), whose
    folder does not exist or cannot be written, or which is itself a folder or a special file."""
    if not str(path).strip():
        raise SimtrainError(f"{flag} {path!r}: empty; give a file name")
    check_suffix(path, suffixes, flag)
    target = Path(path)
    _check_names(target, flag)
    folder = target.parent if str(target.parent) else Path(".")
    if os.path.isdir(target):
        ending = f" ending in {' or '.join(suffixes)}" if any(suffixes) else ""
        raise SimtrainError(f"{flag} {path}: is a folder; give a file name{ending}")
    if os.path.lexists(target) and not target.is_file():
        raise SimtrainError(f"{flag} {path}: is not a regular file")
    if not folder.is_dir():
        why = "does not exist" if not os.path.lexists(folder) else "is not a folder"
        raise SimtrainError(f"{flag} {path}: the folder {folder} {why}; create it first")
    _probe_write(folder, flag, path)


def _same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether ``a`` and ``b`` both exist and are one file (a link, another spelling)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # either missing, unreadable, or a name the OS refuses
        return False


def check_inputs_kept(outputs: Iterable[tuple[str, str | os.PathLike]],
                      inputs: Iterable[tuple[str, str | os.PathLike]]) -> None:
    """Refuse, before any work, an output that would replace an input file: ``outputs`` are
    (what writes it, path), ``inputs`` (the flag that read it, path)."""
    inputs = list(inputs)
    for writer, path in outputs:
        for flag, source in inputs:
            if _same_file(path, source):
                raise SimtrainError(f"{writer} would replace {path}, the input of {flag} {source}; write the "
                                    f"outputs elsewhere or move the input first")
