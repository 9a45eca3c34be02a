"""The run of a program whose every communication op is priced up front, as one compiled loop.

The loop makes the moves :mod:`~simtrain.engine.simulator` and :mod:`~simtrain.engine.streams`
make, in the same order: streams start their ops in program order when their dependencies are
done, a collective starts when its last simulated member arrives, transfers to one receiver run
one at a time in the order they were ready, and compute re-plans its end when communication
starts or ends on its rank. Its event queue holds one entry per stream (the end of the op the
stream runs; a collective's end sits on the stream of its last member), ordered as SimPy orders
events: by time, then by the order they were queued. A re-planned end replaces its stream's
entry, where SimPy skips the superseded event when it comes. An op priced at nothing ends within
the move that starts it, as the SimPy engine ends it within the call that starts it: inside a
resumption, its waiters and its stream are queued to resume; a transfer that ends a priced one
starts the receiver's next, and ends it too while it is free. So the spans, their order and
every floating-point operation are the SimPy engine's; the tests hold both equal.

The program and state are two flat arrays, ``I`` (int32) and ``F`` (float64), each named array
at the offset ``o[K_name]`` (:mod:`~simtrain.engine.loop_layout`, laid out by
:func:`simtrain.engine.priced.run_priced`); a call between the loop's functions passes three
arrays. Ops are indexed by position (the streams' lists end to end; ``ops`` gives an op's id).
Per op: a record of ints (dependencies, class, receiver or key, done flag, waiting streams,
members) and its ``cost`` (s: a compute op's duration, a communication op's price). Per stream:
its position, op, start, work left and speed. Compiled by numba once per installation
(:data:`OPTIONS`; the code kept, :mod:`~simtrain.engine.loop_code`), without numba's runtime: the
loop allocates nothing, and with the runtime each call between its functions counts references to
its arrays atomically (numba/numba#2345), 80% of a move (0.48 against 0.09 us per op on S1's program).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
from numba import njit
from numba.core.options import DefaultOptions

from simtrain.engine.loop_layout import (
    ARG, BUDGET, CLS, COMPUTE, DEP0, DEP1, EV_COLL, EV_COMPUTE, EV_P2P, EV_SOLO, FIN, K_active, K_cap, K_comp, K_cost,
    K_ends, K_evalid, K_factor, K_harg, K_heap, K_hpos, K_hs, K_ht, K_htype, K_inst_mem, K_inst_off,
    K_interference, K_key_off, K_max_events, K_more_ids, K_more_ptr, K_nstreams, K_op, K_ops, K_pend,
    K_pend_cnt, K_ptr, K_qexists, K_qhead, K_qnext, K_qtail, K_reg, K_rows, K_rq, K_scratch, K_send, K_sleft,
    K_slowdown, K_sop, K_spos, K_srank, K_sslow, K_sstart, K_st0, K_starts, K_wnext, NEED, OK, P2P, RAN_TWICE,
    R_COUNT, R_EXEC, R_HEAD, R_INST, R_OP, R_REC, R_RESUMING, R_SEQ, R_SIZE, R_STATUS, W, WHEAD, WTAIL)
from simtrain.workload.program import MORE

_F = TypeVar("_F", bound=Callable[..., Any])
#: numba's options: cached; without its runtime where this numba has the option (else only slower)
OPTIONS: dict[str, bool] = {"cache": True, **({"_nrt": False} if hasattr(DefaultOptions, "_nrt") else {})}


def kernel(fn: _F) -> _F:
    """``fn`` compiled as the loop's functions are (:data:`OPTIONS`)."""
    return cast(_F, njit(**OPTIONS)(fn))  # type: ignore[call-overload]  # (_nrt: not in the stubs)


@kernel
def _less(I: np.ndarray, F: np.ndarray, o: np.ndarray, a: int, b: int) -> bool:
    """Stream ``a``'s queued end comes before ``b``'s: earlier, or as early and queued first."""
    ta, tb = F[o[K_ht] + a], F[o[K_ht] + b]
    return bool(ta < tb or (ta == tb and I[o[K_hs] + a] < I[o[K_hs] + b]))


@kernel
def _sift_up(I: np.ndarray, F: np.ndarray, o: np.ndarray, k: int) -> None:
    s = I[o[K_heap] + k]
    while k > 0:
        p = (k - 1) >> 1
        q = I[o[K_heap] + p]
        if _less(I, F, o, s, q):
            I[o[K_heap] + k] = q
            I[o[K_hpos] + q] = k
            k = p
        else:
            break
    I[o[K_heap] + k] = s
    I[o[K_hpos] + s] = k


@kernel
def _sift_down(I: np.ndarray, F: np.ndarray, o: np.ndarray, k: int, size: int) -> None:
    s = I[o[K_heap] + k]
    while True:
        c = 2 * k + 1
        if c >= size:
            break
        if c + 1 < size and _less(I, F, o, I[o[K_heap] + c + 1], I[o[K_heap] + c]):
            c += 1
        q = I[o[K_heap] + c]
        if _less(I, F, o, q, s):
            I[o[K_heap] + k] = q
            I[o[K_hpos] + q] = k
            k = c
        else:
            break
    I[o[K_heap] + k] = s
    I[o[K_hpos] + s] = k


@kernel
def _queue(I: np.ndarray, F: np.ndarray, o: np.ndarray, s: int, t: float, kind: int, arg: int) -> None:
    """Queue (or re-queue) stream ``s``'s end at ``t``, numbered after every event queued so far."""
    F[o[K_ht] + s] = t
    I[o[K_hs] + s] = I[o[K_reg] + R_SEQ]
    I[o[K_reg] + R_SEQ] += 1
    I[o[K_htype] + s] = kind
    I[o[K_harg] + s] = arg
    k = I[o[K_hpos] + s]
    if k < 0:
        k = I[o[K_reg] + R_SIZE]
        I[o[K_reg] + R_SIZE] += 1
        I[o[K_heap] + k] = s
        I[o[K_hpos] + s] = k
        _sift_up(I, F, o, k)
    else:
        _sift_up(I, F, o, k)
        _sift_down(I, F, o, I[o[K_hpos] + s], I[o[K_reg] + R_SIZE])


@kernel
def _pop(I: np.ndarray, F: np.ndarray, o: np.ndarray) -> int:
    s = I[o[K_heap] + 0]
    I[o[K_reg] + R_SIZE] -= 1
    size = I[o[K_reg] + R_SIZE]
    I[o[K_hpos] + s] = -1
    if size > 0:
        I[o[K_heap] + 0] = I[o[K_heap] + size]
        I[o[K_hpos] + I[o[K_heap] + 0]] = 0
        _sift_down(I, F, o, 0, size)
    return int(s)


@kernel
def _replan(I: np.ndarray, F: np.ndarray, o: np.ndarray, s: int, now: float) -> None:
    """As :meth:`Stream.replan`: the running compute op re-plans its end at the rank's new speed."""
    if F[o[K_send] + s] == now:
        return
    x = F[o[K_sleft] + s] - (now - F[o[K_st0] + s]) / F[o[K_sslow] + s]
    F[o[K_sleft] + s] = x if x > 0.0 else 0.0
    F[o[K_st0] + s] = now
    F[o[K_sslow] + s] = F[o[K_factor]] if I[o[K_active] + I[o[K_srank] + s]] > 0 else 1.0
    F[o[K_send] + s] = now + F[o[K_sleft] + s] * F[o[K_sslow] + s]
    _queue(I, F, o, s, F[o[K_send] + s], EV_COMPUTE, 0)


@kernel
def _running(I: np.ndarray, F: np.ndarray, o: np.ndarray, rank: int, delta: int, now: float) -> None:
    if F[o[K_interference]] <= 0:
        return
    I[o[K_active] + rank] += delta
    c = I[o[K_comp] + rank]
    if c >= 0 and I[o[K_evalid] + c]:
        _replan(I, F, o, c, now)


@kernel
def _record(I: np.ndarray, F: np.ndarray, o: np.ndarray, row: int, start: float, now: float) -> None:
    k = I[o[K_reg] + R_REC]
    I[o[K_rows] + k] = row
    F[o[K_starts] + k] = start
    F[o[K_ends] + k] = now
    I[o[K_reg] + R_REC] = k + 1


@kernel
def _push(I: np.ndarray, o: np.ndarray, s: int) -> None:
    """Queue stream ``s`` to resume within the current resumption, after those queued before."""
    I[o[K_rq] + (I[o[K_reg] + R_HEAD] + I[o[K_reg] + R_COUNT]) % o[K_cap]] = s
    I[o[K_reg] + R_COUNT] += 1


@kernel
def _finish(I: np.ndarray, F: np.ndarray, o: np.ndarray, i: int, start: float, now: float) -> int:
    """Op ``i`` ends: record it and hand on its waiters, to the ready queue inside a resumption,
    else into ``scratch`` (their count returned) for the caller to resume one after another."""
    if I[o[K_op] + W * i + FIN]:
        I[o[K_reg] + R_STATUS] = RAN_TWICE
        I[o[K_reg] + R_OP] = I[o[K_ops] + i]
        return 0
    I[o[K_op] + W * i + FIN] = 1
    _record(I, F, o, I[o[K_ops] + i], start, now)
    I[o[K_reg] + R_EXEC] += 1
    if I[o[K_reg] + R_EXEC] > I[o[K_max_events]] and I[o[K_reg] + R_STATUS] == OK:
        I[o[K_reg] + R_STATUS] = BUDGET
    w = I[o[K_op] + W * i + WHEAD]
    I[o[K_op] + W * i + WHEAD] = -1
    n = 0
    while w >= 0:
        nw = I[o[K_wnext] + w]
        if I[o[K_reg] + R_RESUMING]:
            _push(I, o, w)
        else:
            I[o[K_scratch] + n] = w
            n += 1
        w = nw
    return n


@kernel
def _start_p2p(I: np.ndarray, F: np.ndarray, o: np.ndarray, s: int, op: int, now: float) -> bool:
    """Stream ``s`` starts transfer ``op``; True where it takes no time (its end is the caller's)."""
    I[o[K_sop] + s] = op
    F[o[K_sstart] + s] = now
    _running(I, F, o, I[o[K_srank] + s], 1, now)
    _running(I, F, o, I[o[K_op] + W * op + ARG], 1, now)
    if F[o[K_cost] + op] > 0:
        _queue(I, F, o, s, now + F[o[K_cost] + op], EV_P2P, 0)
        return False
    return True


@kernel
def _transfer_over(I: np.ndarray, F: np.ndarray, o: np.ndarray, s: int, now: float) -> int:
    """As :meth:`_Run.p2p_end` before the sender's op ends; the receiver's rank index."""
    op = I[o[K_sop] + s]
    p = I[o[K_op] + W * op + ARG]
    _running(I, F, o, I[o[K_srank] + s], -1, now)
    _running(I, F, o, p, -1, now)
    _record(I, F, o, ~I[o[K_ops] + op], F[o[K_sstart] + s], now)
    return int(p)


@kernel
def _ended(I: np.ndarray, F: np.ndarray, o: np.ndarray, s: int, now: float) -> None:
    """In a resumption: stream ``s``'s op, priced at nothing, ends as it starts; its waiters and then
    ``s`` resume after those queued before (as the SimPy engine's ``comm_done`` does there)."""
    I[o[K_spos] + s] += 1
    _finish(I, F, o, I[o[K_sop] + s], F[o[K_sstart] + s], now)
    _push(I, o, s)


@kernel
def _arrive(I: np.ndarray, F: np.ndarray, o: np.ndarray, s: int, op: int, now: float) -> None:
    """As :meth:`_Run.arrive`: the last member starts the collective on every member."""
    nd = I[o[K_op] + W * op + NEED]
    if nd == 1:
        I[o[K_sop] + s] = op
        F[o[K_sstart] + s] = now
        _running(I, F, o, I[o[K_srank] + s], 1, now)
        if F[o[K_cost] + op] > 0:
            _queue(I, F, o, s, now + F[o[K_cost] + op], EV_SOLO, 0)
        else:
            _running(I, F, o, I[o[K_srank] + s], -1, now)
            _ended(I, F, o, s, now)
        return
    k = I[o[K_op] + W * op + ARG]
    I[o[K_pend] + I[o[K_key_off] + k] + I[o[K_pend_cnt] + k]] = s
    I[o[K_pend_cnt] + k] += 1
    if I[o[K_pend_cnt] + k] < nd:
        return
    I[o[K_pend_cnt] + k] = 0
    inst = I[o[K_reg] + R_INST]
    I[o[K_reg] + R_INST] += 1
    base = I[o[K_inst_off] + inst]
    I[o[K_inst_off] + inst + 1] = base + nd
    for j in range(nd):
        m = I[o[K_pend] + I[o[K_key_off] + k] + j]
        I[o[K_inst_mem] + base + j] = m
        I[o[K_sop] + m] = I[o[K_ptr] + m] + I[o[K_spos] + m]
        F[o[K_sstart] + m] = now
        _running(I, F, o, I[o[K_srank] + m], 1, now)
    if F[o[K_cost] + op] > 0:
        _queue(I, F, o, s, now + F[o[K_cost] + op], EV_COLL, inst)
        return
    for j in range(base, base + nd):
        m = I[o[K_inst_mem] + j]
        _running(I, F, o, I[o[K_srank] + m], -1, now)
        _ended(I, F, o, m, now)


@kernel
def _next(I: np.ndarray, F: np.ndarray, o: np.ndarray, s: int, now: float) -> None:
    """As :meth:`Stream.next`: start ops until one has to wait."""
    length = I[o[K_ptr] + s + 1] - I[o[K_ptr] + s]
    while I[o[K_spos] + s] < length:
        op = I[o[K_ptr] + s] + I[o[K_spos] + s]
        d = I[o[K_op] + W * op + DEP0]
        if d >= 0:
            if I[o[K_op] + W * d + FIN]:
                d = I[o[K_op] + W * op + DEP1]
                if d >= 0 and I[o[K_op] + W * d + FIN]:
                    d = -1
        elif d == MORE:
            k = I[o[K_op] + W * op + DEP1]
            d = -1
            for j in range(I[o[K_more_ptr] + k], I[o[K_more_ptr] + k + 1]):
                if not I[o[K_op] + W * I[o[K_more_ids] + j] + FIN]:
                    d = I[o[K_more_ids] + j]
                    break
        if d >= 0:
            I[o[K_wnext] + s] = -1
            if I[o[K_op] + W * d + WHEAD] < 0:
                I[o[K_op] + W * d + WHEAD] = s
            else:
                I[o[K_wnext] + I[o[K_op] + W * d + WTAIL]] = s
            I[o[K_op] + W * d + WTAIL] = s
            return
        c = I[o[K_op] + W * op + CLS]
        if c == COMPUTE:
            delay = F[o[K_cost] + op]
            if delay > 0:
                I[o[K_sop] + s] = op
                F[o[K_sstart] + s] = now
                if F[o[K_interference]] > 0:
                    F[o[K_sleft] + s] = delay
                    F[o[K_st0] + s] = now
                    sl = F[o[K_factor]] if I[o[K_active] + I[o[K_srank] + s]] > 0 else 1.0
                    F[o[K_sslow] + s] = sl
                    delay *= sl
                F[o[K_send] + s] = now + delay
                I[o[K_evalid] + s] = 1
                _queue(I, F, o, s, F[o[K_send] + s], EV_COMPUTE, 0)
                return
            I[o[K_spos] + s] += 1
            _finish(I, F, o, op, now, now)
        elif c == P2P:
            p = I[o[K_op] + W * op + ARG]
            if not I[o[K_qexists] + p]:
                I[o[K_qexists] + p] = 1
                I[o[K_qhead] + p] = -1
                if _start_p2p(I, F, o, s, op, now):  # no time: its receiver queue is still empty
                    _transfer_over(I, F, o, s, now)
                    _ended(I, F, o, s, now)
                    I[o[K_qexists] + p] = 0
            else:
                I[o[K_qnext] + s] = -1
                if I[o[K_qhead] + p] < 0:
                    I[o[K_qhead] + p] = s
                else:
                    I[o[K_qnext] + I[o[K_qtail] + p]] = s
                I[o[K_qtail] + p] = s
            return
        else:
            _arrive(I, F, o, s, op, now)
            return


@kernel
def _cascade(I: np.ndarray, F: np.ndarray, o: np.ndarray, s: int, now: float) -> None:
    """As :meth:`_Run.resume` outside a resumption: ``s`` and then every stream it readied."""
    cap = o[K_cap]
    I[o[K_reg] + R_RESUMING] = 1
    _next(I, F, o, s, now)
    while I[o[K_reg] + R_COUNT] > 0:
        x = I[o[K_rq] + I[o[K_reg] + R_HEAD]]
        I[o[K_reg] + R_HEAD] = (I[o[K_reg] + R_HEAD] + 1) % cap
        I[o[K_reg] + R_COUNT] -= 1
        _next(I, F, o, x, now)
    I[o[K_reg] + R_RESUMING] = 0


@kernel
def _comm_done(I: np.ndarray, F: np.ndarray, o: np.ndarray, s: int, now: float) -> None:
    I[o[K_spos] + s] += 1
    n = _finish(I, F, o, I[o[K_sop] + s], F[o[K_sstart] + s], now)
    for j in range(n):
        _cascade(I, F, o, I[o[K_scratch] + j], now)
    _cascade(I, F, o, s, now)


@kernel
def run_loop(I: np.ndarray, F: np.ndarray, o: np.ndarray) -> None:
    """Run every stream to its end; the status (:data:`OK` or the error) is ``I[o[K_reg] + R_STATUS]``."""
    nstreams = o[K_nstreams]
    for s in range(nstreams):
        _cascade(I, F, o, s, 0.0)
        if I[o[K_reg] + R_STATUS] != OK:
            return
    while I[o[K_reg] + R_SIZE] > 0:
        s = _pop(I, F, o)
        now = F[o[K_ht] + s]
        kind = I[o[K_htype] + s]
        if kind == EV_COMPUTE:
            I[o[K_evalid] + s] = 0
            op = I[o[K_sop] + s]
            if F[o[K_interference]] > 0:
                F[o[K_slowdown] + I[o[K_srank] + s]] += (now - F[o[K_sstart] + s]) - F[o[K_cost] + op]
            _comm_done(I, F, o, s, now)
        elif kind == EV_SOLO:
            _running(I, F, o, I[o[K_srank] + s], -1, now)
            _comm_done(I, F, o, s, now)
        elif kind == EV_P2P:  # then the receiver's next transfers, while they take no time
            while True:
                p = _transfer_over(I, F, o, s, now)
                _comm_done(I, F, o, s, now)
                q = I[o[K_qhead] + p]
                if q < 0:
                    I[o[K_qexists] + p] = 0
                    break
                I[o[K_qhead] + p] = I[o[K_qnext] + q]
                if not _start_p2p(I, F, o, q, I[o[K_ptr] + q] + I[o[K_spos] + q], now):
                    break
                s = q
        else:
            inst = I[o[K_harg] + s]
            for j in range(I[o[K_inst_off] + inst], I[o[K_inst_off] + inst + 1]):
                m = I[o[K_inst_mem] + j]
                _running(I, F, o, I[o[K_srank] + m], -1, now)
                _comm_done(I, F, o, m, now)
        if I[o[K_reg] + R_STATUS] != OK:
            return
