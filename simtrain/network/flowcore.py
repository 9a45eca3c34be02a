"""The flow model's event loop, compiled: flows move, end and change rates between transfers.

:class:`~simtrain.network.solver.FlowModel` keeps its state in arrays (:class:`FlowArrays`) and
runs every internal event (a flow delivering its last byte, a transfer's latency running out)
here, in the order and with the floating-point operations of the model's definition (its module
docstring): settle the rates (:func:`settle`), find the first end, move every flow to it, end the
flows that are done, collect completed transfers. A rate recomputation is looked up in the memo
of recomputations (:mod:`simtrain.network.reshare_memo`) by (state, paths started, paths ended);
when it is not there the loop returns :data:`MISS` and the model computes it with numpy (progressive
filling, :mod:`simtrain.network.maxmin`), stores it and calls again. :data:`NEED_HISTORY` asks for
room in the rate history. Compiled by numba once per installation, without numba's runtime: the
loop allocates nothing.

Argument groups (each a numpy array, rows named by the constants below): ``sf`` per slot floats,
``si`` per slot ints, ``act`` the slots' active flags, ``ef`` per link floats, ``busy`` the links
with traffic, ``chg`` the paths started and ended since the last recomputation, ``key`` scratch
for a memo key, ``pu``/``puo`` each path's distinct links, ``pin``/``prate`` scratch by path,
``ti``/``tf`` per transfer (and the latency heap, and the completed transfers handed back),
``m*`` the memo, ``h*`` the rate history (``hst`` its counts), ``fs`` the clock, ``us`` the bytes
delivered, ``ist`` the other counts (:mod:`simtrain.network.flow_layout` names every row and field).
"""

from __future__ import annotations

import numpy as np

from simtrain.network.flow_jit import compiled
from simtrain.network.flow_layout import (
    BUSY_S, BYTES, C_FIN, C_HEAD, C_LIST, C_NEXT, C_RATE, C_REM, C_SIZE, CLS, DELIVERED, E_BUSY,
    E_KEY, E_LRATES, E_NBUSY, E_NE, E_NEXT, E_NODE, E_NRP, E_NS, E_NZEROED, E_NUSED, E_RATES, E_RP,
    E_ZEROED, E_USED, ENDED, ENDS, GEN, H_T, HIST_LIMIT, HITS, LIVE, LRATE, MASK, MISS, N_BUSY, N_CLS,
    N_DONE, N_ENDED, N_HEAP, N_HIST, N_HVALS, N_LISTED, N_LIVE, N_STARTED, NEED_HISTORY, NODE, NOW, OK, P_NEXT, PEAK, PIDX,
    RATE, RECOMPUTES, RECORD, REM, SIZE, STARTED, T_ID, T_LAT, T_LEFT, TIX)
from simtrain.network.flowheap import heap_push, pop_done, sort
from simtrain.network.flowclass import compact, leave, path_add, path_remove, place_in_class, reprice
from simtrain.network.maxmin import REL_TOL

__all__ = ["key_hash", "settle", "first_end", "heap_push", "pop_done", "step", "run_until",
           "place"]

_HASH_MUL = 1_000_003
_HASH_MASK = (1 << 62) - 1


@compiled
def key_hash(node: int, key: np.ndarray, ns: int, ne: int) -> int:
    """The memo's hash of (state, sorted started paths ``key[:ns]``, sorted ended ``key[ns:ns+ne]``)."""
    h = (node * _HASH_MUL + ns) & _HASH_MASK
    h = (h * _HASH_MUL + ne) & _HASH_MASK
    for i in range(ns + ne):
        h = (h * _HASH_MUL + key[i] + 1) & _HASH_MASK
    return int(h)


@compiled
def _lookup(mtab: np.ndarray, ment: np.ndarray, mkey: np.ndarray, node: int, key: np.ndarray,
            ns: int, ne: int, mask: int) -> int:
    """The memo entry of the key, or -1."""
    pos = key_hash(node, key, ns, ne) & mask
    while True:
        e = mtab[pos]
        if e < 0:
            return -1
        if ment[e, E_NODE] == node and ment[e, E_NS] == ns and ment[e, E_NE] == ne:
            off = ment[e, E_KEY]
            same = True
            for i in range(ns + ne):
                if mkey[off + i] != key[i]:
                    same = False
                    break
            if same:
                return int(e)
        pos = (pos + 1) & mask


@compiled
def settle(sf: np.ndarray, si: np.ndarray, ef: np.ndarray, busy: np.ndarray, chg: np.ndarray, key: np.ndarray,
           phead: np.ndarray, mtab: np.ndarray, ment: np.ndarray, mkey: np.ndarray, mint: np.ndarray,
           mflt: np.ndarray, ht: np.ndarray, hmeta: np.ndarray, hlinks: np.ndarray, hrates: np.ndarray,
           hst: np.ndarray, fs: np.ndarray, ist: np.ndarray) -> int:
    """Apply the recomputation the changes since the last one call for (nothing without changes):
    the rates of the flows it covers (through their classes, :func:`~simtrain.network.flowclass.reprice`),
    the links' summed rates and peaks, the busy links, the state; one history entry when
    recording. :data:`MISS` when the memo does not hold it."""
    ns, ne = ist[N_STARTED], ist[N_ENDED]
    if ns == 0 and ne == 0:
        return OK
    for i in range(ns):
        key[i] = chg[STARTED, i]
    for i in range(ne):
        key[ns + i] = chg[ENDED, i]
    sort(key, ns)
    sort(key[ns:], ne)
    e = _lookup(mtab, ment, mkey, ist[NODE], key, ns, ne, ist[MASK])
    if e < 0:
        return MISS
    changing = ment[e, E_NZEROED] + max(ment[e, E_NUSED], 0)  # links whose rates it may change
    record = hst[RECORD] == 1 and hst[HIST_LIMIT] > 0
    if record and (hst[N_HIST] >= ht.size or hst[N_HVALS] + changing > hlinks.size):
        return NEED_HISTORY
    ist[HITS] += 1
    ist[N_STARTED] = 0
    ist[N_ENDED] = 0
    ist[NODE] = ment[e, E_NEXT]
    ist[RECOMPUTES] += 1
    lrate = ef[LRATE]
    at, kept = hst[N_HVALS], 0  # (recording: each link whose rate changes, once: zeroed and priced are apart)
    off = ment[e, E_ZEROED]
    for j in range(ment[e, E_NZEROED]):
        z = mint[off + j]
        if record and lrate[z] != 0.0:
            hlinks[at + kept], hrates[at + kept] = z, 0.0
            kept += 1
        lrate[z] = 0.0
    off = ment[e, E_BUSY]
    nb = ment[e, E_NBUSY]
    for j in range(nb):
        busy[j] = mint[off + j]
    ist[N_BUSY] = nb
    nused = ment[e, E_NUSED]
    if nused >= 0:  # (the paths priced are those of every flow it covers)
        gen = ist[GEN] + 1
        ist[GEN] = gen
        roff, foff = ment[e, E_RP], ment[e, E_RATES]
        crate, cls, pnext = sf[C_RATE], si[CLS], si[P_NEXT]
        for j in range(ment[e, E_NRP]):
            r = mflt[foff + j]
            s = phead[mint[roff + j]] - 1
            while s >= 0:
                nxt = pnext[s]
                if crate[cls[s]] != r:
                    reprice(s, r, gen, sf, si, ist)
                s = nxt
        uoff, loff = ment[e, E_USED], ment[e, E_LRATES]
        for j in range(nused):
            u = mint[uoff + j]
            rate = mflt[loff + j]
            if record and lrate[u] != rate:
                hlinks[at + kept], hrates[at + kept] = u, rate
                kept += 1
            lrate[u] = rate
            ef[PEAK, u] = max(ef[PEAK, u], mflt[loff + nused + j])  # (its utilisation, stored after the rates)
    if kept > 0:
        n = hst[N_HIST]
        ht[n] = fs[NOW]
        hmeta[0, n] = at
        hmeta[1, n] = kept
        hst[N_HIST] = n + 1
        hst[N_HVALS] = at + kept
        hst[HIST_LIMIT] -= kept
    return OK


@compiled
def first_end(sf: np.ndarray, si: np.ndarray, ist: np.ndarray) -> float:
    """Seconds until the first flow delivers its last byte at current rates (inf: never); each
    live class's own (bytes left over rate, inf at rate 0) is left in ``sf[C_FIN]``, for :func:`step`."""
    best = np.inf
    fin, rem, rate, classes = sf[C_FIN], sf[C_REM], sf[C_RATE], si[C_LIST]
    for i in range(ist[N_CLS]):
        c = classes[i]
        r = rate[c]
        if r > 0:
            v = rem[c] / r
            fin[c] = v
            if v < best:
                best = v
        else:
            fin[c] = np.inf
    return best


@compiled
def _end_flows(k: int, sf: np.ndarray, si: np.ndarray, act: np.ndarray, ef: np.ndarray, chg: np.ndarray,
               pu: np.ndarray, puo: np.ndarray, phead: np.ndarray, ti: np.ndarray, tf: np.ndarray, fs: np.ndarray,
               us: np.ndarray, ist: np.ndarray) -> None:
    """End the ``k`` flows in ``si[ENDS]`` (ascending): their bytes left (within the done
    tolerance) booked on their links, their sizes delivered, their slots freed (left in the live
    slots' row until :func:`~simtrain.network.flowclass.compact`); a transfer whose last flow this
    was waits out its latency."""
    ends = si[ENDS]
    for i in range(k):
        s = ends[i]
        left = sf[C_REM, si[CLS, s]]
        if left > 0:
            p = si[PIDX, s]
            for j in range(puo[p], puo[p + 1]):
                ef[BYTES, pu[j]] += left
    for i in range(k):
        us[DELIVERED] += sf[SIZE, ends[i]]
    ne = ist[N_ENDED]
    for i in range(k):
        s = ends[i]
        act[s] = False
        sf[REM, s] = 0.0
        sf[RATE, s] = 0.0
        p = si[PIDX, s]
        chg[ENDED, ne + i] = p
        path_remove(s, p, si, phead)
        leave(s, si, ist)
        si[PIDX, s] = -1
    ist[N_ENDED] = ne + k
    ist[N_LIVE] -= k
    now = fs[NOW]
    for i in range(k):
        tix = si[TIX, ends[i]]
        ti[T_LEFT, tix] -= 1
        if ti[T_LEFT, tix] == 0:
            heap_push(ti, tf, ist, now + tf[T_LAT, tix], ti[T_ID, tix], tix)


@compiled
def step(t: float, flows_end: bool, sf: np.ndarray, si: np.ndarray, act: np.ndarray, ef: np.ndarray,
         busy: np.ndarray, chg: np.ndarray, pu: np.ndarray, puo: np.ndarray, phead: np.ndarray, ti: np.ndarray,
         tf: np.ndarray, fs: np.ndarray, us: np.ndarray, ist: np.ndarray) -> None:
    """Move every class of flows to ``t`` at its rate and end the flows of those done
    (``flows_end``: also those whose finish time at these rates is ``t``; :func:`first_end` must
    have run on this state just before). A step that moves no time and ends no flow by its finish
    time changes nothing."""
    now = fs[NOW]
    dt = t - now
    if dt == 0 and not flows_end:
        return
    n = ist[N_CLS]
    if n == 0:
        fs[NOW] = t
        return
    classes, rem, rate, size, fin = si[C_LIST], sf[C_REM], sf[C_RATE], sf[C_SIZE], sf[C_FIN]
    if dt > 0:
        for j in range(ist[N_BUSY]):
            b = busy[j]
            ef[BYTES, b] += ef[LRATE, b] * dt
            ef[BUSY_S, b] += dt
    fs[NOW] = t
    due = t * (1 + 1e-12)
    k = 0
    ends = si[ENDS]
    for i in range(n):
        c = classes[i]
        if dt > 0:
            rem[c] -= rate[c] * dt
        if rem[c] <= REL_TOL * size[c] or (flows_end and now + fin[c] <= due):
            s = si[C_HEAD, c]
            while s >= 0:
                ends[k] = s
                k += 1
                s = si[C_NEXT, s]
    if k:
        sort(ends, k)
        _end_flows(k, sf, si, act, ef, chg, pu, puo, phead, ti, tf, fs, us, ist)


@compiled
def run_until(t: float, first_done: bool, sf: np.ndarray, si: np.ndarray, act: np.ndarray, ef: np.ndarray,
              busy: np.ndarray, chg: np.ndarray, key: np.ndarray, pu: np.ndarray, puo: np.ndarray, phead: np.ndarray,
              ti: np.ndarray, tf: np.ndarray, mtab: np.ndarray, ment: np.ndarray, mkey: np.ndarray, mint: np.ndarray,
              mflt: np.ndarray, ht: np.ndarray, hmeta: np.ndarray, hlinks: np.ndarray, hrates: np.ndarray,
              hst: np.ndarray, fs: np.ndarray, us: np.ndarray, ist: np.ndarray) -> int:
    """Every internal event up to ``t`` (>= the clock) in order, then the move to ``t``; the
    transfers completed are added to the done rows. With ``first_done``, stop instead at the first
    event that completes a transfer (``t`` may then be inf; the clock stays where it is when no
    transfer ever completes). Returns :data:`OK`, or the status of a recomputation that needs the
    caller (the state is then as at that recomputation: call again)."""
    while True:
        status = settle(sf, si, ef, busy, chg, key, phead, mtab, ment, mkey, mint, mflt, ht, hmeta, hlinks, hrates,
                        hst, fs, ist)
        if status != OK:
            return status
        te = fs[NOW] + first_end(sf, si, ist)
        lt = tf[H_T, 0] if ist[N_HEAP] > 0 else np.inf
        at = te if te <= lt else lt
        if at > t:
            break
        if at == np.inf:  # (t is inf): nothing ever completes
            return OK
        step(at, te <= at, sf, si, act, ef, busy, chg, pu, puo, phead, ti, tf, fs, us, ist)
        pop_done(ti, tf, ist, at)
        if first_done and ist[N_DONE] > 0:
            return OK
    step(t, False, sf, si, act, ef, busy, chg, pu, puo, phead, ti, tf, fs, us, ist)
    pop_done(ti, tf, ist, t)
    return OK


@compiled
def place(pids: np.ndarray, sizes: np.ndarray, k: int, tix: int, sf: np.ndarray, si: np.ndarray, act: np.ndarray,
          chg: np.ndarray, phead: np.ndarray, ist: np.ndarray) -> None:
    """Start ``k`` flows of transfer index ``tix``: ``sizes[f]`` bytes along path ``pids[f]``
    (``f < k``), at rate 0, each in the smallest free slot in turn (there must be room), kept in the
    live slots' order, on its path's list and in a class; their paths count as started."""
    compact(si, act, ist)  # (before a slot freed since is taken again)
    n = ist[N_LISTED]
    ns = ist[N_STARTED]
    live, ends = si[LIVE], si[ENDS]  # ends: scratch, the new slots (ascending)
    slot = 0
    for f in range(k):
        while act[slot]:
            slot += 1
        act[slot] = True
        sf[REM, slot], sf[SIZE, slot], sf[RATE, slot] = sizes[f], sizes[f], 0.0
        si[PIDX, slot], si[TIX, slot] = pids[f], tix
        chg[STARTED, ns + f] = pids[f]
        ends[f] = slot
        path_add(slot, pids[f], si, phead)
        place_in_class(slot, sf, si, ist)
    i, j, w = n - 1, k - 1, n + k - 1
    while j >= 0:  # merge the new slots into the live ones, from the back
        if i >= 0 and live[i] > ends[j]:
            live[w] = live[i]
            i -= 1
        else:
            live[w] = ends[j]
            j -= 1
        w -= 1
    ist[N_LISTED] = n + k
    ist[N_LIVE] += k
    ist[N_STARTED] = ns + k
