"""Classes of alike flows, compiled: flows with the same size, bytes left and rate move as one.

Two flows whose size, bytes left and rate are the same numbers stay the same under every operation
of the flow model's loop (:mod:`simtrain.network.flowcore`) until a recomputation gives them
different rates: the loop moves them by the same product, finds the same finish time and ends
them at the same event. The loop therefore keeps those numbers once per *class* of such flows
and does its per-event work (the first finish, the move, the end test) once per class; only a
recomputation touches flows one by one, and only those on the paths it prices, through each
path's list of flows. A flow whose rate changes leaves its class for one split off the class with
that rate in the same recomputation (or takes the new rate with the class where it was alone).
Flows started together with one size start in one class. Classes need not be as large as they
could be (a class split never merges back): each holds flows whose numbers are equal, so running
it once is running each of them, the same floating-point operations in the same order. A flow's
own bytes left and rate (rows ``REM`` and ``RATE`` of ``sf``) are written from its class only when
asked (:func:`sync`, which Python's readers call); its class's are the true ones. Nor does the loop
drop an ended flow from the live slots' row: the next compaction does (:func:`compact`).

Arrays as in :mod:`simtrain.network.flowcore` (rows and fields by
:mod:`simtrain.network.flow_layout`); ``phead[p]`` is one more than the first flow slot on path
``p`` (0: none).
"""

from __future__ import annotations

import numpy as np

from simtrain.network.flow_layout import (
    C_COUNT, C_FREE, C_GEN, C_HEAD, C_HW, C_LIST, C_NEXT, C_POS, C_PREV, C_RATE, C_REM, C_SIZE, C_TGT, C_TNEXT, CLS,
    GROUP, LIVE, N_CFREE, N_CLS, N_LISTED, P_NEXT, P_PREV, PIDX, RATE, REM, SIZE)
from simtrain.network.flow_jit import compiled

#: How many classes a flow looks through for one it may join (started together; split off its
#: class in the same recomputation): past them it starts a class of its own, which is as right.
SEARCH = 8


@compiled
def new_class(sf: np.ndarray, si: np.ndarray, ist: np.ndarray, size: float, rem: float, rate: float) -> int:
    """A class with no flows yet, of these numbers, among the live classes."""
    nf = ist[N_CFREE]
    if nf > 0:
        c = si[C_FREE, nf - 1]
        ist[N_CFREE] = nf - 1
    else:
        c = ist[C_HW]
        ist[C_HW] = c + 1
    sf[C_SIZE, c], sf[C_REM, c], sf[C_RATE, c] = size, rem, rate
    si[C_HEAD, c], si[C_COUNT, c], si[C_GEN, c] = -1, 0, -1
    n = ist[N_CLS]
    si[C_LIST, n], si[C_POS, c] = c, n
    ist[N_CLS] = n + 1
    return int(c)


@compiled
def join(s: int, c: int, si: np.ndarray) -> None:
    """Flow slot ``s`` into class ``c``."""
    h = si[C_HEAD, c]
    si[CLS, s], si[C_PREV, s], si[C_NEXT, s] = c, -1, h
    if h >= 0:
        si[C_PREV, h] = s
    si[C_HEAD, c] = s
    si[C_COUNT, c] += 1


@compiled
def leave(s: int, si: np.ndarray, ist: np.ndarray) -> None:
    """Flow slot ``s`` out of its class; a class left without flows is freed."""
    c = si[CLS, s]
    prev, nxt = si[C_PREV, s], si[C_NEXT, s]
    if prev >= 0:
        si[C_NEXT, prev] = nxt
    else:
        si[C_HEAD, c] = nxt
    if nxt >= 0:
        si[C_PREV, nxt] = prev
    si[CLS, s] = -1
    si[C_COUNT, c] -= 1
    if si[C_COUNT, c] == 0:
        pos, n = si[C_POS, c], ist[N_CLS] - 1
        last = si[C_LIST, n]
        si[C_LIST, pos], si[C_POS, last] = last, pos
        ist[N_CLS] = n
        si[C_FREE, ist[N_CFREE]] = c
        ist[N_CFREE] += 1


@compiled
def path_add(s: int, p: int, si: np.ndarray, phead: np.ndarray) -> None:
    """Flow slot ``s`` onto path ``p``'s list."""
    h = phead[p] - 1
    si[P_PREV, s], si[P_NEXT, s] = -1, h
    if h >= 0:
        si[P_PREV, h] = s
    phead[p] = s + 1


@compiled
def path_remove(s: int, p: int, si: np.ndarray, phead: np.ndarray) -> None:
    """Flow slot ``s`` off path ``p``'s list."""
    prev, nxt = si[P_PREV, s], si[P_NEXT, s]
    if prev >= 0:
        si[P_NEXT, prev] = nxt
    else:
        phead[p] = nxt + 1
    if nxt >= 0:
        si[P_PREV, nxt] = prev


@compiled
def place_in_class(s: int, sf: np.ndarray, si: np.ndarray, ist: np.ndarray) -> None:
    """Just-started flow ``s`` (bytes left its size, rate 0) into a class: one of the last live
    classes with the same numbers (flows started together), else a new one."""
    size = sf[SIZE, s]
    n = ist[N_CLS]
    if ist[GROUP] == 1:
        for i in range(n - 1, max(n - SEARCH, 0) - 1, -1):
            c = si[C_LIST, i]
            if sf[C_RATE, c] == 0.0 and sf[C_REM, c] == size and sf[C_SIZE, c] == size:
                join(s, c, si)
                return
    join(s, new_class(sf, si, ist, size, size, 0.0), si)


@compiled
def reprice(s: int, r: float, gen: int, sf: np.ndarray, si: np.ndarray, ist: np.ndarray) -> None:
    """Give flow slot ``s``, whose class has another rate, the rate ``r`` (B/s) in recomputation
    ``gen``: it moves to the class split off its class at ``r`` in this recomputation (a new one
    if none), or takes ``r`` with its class where it is the class's only flow."""
    c = si[CLS, s]
    t = si[C_TGT, c] if si[C_GEN, c] == gen else -1
    looked = 0
    while t >= 0 and sf[C_RATE, t] != r and looked < SEARCH:
        t = si[C_TNEXT, t]
        looked += 1
    if t >= 0 and sf[C_RATE, t] != r:
        t = -1
    if t < 0 and si[C_COUNT, c] == 1:
        sf[C_RATE, c] = r
        return
    if t < 0:
        t = new_class(sf, si, ist, sf[C_SIZE, c], sf[C_REM, c], r)
        if si[C_GEN, c] != gen:
            si[C_GEN, c], si[C_TGT, c] = gen, -1
        si[C_TNEXT, t], si[C_TGT, c] = si[C_TGT, c], t
    leave(s, si, ist)
    join(s, t, si)


@compiled
def compact(si: np.ndarray, act: np.ndarray, ist: np.ndarray) -> None:
    """Drop the flows ended since the last compaction from the live slots (kept in order)."""
    w = 0
    for i in range(ist[N_LISTED]):
        s = si[LIVE, i]
        if act[s]:
            si[LIVE, w] = s
            w += 1
    ist[N_LISTED] = w


@compiled
def sync(sf: np.ndarray, si: np.ndarray, act: np.ndarray, ist: np.ndarray) -> None:
    """The live slots compacted, and each live flow's own bytes left and rate written from its
    class (the loop keeps them only there)."""
    compact(si, act, ist)
    for i in range(ist[N_LISTED]):
        s = si[LIVE, i]
        c = si[CLS, s]
        sf[REM, s], sf[RATE, s] = sf[C_REM, c], sf[C_RATE, c]


@compiled
def rebuild(sf: np.ndarray, si: np.ndarray, phead: np.ndarray, ist: np.ndarray) -> None:
    """The classes and the paths' lists of the live flows, from each flow's class number (row
    ``CLS``) and its own bytes left, rate and size: the class numbers handed out stay so, those no
    flow holds are free, and no class is marked as split by a recomputation (so that the number
    of the last one, ``ist[GEN]``, may be put back too)."""
    hw = ist[C_HW]
    for c in range(hw):
        si[C_COUNT, c], si[C_GEN, c] = 0, -1
    ist[N_CLS] = 0
    n = ist[N_LISTED]
    for i in range(n):
        phead[si[PIDX, si[LIVE, i]]] = 0
    for i in range(n):
        s = si[LIVE, i]
        path_add(s, si[PIDX, s], si, phead)
        c = si[CLS, s]
        if si[C_COUNT, c] == 0:
            sf[C_SIZE, c], sf[C_REM, c], sf[C_RATE, c] = sf[SIZE, s], sf[REM, s], sf[RATE, s]
            si[C_HEAD, c] = -1
            k = ist[N_CLS]
            si[C_LIST, k], si[C_POS, c] = c, k
            ist[N_CLS] = k + 1
        join(s, c, si)
    nf = 0
    for c in range(hw):
        if si[C_COUNT, c] == 0:
            si[C_FREE, nf] = c
            nf += 1
    ist[N_CFREE] = nf


@compiled
def drop(slots: np.ndarray, si: np.ndarray, phead: np.ndarray, ist: np.ndarray) -> None:
    """Flow slots ``slots`` (live) out of their classes and off their paths' lists."""
    for i in range(slots.size):
        s = slots[i]
        path_remove(s, si[PIDX, s], si, phead)
        leave(s, si, ist)
