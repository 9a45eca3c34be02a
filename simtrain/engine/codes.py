"""Codes of a column's values: each distinct value numbered in order of first use, in one pass.

The engine turns an op table's names and communication kinds into integer codes (the timeline's
name column, the prices' grouping); a table of an unfolded run holds millions of them.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

import numpy as np

H = TypeVar("H", bound=Hashable)


class _Codes(dict[H, int]):
    """Value -> code, each new value numbered next as it is first looked up."""

    def __missing__(self, value: H) -> int:
        code = self[value] = len(self)
        return code


def first_use_codes(values: Iterable[H], count: int) -> tuple[np.ndarray, list[H]]:
    """``count`` values as int32 codes numbered in order of first use, and the distinct values in
    that order: one pass over them (a table's name or communication column holds millions)."""
    codes: _Codes[H] = _Codes()
    out = np.fromiter(map(codes.__getitem__, values), dtype=np.int32, count=count)
    return out, list(codes)


__all__ = ["first_use_codes"]
