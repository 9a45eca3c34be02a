"""JSON text of trace values, each distinct value (or run of equal ones) formatted once: the
spellings of ``json.dumps`` (``float.__repr__`` for floats, ``str`` for ints, ASCII-escaped
strings), gathered by numpy rather than formatted value by value (:mod:`simtrain.outputs.trace`,
:mod:`simtrain.outputs.counters`)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

_f = float.__repr__
_text = json.encoder.encode_basestring_ascii
_S = '{"cat":"pp","id":%d,"name":"pp","ph":"s","pid":%d,"tid":%d,"ts":%s}'
_F = '{"bp":"e","cat":"pp","id":%d,"name":"pp","ph":"f","pid":%d,"tid":%d,"ts":%s}'
_INF = float("inf")


#: A column of texts as a table of distinct texts and each row's place in it (``table[index]``).
Texts = tuple[np.ndarray, np.ndarray]


def _each(values: np.ndarray, fmt) -> list[str]:
    """``fmt`` of every value (:func:`_each_texts`), as a list."""
    return _gathered(_each_texts(values, fmt))


def _each_texts(values: np.ndarray, fmt) -> Texts:
    """``fmt`` of every value, computed once per distinct value (by bit pattern, so that -0.0 and
    0.0 stay apart). A column of few distinct values (judged on an evenly spaced sample) finds them
    by hashing and each value's place by binary search, which beats sorting the whole column;
    otherwise the column is sorted. Both give the same texts."""
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.int64)
    if len(np.unique(bits[::max(1, len(bits) // 512)])) <= 64:
        uniq = np.unique(bits)
        inverse = np.searchsorted(uniq, bits)
    else:
        uniq, inverse = np.unique(bits, return_inverse=True)
    return _table([fmt(v) for v in uniq.view(np.float64).tolist()], inverse)


def _each_run(values: np.ndarray) -> list[str]:
    """``float.__repr__`` of every value (:func:`_each_run_texts`), as a list."""
    return _gathered(_each_run_texts(values))


def _each_run_texts(values: np.ndarray) -> Texts:
    """``float.__repr__`` of every value, computed once per run of equal neighbours (spans come in
    start-time order, so equal start times are neighbours; any order gives the same texts)."""
    if not len(values):
        return _table([], np.zeros(0, dtype=np.int64))
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.int64)
    starts = np.ones(len(bits), dtype=bool)
    starts[1:] = bits[1:] != bits[:-1]
    return _table(list(map(_f, values[starts].tolist())), np.cumsum(starts) - 1)


#: Integer parts beyond this (microseconds: 11.6 days) are spelt by ``float.__repr__`` itself.
_NS_TEXT_MAX_US = 10**12
#: Integers below this in magnitude are doubles exactly (2**53); larger ones would be rounded before
#: numpy divides them.
_EXACT_INT = 2**53


def _ns_texts(ns: np.ndarray) -> Texts:
    """``float.__repr__`` of every ``ns / 1000`` (integer nanoseconds as microseconds), spelt by
    numpy: the integer part, a point, the 1-3 digits of the fraction without trailing zeros. That
    is the shortest text naming the double nearest ``ns / 1000``, so ``float.__repr__`` spells it
    so too, while two texts of whole nanoseconds lie more than a double's spacing apart, which
    holds below 10**12 us; a larger value (or any negative) goes to ``float.__repr__``."""
    v = np.ascontiguousarray(ns, dtype=np.int64)
    if not len(v):
        return _table([], np.zeros(0, dtype=np.int64))
    whole, frac = np.divmod(v, 1000)
    top = int(whole.max())
    if int(v.min()) < 0 or top >= _NS_TEXT_MAX_US:
        if max(-int(v.min()), int(v.max())) < _EXACT_INT:
            return _each_run_texts(v / 1000)  # each a double as it is: the quotient correctly rounded
        return _each_run_texts(np.array([x / 1000 for x in v.tolist()]))  # Python's exact quotient
    n_int = len(str(top))
    fixed = np.empty((len(v), n_int + 4), dtype=np.uint8)  # right-aligned "000123.456"
    rest = whole.copy()
    for k in range(n_int - 1, -1, -1):
        rest, digit = np.divmod(rest, 10)
        fixed[:, k] = digit + 48
    fixed[:, n_int] = ord(".")
    fixed[:, n_int + 1] = frac // 100 + 48
    fixed[:, n_int + 2] = frac // 10 % 10 + 48
    fixed[:, n_int + 3] = frac % 10 + 48
    digits = np.ones(len(v), dtype=np.int64)  # of the integer part
    for k in range(1, n_int):
        digits += whole >= 10**k
    places = 3 - (frac % 10 == 0) - (frac % 100 == 0)  # 1-3: "1.0", "1.5", "1.25", "1.125"
    cols = np.arange(n_int + 4)
    out = np.take_along_axis(fixed, np.minimum(cols + (n_int - digits)[:, None], n_int + 3), axis=1)
    out[cols >= (digits + 1 + places)[:, None]] = 0  # numpy's bytes drop trailing NULs
    texts = out.view(f"S{n_int + 4}").ravel().astype(f"U{n_int + 4}")
    return texts, np.arange(len(v))


def _table(texts: list[str], index: np.ndarray) -> Texts:
    """``texts`` as an object array (gathered by numpy rather than in Python), with ``index``."""
    table = np.empty(len(texts), dtype=object)
    table[:] = texts
    return table, index.ravel()


def _gathered(texts: Texts, start: int = 0, stop: int | None = None) -> list[str]:
    """The texts of rows ``start`` to ``stop`` of a column."""
    table, index = texts
    return table[index[start:stop]].tolist()


def _each_int(values: np.ndarray, fmt) -> list[str]:
    """``fmt`` of every (integer) value (:func:`_each_int_texts`), as a list."""
    return _gathered(_each_int_texts(values, fmt))


def _each_int_texts(values: np.ndarray, fmt) -> Texts:
    """``fmt`` of every (integer) value, computed once per distinct value: looked up in a table
    indexed by value when the values span a range not much longer than the array, else sorted."""
    v = values.astype(np.int64)
    lo, hi = int(v.min()), int(v.max())
    if hi - lo > 4 * len(v) + 4096:
        uniq, inverse = np.unique(v, return_inverse=True)
        return _table([fmt(k) for k in uniq.tolist()], inverse)
    present = np.zeros(hi - lo + 1, dtype=bool)
    present[v - lo] = True
    table = np.empty(hi - lo + 1, dtype=object)
    for k in np.flatnonzero(present).tolist():
        table[k] = fmt(k + lo)
    return table, v - lo


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))
