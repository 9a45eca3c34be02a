"""The flow model's look-ahead, compiled: when the first transfer would complete if nothing started.

:meth:`simtrain.network.solver.FlowModel.next_event_s` asks it so the engine wakes only at a
completion, not at every internal event of the flows (a flow ending, a rate changing). It runs
the event loop of :mod:`simtrain.network.flowcore` on a copy of the state, with the same
floating-point operations, so the time it returns is the time the loop itself reaches. Argument
groups as in :mod:`simtrain.network.flowcore`; the ``d*`` arrays are the copy.
"""

from __future__ import annotations

import numpy as np

from simtrain.network.flow_layout import (
    H_ID, H_IX, H_T, LIVE, N_BUSY, N_DONE, N_HEAP, N_LIVE, NOW, OK, PIDX, RATE, REM, SIZE, T_ID, T_LAT, T_LEFT, TIX)
from simtrain.network.flowcore import compiled, first_end, pop_done, settle, step


@compiled
def next_done(sf: np.ndarray, si: np.ndarray, busy: np.ndarray, ti: np.ndarray, tf: np.ndarray, fs: np.ndarray,
              ist: np.ndarray, dsf: np.ndarray, dsi: np.ndarray, dact: np.ndarray, def_: np.ndarray, dbusy: np.ndarray,
              dchg: np.ndarray, key: np.ndarray, pu: np.ndarray, puo: np.ndarray, pin: np.ndarray, prate: np.ndarray,
              dti: np.ndarray, dtf: np.ndarray, mtab: np.ndarray, ment: np.ndarray, mkey: np.ndarray,
              mint: np.ndarray, mflt: np.ndarray, ht: np.ndarray, hmeta: np.ndarray, hlinks: np.ndarray,
              hrates: np.ndarray, dhst: np.ndarray, dfs: np.ndarray, dus: np.ndarray, dist: np.ndarray) -> float:
    """When the first transfer completes if nothing starts before (inf: never), found by running
    the loop on a copy of the state (the ``d*`` arrays: the flows, transfers and counts are
    copied, the link statistics are scratch; ``dhst`` records nothing); -1 when a recomputation
    on the way is not in the memo. The state itself does not change; it must be settled (no
    paths started or ended since the last recomputation)."""
    for j in range(ist.size):
        dist[j] = ist[j]
    dist[N_DONE] = 0
    dfs[NOW] = fs[NOW]
    for i in range(ist[N_LIVE]):
        s = si[LIVE, i]
        dsi[LIVE, i] = s
        dsi[PIDX, s], dsi[TIX, s] = si[PIDX, s], si[TIX, s]
        dsf[REM, s], dsf[RATE, s], dsf[SIZE, s] = sf[REM, s], sf[RATE, s], sf[SIZE, s]
    for j in range(ti.shape[1]):
        dti[T_LEFT, j], dti[T_ID, j], dtf[T_LAT, j] = ti[T_LEFT, j], ti[T_ID, j], tf[T_LAT, j]
    for j in range(ist[N_HEAP]):
        dti[H_ID, j], dti[H_IX, j], dtf[H_T, j] = ti[H_ID, j], ti[H_IX, j], tf[H_T, j]
    for j in range(ist[N_BUSY]):
        dbusy[j] = busy[j]
    while True:
        status = settle(dsf, dsi, def_, dbusy, dchg, key, pin, prate, mtab, ment, mkey, mint, mflt, ht, hmeta,
                        hlinks, hrates, dhst, dfs, dist)
        if status != OK:
            return -1.0
        te = dfs[NOW] + first_end(dsf, dsi, dist)
        lt = dtf[H_T, 0] if dist[N_HEAP] > 0 else np.inf
        at = te if te <= lt else lt
        if at == np.inf:
            return np.inf
        step(at, te <= at, dsf, dsi, dact, def_, dbusy, dchg, pu, puo, dti, dtf, dfs, dus, dist)
        pop_done(dti, dtf, dist, at)
        if dist[N_DONE] > 0:
            return at
