"""The engine: runs per-rank programs as SimPy processes and records the timeline.

The only module that imports ``simpy``. Each (rank, stream) is one process that walks its ops in
program order. An op starts when its stream is free (the previous op on the stream is done), its
dependencies are done, and, for a collective, every simulated member of its group has reached
it; it then lasts what the cost model (compute) or the network model (communication) says. A
point-to-point transfer is owned by the sender's ``pp_send`` stream and also occupies the
receiver's ``pp_recv`` stream while it runs (receives are posted early, as Megatron-LM does).

After the run the engine checks its invariants: every op ran exactly once, no stream ran two ops
at once, no op started before its dependencies ended. A state where ops remain but no event can
fire is a deadlock, reported with the blocked op of every rank; an event budget stops runaway
runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from simtrain.errors import SimulationError
from simtrain.network.analytic import NetworkModel
from simtrain.workload.program import STREAM, Program
from simtrain.timeline import Timeline, TimelineBuilder

DEFAULT_MAX_EVENTS = 50_000_000


@dataclass(frozen=True)
class RunResult:
    timeline: Timeline
    num_events: int  # operations executed (each is one start and one end event)
    flows: object = None  # the flow model after the run (flow fidelity), for link statistics


class _Run:
    def __init__(self, program: Program, network: NetworkModel, max_events: int):
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
        self.flow_ids = 0
        self.comm_cache: dict[tuple, float] = {}
        # flow fidelity: transfers become flows on a shared max-min fair link model
        self.flows = network.new_model() if hasattr(network, "plan") else None
        self.flow_waiters: dict[int, simpy.Event] = {}
        self.interacting: dict[tuple, tuple] = {}
        self.private: set[int] | None = None  # group sets timed without the flow model
        self.plans: dict[tuple, list] = {}  # (collective, group set, bytes) -> [(phase, time alone)]
        self.next_transfer = 0
        self.wake = self.env.event()

    # ---- costs -------------------------------------------------------------------------------
    def _comm_time(self, op) -> float:
        key = (op.comm, op.group_set, op.nbytes)
        t = self.comm_cache.get(key)
        if t is None:
            groups = self.prog.group_sets[op.group_set]
            if op.comm == "p2p":
                t = max(self.net.p2p_time(a, b, op.nbytes) for a, b in groups)
            else:  # "a+b": collectives of equal size run back to back as one op
                parts = op.comm.split("+")
                size = op.nbytes / len(parts)
                t = max(sum(self.net.collective_time(c, g, size) for c in parts) for g in groups)
            self.comm_cache[key] = t
        return t

    # ---- flow fidelity -----------------------------------------------------------------------
    def network_process(self):
        """Wakes when a flow ends or a transfer completes, and whenever a transfer is added."""
        env, flows = self.env, self.flows
        while True:
            t = flows.next_event_s()
            if t is None:
                yield self.wake
            else:
                yield self.wake | env.timeout(max(0.0, t - env.now))
            if self.wake.triggered:
                self.wake = env.event()
            for tid in flows.advance(env.now):
                self.flow_waiters.pop(tid).succeed()

    def _interacting(self, comm: str, groups: tuple, size: float) -> tuple:
        """The groups a folded op must run as flows: those linked to the first group through
        shared links (transitively). The others use links no simulated flow of this op touches,
        and being identical they see the same contention among themselves, so leaving them out
        changes no simulated time. Intra-node TP groups reduce to one; DP groups that share
        spine links stay together."""
        key = (comm, groups, size)
        out = self.interacting.get(key)
        if out is None:
            links = [{link for ph in self.net.plan(comm, (g,), size) for f in ph.flows for link in f[0]}
                     for g in groups]
            keep, frontier = {0}, set(links[0])
            changed = True
            while changed:
                changed = False
                for i, ls in enumerate(links):
                    if i not in keep and ls & frontier:
                        keep.add(i)
                        frontier |= ls
                        changed = True
            out = self.interacting[key] = tuple(g for i, g in enumerate(groups) if i in keep)
        return out

    def _private_sets(self) -> set[int]:
        """Group sets whose flows can never meet another flow: their links carry no other group
        set's traffic, and their ops run one at a time (one stream). Their transfers are timed
        directly, exactly as the flow model would time flows alone on their links (TP rings on a
        node's NVSwitch, typically), which saves most of the flow model's events."""
        uses: dict[int, set[tuple[str, float]]] = {}
        streams: dict[int, set[tuple[int, int]]] = {}
        for op in self.prog.ops:
            if op.comm is None:
                continue
            parts = ["p2p"] if op.comm == "p2p" else op.comm.split("+")
            for part in parts:
                uses.setdefault(op.group_set, set()).add((part, op.nbytes / len(parts)))
            streams.setdefault(op.group_set, set()).add(
                (op.rank if op.comm == "p2p" else -1, op.stream))
        links_of: dict[int, set] = {}
        for gs, kinds in uses.items():
            groups = self.prog.group_sets[gs]
            links: set = set()
            for part, size in sorted(kinds):
                chosen = self._interacting(part, groups, size) if len(groups) > 1 else groups
                for phase in self.net.plan(part, chosen, size):
                    for path, _ in phase.flows:
                        links.update(path)
            links_of[gs] = links
        count: dict = {}
        for links in links_of.values():
            for link in links:
                count[link] = count.get(link, 0) + 1
        return {gs for gs, links in links_of.items()
                if len(streams[gs]) == 1 and all(count[link] == 1 for link in links)}

    def _isolated_time(self, phase) -> float | None:
        """Duration of a phase whose flows share no link with each other: each at its path's
        bottleneck, plus the latency; None when two of its flows share a link."""
        seen: set = set()
        longest = 0.0
        graph = self.net.cluster.graph
        for path, nbytes in phase.flows:
            if seen.intersection(path):
                return None
            seen.update(path)
            if nbytes > 0 and path:
                longest = max(longest, nbytes / min(graph.edges[e]["bandwidth_Bps"] for e in path))
        return longest + phase.latency_s

    def _transfer(self, op):
        """Run ``op``'s communication as flows: its plan's phases one after another."""
        all_groups = self.prog.group_sets[op.group_set]
        parts = ["p2p"] if op.comm == "p2p" else op.comm.split("+")
        size = op.nbytes / len(parts)
        if self.private is None:
            self.private = self._private_sets()
        for part in parts:
            key = (part, op.group_set, size)
            steps = self.plans.get(key)
            if steps is None:
                groups = self._interacting(part, all_groups, size) if len(all_groups) > 1 else all_groups
                private = op.group_set in self.private
                steps = self.plans[key] = [(phase, self._isolated_time(phase) if private else None)
                                           for phase in self.net.plan(part, groups, size)]
            for phase, alone in steps:
                if alone is not None:
                    self.flows.account_isolated(self.env.now, phase.flows, alone - phase.latency_s)
                    if alone > 0:
                        yield self.env.timeout(alone)
                    continue
                tid = self.next_transfer
                self.next_transfer += 1
                ev = self.flow_waiters[tid] = self.env.event()
                self.flows.add(self.env.now, tid, phase.flows, phase.latency_s)
                if not self.wake.triggered:
                    self.wake.succeed()
                yield ev

    def _launch(self, op):
        yield from self._transfer(op)

    def _communicate(self, op):
        """Wait out one communication op: a fixed time (analytic) or its flows (flow fidelity)."""
        if self.flows is None:
            duration = self._comm_time(op)
            if duration > 0:
                yield self.env.timeout(duration)
        else:
            yield from self._transfer(op)

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

    def _record(self, op, rank: int, stream: int, name: str, start: float, end: float, flow: int = -1,
                alloc: float = 0.0, free: float = 0.0, stage: int | None = None) -> None:
        tl = self.tl
        tl.add(rank, stream, op.kind, tl.name_id(name), op.stage if stage is None else stage,
               op.layer, op.mb, start, end, op.flops, op.nbytes, flow, alloc, free)

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
                    yield from self._communicate(op)
                flow = self.flow_ids
                self.flow_ids += 1
                self._record(op, rank, stream, op.name, start, env.now, flow=flow)
                self._record(op, op.peer, STREAM["pp_recv"], op.name.replace("send", "recv"), start,
                             env.now, flow=flow, stage=op.peer_stage)
                self._finish(op, start, env.now)
            else:
                entry = self.arrivals.get(op.key)
                if entry is None:
                    entry = self.arrivals[op.key] = [0, env.event()]
                entry[0] += 1
                if entry[0] == self.prog.members[op.key]:
                    # the last member to arrive launches the collective; the others wait for it
                    entry[1].succeed(None if self.flows is not None else self._comm_time(op))
                    if self.flows is not None:
                        entry.append(env.process(self._launch(op)))
                duration = yield entry[1]
                start = env.now
                if self.flows is None:
                    if duration > 0:
                        yield env.timeout(duration)
                else:
                    yield entry[2]
                self._record(op, rank, stream, op.name, start, env.now)
                self._finish(op, start, env.now)

    # ---- driver ------------------------------------------------------------------------------
    def run(self) -> RunResult:
        if self.flows is not None:
            self.flows.history = []  # keep link-rate samples for the trace's counter tracks
            self.env.process(self.network_process())
        for (rank, stream), op_ids in sorted(self.prog.order.items()):
            self.env.process(self.stream_process(rank, stream, op_ids))
        self.env.run()
        if not all(self.finished):
            raise SimulationError(self._deadlock_message())
        self._check_invariants()
        return RunResult(self.tl.build(), self.executed, self.flows)

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
        if self.flows is not None:
            self.flows.check_capacity()
            peak = float(self.flows.link_peak.max(initial=0.0))
            if peak > 1 + 1e-9:
                raise AssertionError(f"a link carried {peak:.6f} of its bandwidth")
            if abs(self.flows.bytes_added - self.flows.bytes_delivered) > 1e-6 * max(1.0, self.flows.bytes_added):
                raise AssertionError(f"flows delivered {self.flows.bytes_delivered} of "
                                     f"{self.flows.bytes_added} bytes sent")
        recv: dict[int, list[tuple[float, float]]] = {}
        for op in ops:
            if op.comm == "p2p":
                recv.setdefault(op.peer, []).append((start[op.id], end[op.id]))
        for spans in recv.values():
            spans.sort()
            for (s0, e0), (s1, e1) in zip(spans, spans[1:]):
                if s1 + tol < e0:
                    raise AssertionError("a pp_recv stream ran two transfers at once")


def run(program: Program, network: NetworkModel, max_events: int = DEFAULT_MAX_EVENTS) -> RunResult:
    """Simulate ``program`` on ``network``; returns the timeline and the number of ops run."""
    return _Run(program, network, max_events).run()
