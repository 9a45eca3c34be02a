"""The compiled loop's op records, filled before it runs (compiled: one pass, no temporaries).

Called through :data:`simtrain.engine.loop_code.LOOP`'s machine code, as the loop is.
"""

from __future__ import annotations

import numpy as np

from simtrain.engine.compiled import kernel
from simtrain.engine.loop_layout import ARG, CLS, COMPUTE, DEP0, DEP1, NEED, WHEAD, WTAIL


@kernel
def fill(rec: np.ndarray, cost: np.ndarray, ops: np.ndarray, pos_of: np.ndarray, dep0: np.ndarray, dep1: np.ndarray,
         cls: np.ndarray, duration: np.ndarray, price: np.ndarray) -> None:
    """Each op's record by position (``ops`` gives its id): dependencies as positions (the codes
    below zero kept), class, no argument, no waiting streams, one member; its cost, a compute op's
    duration or a communication op's price (s)."""
    for j in range(ops.size):
        i = ops[j]
        a, b = dep0[i], dep1[i]
        rec[j, DEP0] = pos_of[a] if a >= 0 else a
        rec[j, DEP1] = pos_of[b] if b >= 0 else b
        rec[j, CLS] = cls[i]
        rec[j, ARG] = rec[j, WHEAD] = rec[j, WTAIL] = -1
        rec[j, NEED] = 1
        cost[j] = duration[i] if cls[i] == COMPUTE else price[i]
