"""Argument types of the command line: each turns one flag's text into a value or says, in one
line, what it expected."""

from __future__ import annotations

import argparse


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"{value} must be >= {low}")
    return value


def positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def nonneg_int(text: str) -> int:
    return _int_at_least(text, 0)


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{value} must be in (0, 1]")
    return value


def costs(text: str) -> tuple[float, float, float]:
    try:
        parts = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid costs {text!r}: expected F,I,W, e.g. 1,1,1") from None
    if len(parts) != 3 or any(not (p >= 0) or p == float("inf") for p in parts):
        raise argparse.ArgumentTypeError(f"invalid costs {text!r}: expected three numbers >= 0, F,I,W")
    return parts[0], parts[1], parts[2]


def nonneg_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if not (0 <= value < float("inf")):
        raise argparse.ArgumentTypeError(f"{value} must be a finite number >= 0")
    return value


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid list {text!r}: expected integers like 1,2,4") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"invalid list {text!r}: expected integers >= 0")
    return values


def str_list(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())
