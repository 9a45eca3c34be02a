"""A rank's streams as the engine runs them: each (rank, stream) walks its op ids in program order
and starts each op when its dependencies are done (:mod:`simtrain.engine.simulator` holds the
run they share: the finished ops, the collectives' arrivals, the transfers and the network).

A stream is not a SimPy process: its bound methods are the callbacks of its wake-ups, queued on
SimPy's own event queue as bare :class:`Wake` entries, so an op whose dependencies are done costs
one event. A compute op slowed by communication on its rank (``1 / (1 + comm_interference)`` of
its speed) re-plans its end from the work it has left when the rank's communication changes.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from heapq import heappush
from itertools import count
from typing import Protocol, cast

import simpy
from simpy.events import NORMAL

from simtrain.workload.program import COMM_NONE, COMM_P2P, MORE, NONE


class Wake:
    """A wake-up on SimPy's queue: what ``Environment.step`` needs of an event, queued as a
    ``Timeout`` is (same time, priority and sequence number) without a ``Timeout``'s construction."""

    __slots__ = ("callbacks",)
    _ok = True

    def __init__(self, callback: Callback) -> None:
        self.callbacks = [callback]


#: What SimPy calls with the event that ended: a bound method of a stream or a _CollectiveEnd.
Callback = Callable[[object], None]
#: SimPy's event queue as the engine fills it: SimPy's events and bare wake-ups.
Queue = list[tuple[float, int, int, "simpy.Event | Wake"]]


class RunState(Protocol):
    """What a stream reads and calls of the run it belongs to (:class:`simtrain.engine.simulator._Run`)."""

    env: simpy.Environment
    queue: Queue  # SimPy's event queue, where wake-ups go
    eid: count[int]  # SimPy's event numbers
    finished: list[bool]  # op id -> done
    waiting: list[Stream | list[Stream] | None]  # op id -> the stream(s) waiting for it
    dep0: array[int]  # the program's dependency columns (:class:`~simtrain.workload.program.OpTable`)
    dep1: array[int]
    more: dict[int, list[int]]
    comm: array[int]  # op id -> the code of its kind of communication (COMM_NONE: compute, COMM_P2P)
    duration: array[float]  # op id -> its compute time alone, s
    interference: float  # communication's slowdown of compute on its rank (comm_interference)
    slow_factor: float  # 1 + interference
    active: dict[int, int]  # rank -> communication ops running on it
    slowdown: dict[int, float]  # rank -> compute seconds communication added

    def finish(self, i: int, start: float) -> None: ...

    def resume(self, stream: Stream) -> None: ...

    def running(self, rank: int, delta: int) -> None: ...

    def request_peer(self, stream: Stream, op: int) -> None: ...

    def p2p_end(self, stream: Stream) -> None: ...

    def arrive(self, stream: Stream, op: int) -> None: ...



class Stream:
    """One (rank, stream) queue: starts its ops in order, each when its dependencies are done."""

    __slots__ = ("run", "env", "queue", "eid", "rank", "ops", "pos", "op", "start", "left", "t0", "slow", "end",
                 "ev", "on_end", "on_solo_end", "on_p2p_end")

    def __init__(self, run: RunState, rank: int, ops: Sequence[int]):
        self.run, self.rank, self.ops, self.pos = run, rank, ops, 0  # ops: op ids, in program order
        self.env, self.queue, self.eid = run.env, run.queue, run.eid  # the run's, read per op
        self.op: int = cast(int, None)  # the op running: set when one starts, read only after
        self.ev: Wake | None = None
        self.start = self.left = self.t0 = self.end = 0.0
        self.slow = 1.0
        # callbacks bound once, not per op
        self.on_end, self.on_solo_end, self.on_p2p_end = self._compute_end, self.solo_end, self.p2p_end

    def next(self) -> None:
        """Start ops until one has to wait (for a dependency, a timeout, a peer or members)."""
        run = self.run
        finished, ops = run.finished, self.ops
        dep0, dep1, comm, duration = run.dep0, run.dep1, run.comm, run.duration
        while self.pos < len(ops):
            op = ops[self.pos]
            d = dep0[op]  # the first dependency not done, if any (NONE: no dependency; MORE: a list)
            if d >= 0:
                if finished[d]:
                    d = dep1[op]
                    if d >= 0 and finished[d]:
                        d = NONE
            elif d == MORE:
                d = next((x for x in run.more[op] if not finished[x]), NONE)
            if d >= 0:
                w = run.waiting[d]
                if w is None:
                    run.waiting[d] = self
                elif type(w) is list:
                    w.append(self)
                else:  # one stream so far
                    run.waiting[d] = [w, self]  # type: ignore[list-item]
                return
            now = self.env._now
            kind = comm[op]
            if kind == COMM_NONE:
                delay = duration[op]
                if delay > 0:
                    self.op, self.start = op, now
                    if run.interference > 0:
                        self.left, self.t0 = delay, now
                        self.slow = slow = run.slow_factor if run.active.get(self.rank, 0) > 0 else 1.0
                        delay *= slow
                    # else compute alone on its SMs: one wake-up, no re-planning
                    self.end = end = now + delay
                    self.ev = ev = Wake(self.on_end)
                    heappush(self.queue, (end, NORMAL, next(self.eid), ev))
                    return
                self.pos += 1
                run.finish(op, now)
            elif kind == COMM_P2P:
                run.request_peer(self, op)
                return
            else:
                run.arrive(self, op)
                return

    # ---- compute -----------------------------------------------------------------------------
    def replan(self, now: float) -> None:
        """Communication started or ended on this rank: the compute running here re-plans its end
        from the work it has left at the new speed (unless it ends right now)."""
        if self.ev is None or self.end == now:
            return
        self.left = max(0.0, self.left - (now - self.t0) / self.slow)
        self.t0 = now
        run = self.run
        self.slow = run.slow_factor if run.active.get(self.rank, 0) > 0 else 1.0
        self.end = end = now + self.left * self.slow
        self.ev = ev = Wake(self.on_end)
        heappush(self.queue, (end, NORMAL, next(self.eid), ev))

    def _compute_end(self, ev: object) -> None:
        if ev is not self.ev:  # a re-planned end superseded this one
            return
        self.ev = None
        run, op = self.run, self.op
        now = self.env._now
        if run.interference > 0:
            run.slowdown[self.rank] += (now - self.start) - run.duration[op]
        self.pos += 1
        run.finish(op, self.start)
        run.resume(self)

    # ---- communication -------------------------------------------------------------------------
    def solo_end(self, _event: object) -> None:
        """Callback: this stream's collective of one simulated member ended."""
        self.run.running(self.rank, -1)
        self.comm_done(self.env._now)

    def p2p_end(self, _event: object) -> None:
        """Callback: this stream's transfer ended."""
        self.run.p2p_end(self)

    def comm_done(self, now: float) -> None:
        """This stream's communication op (started at ``self.start``) ended ``now``."""
        self.pos += 1
        self.run.finish(self.op, self.start)
        self.run.resume(self)
