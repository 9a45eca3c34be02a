"""The engine: runs per-rank programs on a SimPy event queue and records the timeline.

With :mod:`~simtrain.engine.streams`, the only module that imports ``simpy``. Each (rank, stream)
walks its ops in program order. An op starts when its stream is free (the previous op on the stream
is done), its dependencies are done, and, for a collective, every simulated member of its group has
reached it; it then lasts what the cost model (compute) or the network says. A point-to-point
transfer is owned by the sender's ``pp_send`` stream and also occupies the receiver's ``pp_recv``
stream while it runs (receives are posted early, as Megatron-LM does); transfers to one receiver
run one at a time, in the order they were ready.

Communication slows compute: while a communication op runs on a rank (a collective on each member,
a transfer on the sender and the receiver), that rank's compute progresses at ``1 / (1 +
comm_interference)`` of its speed, because the communication kernels hold SMs the compute's kernels
would use (:attr:`~simtrain.specs.gpu.GpuSpec.comm_interference`). A compute op whose rate changes
mid-way re-plans its end from the work it has left; with ``comm_interference = 0`` every compute op
lasts exactly its cost.

The engine talks to the network only through :class:`~simtrain.network.interface.NetworkModel`: an
op the network prices up front is one timeout (one for all members of a collective); any other runs
the network's transfer steps, and one network process wakes the ops whose tokens finish.

Where the network prices every op up front (its ``fixed_duration`` answers a price for each, 0
included), the run is :mod:`~simtrain.engine.compiled`'s loop instead: the same moves in the same
order over the program's columns, compiled, with the same spans, checks and errors; by default
only for programs of :data:`COMPILED_MIN_OPS` ops or more, where it pays for loading its machine
code (:mod:`~simtrain.engine.loop_code`), and of :data:`BUILD_MIN_OPS` or more while that code is not
built yet, or once this process has loaded it (:func:`loop_loaded`).
The flow network runs on SimPy's queue.

Speed: a stream (:class:`~simtrain.engine.streams.Stream`) walks op ids over the program's columns
(:class:`~simtrain.workload.program.OpTable`); its bound methods are the callbacks of its wake-ups
(it is not a SimPy process), so an op whose dependencies are done costs one event, and a finished
op resumes its waiters directly. Spans are recorded as (op id, start, end), the timeline's columns
after the run. A re-plan at the instant a compute op starts leaves its work as it is; one at the
instant it ends is skipped. After the run the spans are checked
(:func:`~simtrain.engine.timeline.check_spans`: each op once, no stream running two ops at once,
dependencies respected), and the network's own invariants. A state where ops remain but no event
can fire is a deadlock, reported with the blocked op of every rank; an event budget stops runaway
runs.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Generator
from heapq import heappop, heappush
from dataclasses import dataclass
from typing import cast

import numpy as np
import simpy
from simpy.events import NORMAL

from simtrain.errors import SimulationError
from simtrain.network.interface import NetworkModel
from simtrain.workload.program import STREAM, Key, OpRef, Program
from simtrain.engine.streams import Callback, Queue, Stream, Wake
from simtrain.engine.timeline import Timeline, check_spans, program_timeline
from simtrain.specs.budget import DEFAULT_MAX_EVENTS

#: Programs this long or longer run compiled by default: loading the loop's saved machine code takes
#: about 0.07 s (measured on a 2-core machine), the SimPy engine 3-4 us per op, the compiled loop
#: under 1 us. Measured there, a process's whole run of the 70B example at gbs 16 (10,556 ops):
#: 0.10 s on SimPy, 0.09 s compiled; at gbs 64 (41,708 ops): 0.25 and 0.13 s.
COMPILED_MIN_OPS = 20_000
#: While the loop's machine code is not built yet, only programs this long run compiled: numba's
#: compile of the loop takes about 15 s on a 2-core machine, once per installation (a program of
#: 200,000 ops takes 0.6-0.8 s on SimPy's queue).
BUILD_MIN_OPS = 200_000


def compiled_by_default(ops: int) -> bool:
    """Whether a program of ``ops`` ops priced up front runs compiled by default: the loop is
    loaded in this process, or the program is :data:`BUILD_MIN_OPS` long, or it is
    :data:`COMPILED_MIN_OPS` long and the loop's machine code is saved (so costs its load only)."""
    if loop_loaded() or ops >= BUILD_MIN_OPS:
        return True
    if ops < COMPILED_MIN_OPS:
        return False
    from simtrain.engine import loop_code

    return loop_code.ready()


def loop_loaded() -> bool:
    """Whether this process has run the compiled loop already (its module is imported only by a
    compiled run): its load is then paid, and a program of any length runs compiled (a
    search's worker, say, after its first long candidate). The two engines give the same spans."""
    return "simtrain.engine.priced" in sys.modules


#: A network process: SimPy events it waits for, one after another.
_Process = Generator[simpy.Event, object, None]


@dataclass(frozen=True)
class RunResult:
    timeline: Timeline
    num_events: int  # operations executed (each is one start and one end event)
    slowdown_s: dict[int, float]  # simulated rank -> compute seconds communication added


def _wake_or_timeout(env: simpy.Environment, wake: simpy.Event, delay_s: float) -> _Process:
    """Wait for ``wake`` or ``delay_s``, whichever is processed first: ``wake | env.timeout(delay_s)``
    as SimPy's condition runs it (the first of the two to be processed triggers the event the
    process waits on; the hook comes off ``wake``, which outlives the wait), without the
    condition's bookkeeping: the same events, scheduled in the same order."""
    first = env.event()

    def fire(_: simpy.Event) -> None:
        if not first.triggered:
            first.succeed()

    env.timeout(delay_s).callbacks.append(fire)
    wake.callbacks.append(fire)
    yield first
    if not wake.triggered:
        wake.callbacks.remove(fire)


class _Run:
    # set by run(): the wake-up of the network process, whether a resumption runs, the spans
    wake: simpy.Event
    resuming: bool
    rows: list[int]
    starts: list[float]
    ends: list[float]

    def __init__(self, program: Program, network: NetworkModel, max_events: int, comm_interference: float,
                 compiled: bool | None = None):
        self.prog, self.net, self.max_events = program, network, max_events
        self.compiled = compiled_by_default(len(program.ops)) if compiled is None else compiled
        self.interference, self.slow_factor = comm_interference, 1.0 + comm_interference
        table = program.ops  # the columns the streams read
        self.dep0, self.dep1, self.more, self.comm = table.dep0, table.dep1, table.more, table.comm_code
        self.duration, self.key, self.peer = table.duration_s, table.key, table.peer

    def finish(self, i: int, start: float) -> None:
        """Op ``i``, started at ``start``, ends now: record its span, wake the streams waiting for it."""
        if self.finished[i]:
            raise AssertionError(f"op ran twice: {self.prog.ops[i].label()}")
        now = self.env._now
        self.finished[i] = True
        self.rows.append(i)
        self.starts.append(start)
        self.ends.append(now)
        self.executed += 1
        if self.executed > self.max_events:
            raise _budget_error(self.max_events)
        waiter = self.waiting[i]
        if waiter is not None:
            self.waiting[i] = None
            if type(waiter) is list:
                for w in waiter:  # several: in the order they came
                    self.resume(w)
            else:  # one stream
                self.resume(waiter)  # type: ignore[arg-type]

    def resume(self, stream: Stream) -> None:
        """Let ``stream`` start its next ops now. Inside another resumption it is queued and run
        right after, so that chains of ops that take no time do not nest calls without bound."""
        if self.resuming:
            self.ready.append(stream)
            return
        self.resuming = True
        try:
            stream.next()
            ready = self.ready
            while ready:
                ready.popleft().next()
        finally:
            self.resuming = False

    def running(self, rank: int, delta: int) -> None:
        """A communication op starts (``delta`` 1) or ends (-1) on ``rank``; its compute re-plans."""
        if self.interference <= 0:
            return
        self.active[rank] = self.active.get(rank, 0) + delta
        compute = self.compute.get(rank)
        if compute is not None and compute.ev is not None:  # a compute op is running there
            compute.replan(self.env._now)

    # ---- network -----------------------------------------------------------------------------
    def network_process(self) -> _Process:
        """Sleeps until the network's next event or a new token, then collects finished tokens."""
        env, net = self.env, self.net
        while True:
            t = net.next_event_s()
            wake = self.wake
            if t is None:
                yield wake
            else:
                yield from _wake_or_timeout(env, wake, max(0.0, t - env.now))
            if wake.triggered:
                self.wake = env.event()
            for token in net.advance(env.now):
                self.waiters.pop(token).succeed()

    def _transfer(self, op: OpRef) -> _Process:
        """Run the network's steps of ``op``: wait out each delay, or each token until it ends."""
        for step in self.net.transfer(op):
            if step.token is not None:
                ev = self.waiters[step.token] = self.env.event()
                if not self.wake.triggered:
                    self.wake.succeed()
                yield ev
            elif step.delay_s > 0:
                yield self.env.timeout(step.delay_s)

    def _after(self, duration: float | None, op: OpRef, done: Callback) -> None:
        """Call ``done(event)`` once ``op``'s communication is over: the network's up-front price
        ``duration``, or (None) the network's transfer steps; at once when it takes no time."""
        if duration is None:
            self.env.process(self._transfer(op)).callbacks.append(done)
        elif duration > 0:
            heappush(self.queue, (self.env._now + duration, NORMAL, next(self.eid), Wake(done)))
        else:
            done(None)

    # ---- point-to-point ----------------------------------------------------------------------
    def request_peer(self, stream: Stream, op: int) -> None:
        """Op ``op`` is ready: it starts when the receiver's ``pp_recv`` stream is free."""
        peer = self.peer[op]
        queue = self.recv_queue.get(peer)
        if queue is None:
            self.recv_queue[peer] = deque()
            self._start_p2p(stream, op)
        else:
            queue.append((stream, op))

    def _start_p2p(self, stream: Stream, op: int) -> None:
        stream.op, stream.start = op, self.env._now
        self.running(stream.rank, 1)
        self.running(self.peer[op], 1)
        self._after(self.net.fixed_duration(ref := OpRef(self.prog.ops, op)), ref, stream.on_p2p_end)

    def p2p_end(self, stream: Stream) -> None:
        op = stream.op
        peer = self.peer[op]
        now = self.env._now
        self.running(stream.rank, -1)
        self.running(peer, -1)
        self.rows.append(~op)  # the receiver's span of the same transfer
        self.starts.append(stream.start)
        self.ends.append(now)
        queue = self.recv_queue[peer]
        stream.comm_done(now)
        if queue:
            self._start_p2p(*queue.popleft())
        else:
            del self.recv_queue[peer]

    # ---- collectives -------------------------------------------------------------------------
    def arrive(self, stream: Stream, op: int) -> None:
        """A member reaches collective ``op``; the last one prices it (or launches its transfer)
        and every member then runs it from now."""
        key: Key = self.key[op]  # type: ignore[assignment]  # a collective has one
        need = self.prog.members.get(key, 1)
        if need == 1:  # one simulated member (a folded group): the stream's own callback ends it
            stream.op, stream.start = op, self.env._now
            self.running(stream.rank, 1)
            ref = OpRef(self.prog.ops, op)
            self._after(self.net.fixed_duration(ref), ref, stream.on_solo_end)
            return
        members = self.arrivals.setdefault(key, [])
        members.append(stream)
        if len(members) < need:
            return
        del self.arrivals[key]
        ref = OpRef(self.prog.ops, op)
        now = self.env._now
        for s in members:
            s.op, s.start = s.ops[s.pos], now
            self.running(s.rank, 1)
        self._after(self.net.fixed_duration(ref), ref, _CollectiveEnd(self, members))

    # ---- driver ------------------------------------------------------------------------------
    def run(self) -> RunResult:
        prog = self.prog
        n = len(prog.ops)
        self.env = env = simpy.Environment()
        self.queue, self.eid = cast(Queue, env._queue), env._eid  # where Wake events go, numbered as SimPy's
        self.finished = [False] * n
        self.waiting: list[Stream | list[Stream] | None] = [None] * n  # op id -> the stream(s) waiting for it
        self.rows, self.starts, self.ends = [], [], []  # the spans: op id (~id: receiver), start, end
        self.arrivals: dict[Key, list[Stream]] = {}  # collective key -> the members arrived so far
        self.recv_queue: dict[int, deque[tuple[Stream, int]]] = {}  # receiver -> transfers waiting for its pp_recv
        self.active: dict[int, int] = {}  # rank -> communication ops running on it
        self.slowdown: dict[int, float] = {r: 0.0 for r in prog.ranks}
        self.waiters: dict[int, simpy.Event] = {}  # network token -> the event its transfer ends
        self.wake = env.event()  # wakes the network process when a transfer hands out a token
        self.executed, self.resuming = 0, False
        self.ready: deque[Stream] = deque()  # streams to resume once the current one waits
        self.net.prepare(prog, lambda: env.now)
        if self.compiled and (result := _run_compiled(self)) is not None:
            return result
        env.process(self.network_process())
        streams = [Stream(self, rank, ids) for (rank, _), ids in sorted(prog.order.items())]
        self.compute = {s.rank: s for (key, s) in zip(sorted(prog.order), streams) if key[1] == STREAM["compute"]}
        for s in streams:
            self.resume(s)
        _drain(env, self.queue)
        if not all(self.finished):
            raise SimulationError(self._deadlock_message())
        rows = np.asarray(self.rows, dtype=np.int64)  # the spans as arrays, converted once
        starts, ends = np.asarray(self.starts, dtype=np.float64), np.asarray(self.ends, dtype=np.float64)
        timeline = program_timeline(prog.ops, rows, starts, ends)
        check_spans(prog, rows, starts, ends)
        self.net.check()
        return RunResult(timeline, self.executed, self.slowdown)

    def _deadlock_message(self) -> str:
        ops, parts = self.prog.ops, []
        heads = [next((i for i in ids if not self.finished[i]), None) for _, ids in sorted(self.prog.order.items())]
        for op in (ops[i] for i in heads if i is not None):
            pending = [ops[d].label() for d in op.deps if not self.finished[d]]
            why = f"waits for {pending[0]}" if pending else "waits for the other members of its collective"
            parts.append(f"[{op.label()} {why}]")
        return "deadlock: operations remain but none can start; blocked: " + "; ".join(parts[:16]) + \
            (f"; ... {len(parts) - 16} more" if len(parts) > 16 else "")


def _run_compiled(run: _Run) -> RunResult | None:
    """The run as :mod:`~simtrain.engine.compiled`'s loop makes it, where the network prices every
    op up front (else None). Its machine code (or numba) is loaded only here, where a run needs it."""
    from simtrain.engine import loop_layout
    from simtrain.engine.priced import prices, run_priced
    prog = run.prog
    priced = prices(prog, run.net)
    if priced is None:
        return None
    rec = run_priced(prog, *priced, run.max_events, run.interference)
    if rec.status == loop_layout.BUDGET:
        raise _budget_error(run.max_events)
    if rec.status == loop_layout.RAN_TWICE:
        raise AssertionError(f"op ran twice: {prog.ops[rec.status_op].label()}")
    run.finished = rec.finished  # type: ignore[assignment]  # (read as booleans)
    if not rec.finished.all():
        raise SimulationError(run._deadlock_message())
    timeline = program_timeline(prog.ops, rec.rows, rec.starts, rec.ends, priced[1] == loop_layout.COMPUTE)
    check_spans(prog, rec.rows, rec.starts, rec.ends)
    run.net.check()
    return RunResult(timeline, rec.executed, rec.slowdown_s)


class _CollectiveEnd:
    """Callback: a collective ended on every member (in the order they arrived)."""

    __slots__ = ("run", "members")

    def __init__(self, run: _Run, members: list[Stream]):
        self.run, self.members = run, members

    def __call__(self, _event: object) -> None:
        run, now = self.run, self.run.env._now
        for s in self.members:
            run.running(s.rank, -1)
            s.comm_done(now)


def _budget_error(max_events: int) -> SimulationError:
    return SimulationError(f"event budget exhausted: more than max_events={max_events} operations ran; "
                           f"raise --max-events or simulate fewer micro-batches (smaller --gbs)")


def _drain(env: simpy.Environment, queue: Queue) -> None:
    """``env.run()`` with no end given, its ``step`` inlined: pop the next event, set the clock,
    call its callbacks and raise a failed event's exception (as SimPy's ``Environment.step``
    does, a copy whose ``__cause__`` is the original); one method call fewer per event."""
    while queue:
        env._now, _, _, event = heappop(queue)
        callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]  # (as SimPy does)
        for callback in callbacks:
            callback(event)
        if not event._ok and "_defused" not in vars(event):  # failed and not defused
            failure = cast(simpy.Event, event)._value
            exc = type(failure)(*failure.args)
            exc.__cause__ = failure
            raise exc


def run(program: Program, network: NetworkModel, max_events: int = DEFAULT_MAX_EVENTS,
        comm_interference: float = 0.0, compiled: bool | None = None) -> RunResult:
    """Simulate ``program`` on ``network``, compute slowed by ``comm_interference`` while communication
    runs beside it; returns the timeline, the ops run and the compute time communication added per rank.
    Where the network prices every op up front, the run of a program of :data:`COMPILED_MIN_OPS` ops
    or more, or of any once the loop has run in this process (``compiled=None``), or of any
    (``True``), is :mod:`~simtrain.engine.compiled`'s loop (the same spans); ``compiled=False``
    runs it on SimPy's event queue all the same."""
    return _Run(program, network, max_events, comm_interference, compiled).run()
