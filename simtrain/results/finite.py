"""Finite numbers in every result.

A report, a schedule's closed form or a collective's timing is written or printed only when every
number in it is finite: an input at the edge of float arithmetic (an efficiency of ``5e-324``, a
latency of ``1e308`` microseconds) makes a duration overflow to ``inf`` and a difference of two
infinities ``nan``, which JSON cannot hold (RFC 8259, section 6: "Numeric values that cannot be
represented ... such as Infinity and NaN are not permitted"). :func:`check_finite` walks a result
(dicts, lists, tuples, numbers, numpy arrays) and raises one :class:`SimulationError` naming the
first key whose value is not finite; :func:`check_timeline` does the same for a timeline's columns
and bounds its times by :data:`MAX_TIME_S`, so that the trace's microseconds stay finite too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from simtrain.errors import SimulationError

#: The latest time a span may end: 1e15 s (about 32 million years), orders of magnitude beyond any
#: step, and small enough that the trace's microseconds (x 1e6) and sums over ranks stay finite.
MAX_TIME_S = 1e15
#: What an error adds: the usual causes and what to change.
HINT = ("an input is beyond what float arithmetic holds (a tiny efficiency or speed factor, a huge "
        "latency, size or cost); use values in a realistic range")


def first_non_finite(value: Any, path: str = "") -> tuple[str, float] | None:
    """The path (``breakdown_s.tp``, ``peak_memory_gib[2]``) and value of the first number in
    ``value`` that is not finite, or None.

    >>> first_non_finite({"a": [1.0, float("inf")], "b": 2})
    ('a[1]', inf)
    >>> first_non_finite({"a": 1, "b": "nan"}) is None
    True
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return None
    if isinstance(value, (float, np.floating)):
        return None if math.isfinite(value) else (path or "value", float(value))
    if isinstance(value, np.ndarray):
        if value.dtype.kind != "f" or value.size == 0:
            return None
        bad = np.flatnonzero(~np.isfinite(value))
        if bad.size == 0:
            return None
        index = np.unravel_index(int(bad[0]), value.shape)
        return f"{path}[{', '.join(map(str, index))}]", float(value[index])
    if isinstance(value, Mapping):
        for key, item in value.items():
            found = first_non_finite(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)):
        if _finite_numbers(value):
            return None
        for i, item in enumerate(value):
            found = first_non_finite(item, f"{path}[{i}]")
            if found:
                return found
    return None


def _finite_numbers(items: list[Any] | tuple[Any, ...]) -> bool:
    """Whether ``items`` is a long sequence of numbers (or of equal-length sequences of them) that
    numpy finds all finite at once: a link's utilisation samples, tens of thousands of (time,
    value) pairs. False for anything else, or any value not finite: the walk then judges them
    (and names the first), so this only skips walks that would find nothing."""
    if len(items) < 64 or not isinstance(items[0], (float, tuple)):
        return False
    try:
        numbers = np.asarray(items, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return False
    return bool(np.isfinite(numbers).all())


def check_finite(value: Any, what: str) -> None:
    """Raise a :class:`SimulationError` naming ``what`` (``report``, ``schedule report``) and the
    first key of ``value`` that is not a finite number."""
    found = first_non_finite(value)
    if found:
        path, number = found
        raise SimulationError(f"{what}: {path} = {number!r} is not a finite number; {HINT}")


def check_timeline(timeline: Any, what: str = "timeline") -> None:
    """:func:`check_finite` on the float columns of a :class:`~simtrain.engine.timeline.Timeline`
    (start and end times, FLOPs, bytes), before anything is derived from them."""
    for name in ("start_s", "end_s", "flops", "nbytes", "alloc_bytes", "free_bytes"):
        column = timeline.cols.get(name) if hasattr(timeline, "cols") else None
        if column is None:
            continue
        found = first_non_finite(np.asarray(column), name)
        if found:
            raise SimulationError(f"{what}: a span's {name} = {found[1]!r} is not a finite number; {HINT}")
        if name.endswith("_s") and len(column) and float(np.max(np.abs(column))) > MAX_TIME_S:
            raise SimulationError(f"{what}: a span's {name} = {float(np.max(np.abs(column))):.3g} s is beyond "
                                  f"{MAX_TIME_S:g} s; {HINT}")
