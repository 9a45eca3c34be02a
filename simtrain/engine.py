"""The engine: runs per-rank programs as SimPy processes and records the timeline.

The only module that imports ``simpy``. Each (rank, stream) is one process that walks its ops in
program order. An op starts when its stream is free (the previous op on the stream is done), its
dependencies are done, and, for a collective, every simulated member of its group has reached
it; it then lasts what the cost model (compute) or the network says. A point-to-point transfer
is owned by the sender's ``pp_send`` stream and also occupies the receiver's ``pp_recv`` stream
while it runs (receives are posted early, as Megatron-LM does).

Communication slows compute: while a communication op runs on a rank (a collective on each
member, a transfer on the sender and the receiver), that rank's compute progresses at
``1 / (1 + comm_interference)`` of its speed, because the communication kernels hold SMs the
compute's kernels would use (:attr:`~simtrain.specs.gpu.GpuSpec.comm_interference`). A compute
op whose rate changes mid-way re-plans its end from the work it has left; with
``comm_interference = 0`` every compute op lasts exactly its cost.

The engine talks to the network only through :class:`~simtrain.network.protocol.NetworkModel`:
an op the network prices up front is one timeout (per member of a collective); any other runs
the network's transfer steps, and one network process wakes the ops whose tokens finish.

After the run the engine checks its invariants (every op ran exactly once, no stream ran two ops
at once, no op started before its dependencies ended) and the network's own. A state where ops
remain but no event can fire is a deadlock, reported with the blocked op of every rank; an event
budget stops runaway runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from simtrain.errors import SimulationError
from simtrain.network.protocol import NetworkModel
from simtrain.workload.program import STREAM, Program
from simtrain.timeline import Timeline, TimelineBuilder

DEFAULT_MAX_EVENTS = 50_000_000


@dataclass(frozen=True)
class RunResult:
    timeline: Timeline
    num_events: int  # operations executed (each is one start and one end event)
    slowdown_s: dict[int, float]  # simulated rank -> compute seconds communication added


class _SharedSMs:
    """Compute and communication sharing a GPU's SMs: while communication runs on a rank, its
    compute progresses at ``1 / (1 + interference)`` of full speed."""

    def __init__(self, env: simpy.Environment, interference: float, ranks: list[int]):
        self.env = env
        self.interference = interference
        self.active: dict[int, int] = {}  # rank -> communication ops running on it
        self.change: dict[int, simpy.Event] = {}  # rank -> fires when that count changes
        self.slowdown: dict[int, float] = {r: 0.0 for r in ranks}  # compute seconds added

    def running(self, ranks: tuple[int, ...], delta: int) -> None:
        """A communication op starts (``delta`` 1) or ends (-1) on ``ranks``; wakes their compute."""
        if self.interference <= 0:
            return
        for rank in ranks:
            self.active[rank] = self.active.get(rank, 0) + delta
            ev = self.change.pop(rank, None)
            if ev is not None:
                ev.succeed()

    def compute(self, rank: int, seconds: float):
        """Wait out ``seconds`` of compute on ``rank``, slowed while communication runs there:
        the time left is re-planned at every start or end of a communication op."""
        env = self.env
        start, left = env.now, seconds
        while True:
            slow = 1.0 + self.interference if self.active.get(rank, 0) > 0 else 1.0
            change = self.change.get(rank)
            if change is None:
                change = self.change[rank] = env.event()
            t0 = env.now
            done = env.timeout(left * slow)
            fired = yield done | change
            if done in fired:
                break
            left = max(0.0, left - (env.now - t0) / slow)
        self.slowdown[rank] += (env.now - start) - seconds


class _Run:
    def __init__(self, program: Program, network: NetworkModel, max_events: int, comm_interference: float):
        self.prog = program
        self.net = network
        self.max_events = max_events
        self.env = simpy.Environment()
        n = len(program.ops)
        self.finished = [False] * n
        self.end_time = [0.0] * n
        self.start_time = [0.0] * n
        self.done_events: list = [None] * n
        self.arrivals: dict[tuple, list] = {}
        self.recv_free: dict[int, simpy.Resource] = {}
        self.executed = 0
        self.tl = TimelineBuilder()
        self.arrows = 0  # send -> recv arrows of the trace (the timeline's ``arrow`` column)
        self.waiters: dict[int, simpy.Event] = {}  # network token -> the event its transfer ends
        self.wake = self.env.event()  # wakes the network process when a transfer hands out a token
        self.shared = _SharedSMs(self.env, comm_interference, program.ranks)
        network.prepare(program, lambda: self.env.now)

    # ---- network -----------------------------------------------------------------------------
    def network_process(self):
        """Sleeps until the network's next event or a new token, then collects finished tokens."""
        env, net = self.env, self.net
        while True:
            t = net.next_event_s()
            if t is None:
                yield self.wake
            else:
                yield self.wake | env.timeout(max(0.0, t - env.now))
            if self.wake.triggered:
                self.wake = env.event()
            for token in net.advance(env.now):
                self.waiters.pop(token).succeed()

    def _transfer(self, op):
        """Run the network's steps of ``op``: wait out each delay, or each token until it ends."""
        for step in self.net.transfer(op):
            if step.token is not None:
                ev = self.waiters[step.token] = self.env.event()
                if not self.wake.triggered:
                    self.wake.succeed()
                yield ev
            elif step.delay_s > 0:
                yield self.env.timeout(step.delay_s)

    def _communicate(self, op):
        """Wait out one point-to-point op: the network's price of it, or its transfer."""
        duration = self.net.fixed_duration(op)
        if duration is None:
            yield from self._transfer(op)
        elif duration > 0:
            yield self.env.timeout(duration)

    # ---- processes ---------------------------------------------------------------------------
    def _wait(self, dep: int):
        ev = self.done_events[dep]
        if ev is None:
            ev = self.done_events[dep] = self.env.event()
        return ev

    def _finish(self, op, start: float, end: float) -> None:
        i = op.id
        if self.finished[i]:
            raise AssertionError(f"op ran twice: {op.label()}")
        self.finished[i] = True
        self.start_time[i] = start
        self.end_time[i] = end
        ev = self.done_events[i]
        if ev is not None:
            ev.succeed()
        self.executed += 1
        if self.executed > self.max_events:
            raise SimulationError(
                f"event budget exhausted: more than max_events={self.max_events} operations ran; "
                f"raise --max-events or simulate fewer micro-batches (smaller --gbs)")

    def _record(self, op, rank: int, stream: int, name: str, start: float, end: float, arrow: int = -1,
                alloc: float = 0.0, free: float = 0.0, stage: int | None = None) -> None:
        tl = self.tl
        tl.add(rank, stream, op.kind, tl.name_id(name), op.stage if stage is None else stage,
               op.layer, op.mb, start, end, op.flops, op.nbytes, arrow, alloc, free)

    def stream_process(self, rank: int, stream: int, op_ids: list[int]):
        env = self.env
        ops = self.prog.ops
        finished = self.finished
        for i in op_ids:
            op = ops[i]
            for d in op.deps:
                if not finished[d]:
                    yield self._wait(d)
            if op.comm is None:
                start = env.now
                if op.duration_s > 0:
                    if self.shared.interference > 0:
                        yield from self.shared.compute(rank, op.duration_s)
                    else:  # compute alone on its SMs: one timeout, no re-planning
                        yield env.timeout(op.duration_s)
                self._record(op, rank, stream, op.name, start, env.now, alloc=op.alloc, free=op.free)
                self._finish(op, start, env.now)
            elif op.comm == "p2p":
                res = self.recv_free.get(op.peer)
                if res is None:
                    res = self.recv_free[op.peer] = simpy.Resource(env, capacity=1)
                with res.request() as req:
                    yield req
                    start = env.now
                    self.shared.running((rank, op.peer), 1)
                    yield from self._communicate(op)
                    self.shared.running((rank, op.peer), -1)
                arrow = self.arrows
                self.arrows += 1
                self._record(op, rank, stream, op.name, start, env.now, arrow=arrow)
                self._record(op, op.peer, STREAM["pp_recv"], op.name.replace("send", "recv"), start,
                             env.now, arrow=arrow, stage=op.peer_stage)
                self._finish(op, start, env.now)
            else:
                entry = self.arrivals.get(op.key)
                if entry is None:
                    entry = self.arrivals[op.key] = [0, env.event()]
                entry[0] += 1
                if entry[0] == self.prog.members[op.key]:
                    # the last member to arrive prices the collective, or launches its transfer;
                    # every member then waits out the price, or the one transfer
                    duration = self.net.fixed_duration(op)
                    entry[1].succeed(duration)
                    if duration is None:
                        entry.append(env.process(self._transfer(op)))
                duration = yield entry[1]
                start = env.now
                self.shared.running((rank,), 1)
                if duration is None:
                    yield entry[2]
                elif duration > 0:
                    yield env.timeout(duration)
                self.shared.running((rank,), -1)
                self._record(op, rank, stream, op.name, start, env.now)
                self._finish(op, start, env.now)

    # ---- driver ------------------------------------------------------------------------------
    def run(self) -> RunResult:
        self.env.process(self.network_process())
        for (rank, stream), op_ids in sorted(self.prog.order.items()):
            self.env.process(self.stream_process(rank, stream, op_ids))
        self.env.run()
        if not all(self.finished):
            raise SimulationError(self._deadlock_message())
        self._check_invariants()
        return RunResult(self.tl.build(), self.executed, self.shared.slowdown)

    def _deadlock_message(self) -> str:
        ops = self.prog.ops
        parts = []
        heads = [(key, next((i for i in ids if not self.finished[i]), None))
                 for key, ids in sorted(self.prog.order.items())]
        for (rank, stream), i in heads:
            if i is None:
                continue
            op = ops[i]
            pending = [ops[d].label() for d in op.deps if not self.finished[d]]
            why = f"waits for {pending[0]}" if pending else "waits for the other members of its collective"
            parts.append(f"[{op.label()} {why}]")
        return "deadlock: operations remain but none can start; blocked: " + "; ".join(parts[:16]) + \
            (f"; ... {len(parts) - 16} more" if len(parts) > 16 else "")

    def _check_invariants(self) -> None:
        ops = self.prog.ops
        start = np.asarray(self.start_time)
        end = np.asarray(self.end_time)
        tol = 1e-12 * max(1.0, float(end.max(initial=0.0)))
        for op in ops:
            for d in op.deps:
                if start[op.id] + tol < end[d]:
                    raise AssertionError(f"dependency violated: {op.label()} started before "
                                         f"{ops[d].label()} ended")
        for op_ids in self.prog.order.values():
            s, e = start[op_ids], end[op_ids]
            if len(op_ids) > 1 and np.any(s[1:] + tol < e[:-1]):
                raise AssertionError("a stream ran two operations at once")
        self.net.check()
        recv: dict[int, list[tuple[float, float]]] = {}
        for op in ops:
            if op.comm == "p2p":
                recv.setdefault(op.peer, []).append((start[op.id], end[op.id]))
        for spans in recv.values():
            spans.sort()
            for (s0, e0), (s1, e1) in zip(spans, spans[1:]):
                if s1 + tol < e0:
                    raise AssertionError("a pp_recv stream ran two transfers at once")


def run(program: Program, network: NetworkModel, max_events: int = DEFAULT_MAX_EVENTS,
        comm_interference: float = 0.0) -> RunResult:
    """Simulate ``program`` on ``network``, compute slowed by ``comm_interference`` while
    communication runs beside it; returns the timeline, the number of ops run and the compute
    time communication added on each simulated rank."""
    return _Run(program, network, max_events, comm_interference).run()
