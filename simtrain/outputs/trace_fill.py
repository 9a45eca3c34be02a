"""The trace's complete events written as bytes by compiled code (numba; called through its saved
machine code, :data:`simtrain.outputs.trace_bytes.FILL`).

An event is the texts of its columns, each a piece of a pool of distinct texts, then its start
time spelt from whole nanoseconds, then ``}`` and a comma: no Python string per event.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: ASCII codes the events are made of
ZERO, POINT, CLOSE, COMMA = 48, 46, 125, 44


@njit(cache=True)
def fill(out: np.ndarray, pool: np.ndarray, starts: np.ndarray, ids: np.ndarray, ts_ns: np.ndarray,
         last: bool) -> int:
    """Write event ``i`` of ``ids`` (``ids[j, i]``: the pool's piece of column ``j``; piece ``p``
    is ``pool[starts[p]:starts[p + 1]]``) into ``out``, each followed by its start time
    ``ts_ns[i] / 1000`` as ``float.__repr__`` spells it (the integer part, a point, the fraction's
    one to three digits without trailing zeros; ``ts_ns`` is non-negative) and ``},``; where
    ``last``, the last event ends in ``}`` alone. Returns the bytes written."""
    m, n = ids.shape
    k = 0
    for i in range(n):
        for j in range(m):
            p = ids[j, i]
            for q in range(starts[p], starts[p + 1]):
                out[k] = pool[q]
                k += 1
        whole, frac = ts_ns[i] // 1000, ts_ns[i] % 1000
        digits, rest = 1, whole
        while rest >= 10:
            rest //= 10
            digits += 1
        for d in range(digits - 1, -1, -1):
            out[k + d] = ZERO + whole % 10
            whole //= 10
        k += digits
        out[k] = POINT
        out[k + 1] = ZERO + frac // 100
        places = 1
        if frac % 100 != 0:
            out[k + 2] = ZERO + frac // 10 % 10
            places = 2
            if frac % 10 != 0:
                out[k + 3] = ZERO + frac % 10
                places = 3
        k += 1 + places
        out[k] = CLOSE
        k += 1
        if not (last and i == n - 1):
            out[k] = COMMA
            k += 1
    return k
