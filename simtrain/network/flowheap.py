"""Sorting and the latency heap of the flow model's compiled loop (:mod:`simtrain.network.flowcore`).

A transfer whose last flow delivered its last byte waits out its latency in a binary heap ordered
by (completion time, transfer id); the loop moves those due to the completed rows (``ti``/``tf``,
rows and fields by :mod:`simtrain.network.flow_layout`). Compiled as the loop is
(:mod:`simtrain.network.flow_jit`); nothing here allocates.
"""

from __future__ import annotations

import numpy as np

from simtrain.network.flow_jit import compiled
from simtrain.network.flow_layout import H_ID, H_IX, H_T, N_DONE, N_HEAP, O_IX, O_T

__all__ = ["sort", "heap_push", "pop_done"]


@compiled
def sort(a: np.ndarray, n: int) -> None:
    """Heapsort ``a[:n]`` in place (ascending)."""
    for start in range(n // 2 - 1, -1, -1):
        sift(a, start, n)
    for end in range(n - 1, 0, -1):
        a[0], a[end] = a[end], a[0]
        sift(a, 0, end)


@compiled
def sift(a: np.ndarray, root: int, n: int) -> None:
    while True:
        child = 2 * root + 1
        if child >= n:
            return
        if child + 1 < n and a[child + 1] > a[child]:
            child += 1
        if a[root] >= a[child]:
            return
        a[root], a[child] = a[child], a[root]
        root = child


@compiled
def heap_push(ti: np.ndarray, tf: np.ndarray, ist: np.ndarray, t: float, tid: int, tix: int) -> None:
    """Queue transfer ``tid`` (index ``tix``) to complete at ``t``; the heap orders by (time, id)."""
    i = ist[N_HEAP]
    ist[N_HEAP] = i + 1
    while i > 0:
        parent = (i - 1) // 2
        pt, pid = tf[H_T, parent], ti[H_ID, parent]
        if pt < t or (pt == t and pid < tid):
            break
        tf[H_T, i], ti[H_ID, i], ti[H_IX, i] = pt, pid, ti[H_IX, parent]
        i = parent
    tf[H_T, i], ti[H_ID, i], ti[H_IX, i] = t, tid, tix


@compiled
def pop_done(ti: np.ndarray, tf: np.ndarray, ist: np.ndarray, t: float) -> None:
    """Move the transfers due by ``t`` from the heap to the done rows, in (time, id) order."""
    while ist[N_HEAP] > 0 and tf[H_T, 0] <= t:
        d = ist[N_DONE]
        ti[O_IX, d], tf[O_T, d] = ti[H_IX, 0], tf[H_T, 0]
        ist[N_DONE] = d + 1
        n = ist[N_HEAP] - 1
        ist[N_HEAP] = n
        lt, lid, lix = tf[H_T, n], ti[H_ID, n], ti[H_IX, n]
        i = 0
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            if child + 1 < n and (tf[H_T, child + 1] < tf[H_T, child] or (
                    tf[H_T, child + 1] == tf[H_T, child] and ti[H_ID, child + 1] < ti[H_ID, child])):
                child += 1
            ct, cid = tf[H_T, child], ti[H_ID, child]
            if lt < ct or (lt == ct and lid < cid):
                break
            tf[H_T, i], ti[H_ID, i], ti[H_IX, i] = ct, cid, ti[H_IX, child]
            i = child
        if n > 0:
            tf[H_T, i], ti[H_ID, i], ti[H_IX, i] = lt, lid, lix
