"""Argument types of the command line: each turns one flag's text into a value or says, in one
line, what it expected. Ranges are the :class:`~simtrain.settings.Rule` objects of the settings
table, so a flag and a ``--config`` key are refused with the same words."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from simtrain.errors import SimtrainError
from simtrain.settings import NON_NEGATIVE, NON_NEGATIVE_FINITE, POSITIVE, Rule, Setting


def _convert(text: str, kind: type) -> Any:
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
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
    """The argument type of a setting's flag (None: the text as it is)."""
    kind = setting.flag_kind
    return None if kind is str else value_type(kind, setting.rule)


positive_int = value_type(int, POSITIVE)
nonneg_int = value_type(int, NON_NEGATIVE)
nonneg_float = value_type(float, NON_NEGATIVE_FINITE)


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
