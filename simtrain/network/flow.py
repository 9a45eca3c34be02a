"""The ``flow`` network: every transfer runs as flows sharing the links max-min fairly.

A communication op runs its plan's phases (:class:`~simtrain.network.planner.Planner`) one after
another; each phase is one transfer on a :class:`~simtrain.network.solver.FlowModel`, handed to
the engine as a token that :meth:`FlowNetwork.advance` reports when it completes. Two reductions
keep this cheap without changing any simulated time:

* a folded op stands for several identical groups; only those linked to its first group through
  shared links (transitively) run as flows (:meth:`FlowNetwork._interacting`);
* the transfers of a group set whose flows can never meet another flow are timed directly, as
  the flow model would time them alone on their links (:meth:`FlowNetwork._private_sets`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from simtrain.network.links import Link, link_report
from simtrain.network.phases import Phase, phase_load
from simtrain.network.planner import Planner
from simtrain.network.interface import LinkSeries, Step, comm_parts, op_parts
from simtrain.network.solver import FlowModel
from simtrain.topology.cluster import Cluster
from simtrain.topology.routing.router import Router
from simtrain.workload.program import AnyOp, Program

#: The GPU groups of a folded op (one group set): one tuple of GPUs per group.
Groups = tuple[tuple[int, ...], ...]


class FlowNetwork:
    """The flow fidelity's :class:`~simtrain.network.interface.NetworkModel`. ``algo`` forces a
    collective algorithm where it applies (elsewhere the tuner decides); ``nvls`` enables or
    disables NVLink SHARP (None: as the topology says). Each :meth:`prepare` starts a fresh flow
    model, kept in :attr:`model` after the run."""

    def __init__(self, cluster: Cluster, router: Router | None = None, *, algo: str | None = None,
                 nvls: bool | None = None) -> None:
        self.cluster = cluster
        self.planner = Planner(cluster, router, algo=algo, nvls=nvls)
        self.model = FlowModel(cluster)

    # ---- the protocol ---------------------------------------------------------------------
    def prepare(self, program: Program, clock: Callable[[], float]) -> None:
        self._program = program
        self._clock = clock
        self.model = FlowModel(self.cluster, record=True)
        self._next_token = 0
        self._interacting_cache: dict[tuple[str, Groups, float], Groups] = {}  # (comm, groups, bytes)
        self._steps: dict[tuple[str, int, float], list[tuple[Phase, float | None]]] = {}  # (part, group set, bytes)
        self._runs: dict[tuple[str, int, float], int] = {}  # (part, group set, bytes) -> transfers run
        self._private = self._private_sets()

    def fixed_duration(self, op: AnyOp) -> None:
        return None

    def transfer(self, op: AnyOp) -> Iterator[Step]:
        """Each phase of each part of ``op``: a delay when its group set is private, else the
        token of its transfer on the flow model."""
        parts, size = op_parts(op)
        for part in parts:
            key = (part, op.group_set, size)
            self._runs[key] = self._runs.get(key, 0) + 1
            for phase, alone in self._phase_steps(op, part, size):
                if alone is not None:
                    self.model.account_isolated(self._clock(), phase.flows)
                    yield Step(alone)
                    continue
                token = self._next_token
                self._next_token += 1
                self.model.add(self._clock(), token, phase.flows, phase.latency_s)
                yield Step(token=token)

    def next_event_s(self) -> float | None:
        return self.model.next_event_s()

    def advance(self, now_s: float) -> list[int]:
        return self.model.advance(now_s)

    def check(self) -> None:
        """No link above its bandwidth, every byte sent delivered."""
        model, usage = self.model, self.model.usage
        model.check_capacity()
        peak = float(usage.peak.max(initial=0.0))
        if peak > 1 + 1e-9:
            raise AssertionError(f"a link carried {peak:.6f} of its bandwidth")
        if abs(usage.bytes_added - usage.bytes_delivered) > 1e-6 * max(1.0, usage.bytes_added):
            raise AssertionError(f"flows delivered {usage.bytes_delivered} of "
                                 f"{usage.bytes_added} bytes sent")

    def link_report(self, step_s: float) -> tuple[dict[str, Any], LinkSeries]:
        """The links the flows used, and in ``utilisation_by_link`` also those of the groups a
        folded op stands for without running them (:meth:`_represented_bytes`)."""
        self.model.settle_ahead()
        return link_report(self.cluster, self.model.usage, step_s, self._represented_bytes())

    def _represented_bytes(self) -> dict[Link, float]:
        """Bytes per link of the groups left out of the flows (:meth:`_interacting`): each
        carries what its own plan puts on its links, once per transfer of its op."""
        extra: dict[Link, float] = {}
        for (part, gs, size), runs in self._runs.items():
            groups = self._program.group_sets[gs]
            ran = set(self._groups(part, groups, size))
            for group in groups:
                if group in ran:
                    continue
                for phase in self.planner.phases(part, group, size):
                    for link, nbytes in phase_load(phase).items():
                        extra[link] = extra.get(link, 0.0) + nbytes * runs
        return extra

    # ---- plans ----------------------------------------------------------------------------
    def _phase_steps(self, op: AnyOp, part: str, size: float) -> list[tuple[Phase, float | None]]:
        """The phases of ``part`` of ``op`` with, for a private group set, each one's time alone."""
        key = (part, op.group_set, size)
        steps = self._steps.get(key)
        if steps is None:
            groups = self._groups(part, self._program.group_sets[op.group_set], size)
            private = op.group_set in self._private
            steps = self._steps[key] = [(phase, self._isolated_time(phase) if private else None)
                                        for phase in self.planner.plan(part, groups, size)]
        return steps

    def _groups(self, comm: str, groups: Groups, size: float) -> Groups:
        """The groups of a folded op that run as flows."""
        return self._interacting(comm, groups, size) if len(groups) > 1 else groups

    def _interacting(self, comm: str, groups: Groups, size: float) -> Groups:
        """The groups a folded op must run as flows: those linked to the first group through
        shared links (transitively). The others use links no simulated flow of this op touches,
        and being identical they see the same contention among themselves, so leaving them out
        changes no simulated time. Intra-node TP groups reduce to one; DP groups that share
        spine links stay together."""
        key = (comm, groups, size)
        out = self._interacting_cache.get(key)
        if out is None:
            links = [{link for ph in self.planner.plan(comm, (g,), size) for f in ph.flows for link in f[0]}
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
            out = self._interacting_cache[key] = tuple(g for i, g in enumerate(groups) if i in keep)
        return out

    def _private_sets(self) -> set[int]:
        """Group sets whose flows can never meet another flow: their links carry no other group
        set's traffic, and their ops run one at a time (one stream). Their transfers are timed
        directly, exactly as the flow model would time flows alone on their links (TP rings on a
        node's NVSwitch, typically), which saves most of the flow model's events."""
        uses: dict[int, set[tuple[str, float]]] = {}
        streams: dict[int, set[tuple[int, int]]] = {}
        t = self._program.ops
        for comm, gs, nbytes, rank, stream in zip(t.comm, t.group_set, t.nbytes, t.rank, t.stream):
            if comm is None:
                continue
            parts, size = comm_parts(comm, nbytes)
            for part in parts:
                uses.setdefault(gs, set()).add((part, size))
            streams.setdefault(gs, set()).add((rank if comm == "p2p" else -1, stream))
        links_of: dict[int, set[Link]] = {}
        for gs, kinds in uses.items():
            groups = self._program.group_sets[gs]
            links: set[Link] = set()
            for part, size in sorted(kinds):
                for phase in self.planner.plan(part, self._groups(part, groups, size), size):
                    for path, _ in phase.flows:
                        links.update(path)
            links_of[gs] = links
        count: dict[Link, int] = {}
        for links in links_of.values():
            for link in links:
                count[link] = count.get(link, 0) + 1
        return {gs for gs, links in links_of.items()
                if len(streams[gs]) == 1 and all(count[link] == 1 for link in links)}

    def _isolated_time(self, phase: Phase) -> float | None:
        """Duration of a phase whose flows share no link with each other: each at its path's
        bottleneck, plus the latency; None when two of its flows share a link."""
        seen: set[Link] = set()
        longest = 0.0
        capacity = self.cluster.capacity_Bps
        for path, nbytes in phase.flows:
            if seen.intersection(path):
                return None
            seen.update(path)
            if nbytes > 0 and path:
                longest = max(longest, nbytes / min(capacity[e] for e in path))
        return longest + phase.latency_s
