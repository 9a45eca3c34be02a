"""The flow model's look-ahead, compiled: what its state held before it ran ahead, kept and put back.

:meth:`simtrain.network.solver.FlowModel.next_event_s` runs the event loop of
:mod:`simtrain.network.flowcore` ahead, on the state itself, to the first transfer completion, so
the engine wakes only there, not at every internal event of the flows (a flow ending, a rate
changing). Most of the time the engine then advances to that very time and the work is done; where a
transfer starts before it, the state is put back (:func:`restore`) as :func:`save` kept it and the
model runs to the new start instead. The loop only ever changes, while no flow starts: the live
flows' slots and their transfers, the latency heap, the busy links (those of the live flows' paths)
and their statistics, the counts, the clock and the bytes delivered; the rate history only grows
past its counts. Those are what is kept; :func:`run_ahead` keeps them and runs ahead in one call.
Argument groups as in :mod:`simtrain.network.flowcore`; the ``k*`` arrays hold what is kept: ``ksf``
bytes left, rate and size and ``ksi`` the live slots, path, transfer and class
(:mod:`simtrain.network.flowclass`), by position among the live slots; ``kt`` the transfers' flows
left (by live position) and the heap's ids and indices, ``kh`` the heap's times; ``kbusy`` the busy
links and ``kef`` their rate, bytes, busy time and peak; ``kist``, ``khst`` the counts; ``kfs`` the
clock and the bytes delivered.
"""

from __future__ import annotations

import numpy as np

from simtrain.network.flow_jit import compiled
from simtrain.network.flow_layout import (
    BUSY_S, BYTES, C_RATE, C_REM, CLS, DELIVERED, H_ID, H_IX, H_T, LIVE, LRATE, MASK, N_BUSY, N_HEAP, N_LISTED, NOW, PEAK, PIDX,
    RATE, REM, SIZE, T_LEFT, TIX)
from simtrain.network.flowclass import compact, rebuild
from simtrain.network.flowcore import run_until

#: Rows of ``kef``, per link kept: the rows of ``ef`` the loop changes.
KEPT_ROWS = (LRATE, BYTES, BUSY_S, PEAK)


@compiled
def save(sf: np.ndarray, si: np.ndarray, act: np.ndarray, ef: np.ndarray, busy: np.ndarray, ti: np.ndarray, tf: np.ndarray,
         fs: np.ndarray, us: np.ndarray, ist: np.ndarray, hst: np.ndarray, ksf: np.ndarray, ksi: np.ndarray,
         kt: np.ndarray, kh: np.ndarray, kbusy: np.ndarray, kef: np.ndarray, kist: np.ndarray, khst: np.ndarray,
         kfs: np.ndarray) -> None:
    """Keep what the loop may change of a settled state while no flow starts. The links it may
    change are those of the live flows' paths, which are the busy links: every live flow has a
    rate once the rates are settled, and a link is busy while a flow crosses it. The live slots'
    row is compacted first; each flow's bytes left and rate are kept from its class."""
    compact(si, act, ist)
    for j in range(ist.size):
        kist[j] = ist[j]
    for j in range(hst.size):
        khst[j] = hst[j]
    kfs[0], kfs[1] = fs[NOW], us[DELIVERED]
    for i in range(ist[N_LISTED]):
        s = si[LIVE, i]
        c = si[CLS, s]
        ksi[0, i], ksi[1, i], ksi[2, i], ksi[3, i] = s, si[PIDX, s], si[TIX, s], c
        ksf[0, i], ksf[1, i], ksf[2, i] = sf[C_REM, c], sf[C_RATE, c], sf[SIZE, s]
        kt[0, i] = ti[T_LEFT, si[TIX, s]]
    for j in range(ist[N_HEAP]):
        kt[1, j], kt[2, j], kh[j] = ti[H_ID, j], ti[H_IX, j], tf[H_T, j]
    for j in range(ist[N_BUSY]):
        u = busy[j]
        kbusy[j] = u
        for r in range(4):
            kef[r, j] = ef[KEPT_ROWS[r], u]


@compiled
def restore(sf: np.ndarray, si: np.ndarray, act: np.ndarray, ef: np.ndarray, busy: np.ndarray, phead: np.ndarray,
            ti: np.ndarray, tf: np.ndarray, fs: np.ndarray, us: np.ndarray, ist: np.ndarray, hst: np.ndarray,
            ksf: np.ndarray, ksi: np.ndarray, kt: np.ndarray, kh: np.ndarray, kbusy: np.ndarray, kef: np.ndarray,
            kist: np.ndarray, khst: np.ndarray, kfs: np.ndarray) -> None:
    """Put back what :func:`save` kept: the state as it was then, its classes and paths' lists
    rebuilt (a rate history recorded since is dropped with its counts; the memo's table size,
    ``ist[MASK]``, is the memo's own)."""
    for j in range(ist.size):
        if j != MASK:
            ist[j] = kist[j]
    for j in range(hst.size):
        hst[j] = khst[j]
    fs[NOW], us[DELIVERED] = kfs[0], kfs[1]
    for i in range(ist[N_LISTED]):
        s = ksi[0, i]
        si[LIVE, i], si[PIDX, s], si[TIX, s], si[CLS, s] = s, ksi[1, i], ksi[2, i], ksi[3, i]
        sf[REM, s], sf[RATE, s], sf[SIZE, s] = ksf[0, i], ksf[1, i], ksf[2, i]
        act[s] = True
        ti[T_LEFT, ksi[2, i]] = kt[0, i]
    for j in range(ist[N_HEAP]):
        ti[H_ID, j], ti[H_IX, j], tf[H_T, j] = kt[1, j], kt[2, j], kh[j]
    for j in range(ist[N_BUSY]):
        u = kbusy[j]
        busy[j] = u
        for r in range(4):
            ef[KEPT_ROWS[r], u] = kef[r, j]
    rebuild(sf, si, phead, ist)


@compiled
def run_ahead(sf: np.ndarray, si: np.ndarray, act: np.ndarray, ef: np.ndarray, busy: np.ndarray, chg: np.ndarray,
              key: np.ndarray, pu: np.ndarray, puo: np.ndarray, phead: np.ndarray, ti: np.ndarray, tf: np.ndarray,
              mtab: np.ndarray, ment: np.ndarray, mkey: np.ndarray, mint: np.ndarray, mflt: np.ndarray,
              ht: np.ndarray, hmeta: np.ndarray, hlinks: np.ndarray, hrates: np.ndarray, hst: np.ndarray,
              fs: np.ndarray, us: np.ndarray, ist: np.ndarray, ksf: np.ndarray, ksi: np.ndarray, kt: np.ndarray,
              kh: np.ndarray, kbusy: np.ndarray, kef: np.ndarray, kist: np.ndarray, khst: np.ndarray,
              kfs: np.ndarray) -> int:
    """:func:`save`, then the loop (:func:`~simtrain.network.flowcore.run_until`) to the first
    event that completes a transfer: one call where the model looks ahead. Its status as the
    loop's."""
    save(sf, si, act, ef, busy, ti, tf, fs, us, ist, hst, ksf, ksi, kt, kh, kbusy, kef, kist, khst, kfs)
    return run_until(np.inf, True, sf, si, act, ef, busy, chg, key, pu, puo, phead, ti, tf, mtab, ment, mkey, mint,
                     mflt, ht, hmeta, hlinks, hrates, hst, fs, us, ist)
