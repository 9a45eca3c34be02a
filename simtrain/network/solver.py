"""Max-min fair flows on the directed links of the cluster graph (the ``flow`` network fidelity).

A *flow* moves bytes along a fixed path of directed edges ``(u, v)``; a *transfer* is a group of
flows waited on as one unit (one phase of a collective, one point-to-point send). It completes
``latency_s`` after its last flow delivered its last byte: the model handles latency itself, so
:meth:`FlowModel.advance` returns transfers that are fully done, latency included.

Rates are max-min fair over all active flows and the links' achievable bandwidth (``capacity_Bps``:
the line rate times the link kind's efficiency, :mod:`simtrain.topology.spec`), computed by
progressive filling (water-filling): raise every unfrozen flow's rate together until some link
saturates, freeze the flows crossing it, repeat (Bertsekas and Gallager, "Data Networks", 2nd ed.
1992, section 6.5.2; :mod:`simtrain.network.maxmin`). Rates are recomputed whenever a flow
starts or ends, lazily (once per instant however many flows changed) and only on the connected
component (flows linked through shared links) that changed, since max-min allocations decompose
over components; each recompute is vectorised with numpy over the flow-link incidence pairs.
Link statistics advance only over the links that carry traffic.

The caller owns the clock; the model never schedules anything itself::

    model.add(now, tid, [(links, nbytes), ...], latency_s)  # any number at the same instant
    t = model.next_event_s()   # earliest state change: a flow ends (rates change) or a transfer
                               # completes; None when idle. Any add() may move it earlier.
    done = model.advance(t)    # transfer ids complete at or before t, by (finish time, id)

``advance(now)`` processes every internal event up to ``now`` in order, so calling it late is
correct too; :attr:`FlowModel.finish_s` holds each transfer's exact completion time. What the
links carried is in :attr:`FlowModel.usage` (:class:`~simtrain.network.links.LinkUsage`).
"""

from __future__ import annotations

import heapq
from typing import Iterable, Sequence

import numpy as np

from simtrain.network.links import Link, LinkUsage
from simtrain.network.maxmin import REL_TOL, MaxMinMemo, max_min_rates  # noqa: F401
from simtrain.topology.cluster import Cluster

FlowSpec = tuple[Sequence[Link], float]  # (path as directed edges, bytes)

class FlowTable:
    """The active flows in slots (reused smallest first, grown by doubling): each one's bytes
    left, rate, size, path (link indices) and transfer; the flows crossing each link; and the
    links whose flows changed since the rates were last computed (:attr:`dirty`)."""

    def __init__(self, num_links: int) -> None:
        n = 64
        self.rem, self.rate, self.size = np.zeros(n), np.zeros(n), np.zeros(n)
        self.active = np.zeros(n, dtype=bool)
        self.paths: list[np.ndarray | None] = [None] * n
        self.path_sets: list[frozenset[int]] = [frozenset()] * n  # the same paths as sets
        self.transfer = [-1] * n
        self._sets: dict[int, tuple[np.ndarray, frozenset[int]]] = {}  # id of a path -> it, its links
        self._free = list(range(n))
        self.link_flows: list[set[int]] = [set() for _ in range(num_links)]
        self.pairs = 0  # active flow-link pairs
        self.dirty: set[int] = set()
        self._live: np.ndarray | None = None  # the active slots, None when they changed

    def start(self, tid: int, path: np.ndarray, nbytes: float) -> None:
        """A flow of transfer ``tid`` with ``nbytes`` to carry along ``path``, at rate 0 until the
        next rate computation."""
        if not self._free:
            self._grow()
        s = heapq.heappop(self._free)
        self.rem[s] = self.size[s] = nbytes
        self.rate[s] = 0.0
        self.active[s] = True
        self._live = None
        self.paths[s] = path
        known = self._sets.get(id(path))
        if known is None or known[0] is not path:  # the array is kept, so its id stays its own
            known = self._sets[id(path)] = (path, frozenset(path.tolist()))
        links = self.path_sets[s] = known[1]
        self.transfer[s] = tid
        self.pairs += path.size
        for link in links:
            self.link_flows[link].add(s)
        self.dirty |= links

    def end(self, s: int) -> int:
        """Free slot ``s``; the transfer its flow belonged to."""
        path = self.paths[s]
        self.active[s] = False
        self._live = None
        self.rem[s] = self.rate[s] = 0.0
        self.pairs -= path.size
        links = self.path_sets[s]
        for link in links:
            self.link_flows[link].discard(s)
        self.dirty |= links
        self.paths[s] = None
        heapq.heappush(self._free, s)
        return self.transfer[s]

    def _grow(self) -> None:
        n = self.active.size
        self.rem, self.rate, self.size = (np.concatenate([a, np.zeros(n)])
                                          for a in (self.rem, self.rate, self.size))
        self.active = np.concatenate([self.active, np.zeros(n, dtype=bool)])
        self.paths += [None] * n
        self.path_sets += [frozenset()] * n
        self.transfer += [-1] * n
        self._free.extend(range(n, 2 * n))  # all larger than the (used) slots below n

    def live(self) -> np.ndarray:
        """The active slots, in order (kept until a flow starts or ends)."""
        if self._live is None:
            self._live = np.flatnonzero(self.active)
        return self._live

    def time_to_first_end(self) -> float:
        """Seconds until the first flow delivers its last byte at current rates (inf: never)."""
        live = self.live()
        live = live[self.rate[live] > 0]
        if not live.size:
            return np.inf
        return float(np.min(self.rem[live] / self.rate[live]))

    def load(self, num_links: int) -> np.ndarray:
        """The summed rate of the active flows on each link, from scratch."""
        load = np.zeros(num_links)
        for s in np.flatnonzero(self.active):
            np.add.at(load, self.paths[s], self.rate[s])
        return load

    def component(self) -> tuple[np.ndarray, list[int] | None]:
        """Active flows reachable from the dirty links through shared links (breadth-first),
        and the links visited; (all active flows, None) once the search passes half the pairs."""
        budget = self.pairs // 2
        seen_links = set(self.dirty)
        stack = list(seen_links)
        flows: set[int] = set()
        visited = 0
        link_flows, path_sets, paths = self.link_flows, self.path_sets, self.paths
        while stack:  # the result does not depend on the order of the search
            new = link_flows[stack.pop()] - flows
            flows |= new
            for s in new:
                visited += paths[s].size
                if visited > budget:
                    return np.flatnonzero(self.active), None
                fresh = path_sets[s] - seen_links
                seen_links |= fresh
                stack.extend(fresh)
        return np.array(sorted(flows), dtype=np.int64), sorted(seen_links)


class FlowModel:
    """Transfers of max-min fair flows on ``cluster.graph``; see the module docstring. ``record``
    keeps the link rates over time (:attr:`LinkUsage.history`) for the trace's counter tracks."""

    def __init__(self, cluster: Cluster, record: bool = False) -> None:
        g = cluster.graph
        self.edges: list[Link] = sorted(g.edges())
        self.index = {e: i for i, e in enumerate(self.edges)}
        self.capacity = np.array([g.edges[e]["capacity_Bps"] for e in self.edges], dtype=float)
        self.link_rate = np.zeros(len(self.edges))  # current sum of flow rates per link
        self.usage = LinkUsage(self.edges, self.index, self.capacity, record)
        self.flows = FlowTable(len(self.edges))
        self._paths: dict[tuple[Link, ...], np.ndarray] = {}
        self._max_min = MaxMinMemo(self.capacity)
        self._transfers: dict[int, list] = {}  # id -> [flows left, latency_s]
        self._latency: list[tuple[float, int]] = []  # (completion time, id), bytes already done
        self._pending: list[int] = []  # completed during add(), returned by the next advance()
        self.finish_s: dict[int, float] = {}
        self.now = 0.0
        self.recomputes = 0
        self._busy = np.zeros(0, dtype=np.int64)  # the links with a rate > 0, sorted

    # ---- public interface -----------------------------------------------------------------
    def add(self, now_s: float, transfer_id: int, flows: Iterable[FlowSpec],
            latency_s: float = 0.0) -> None:
        """Start transfer ``transfer_id`` at ``now_s`` (>= the model's clock): its flows begin now; it
        completes ``latency_s`` after the last byte. Flows with no link or no bytes end at once."""
        if transfer_id in self._transfers:
            raise ValueError(f"transfer {transfer_id} is already active")
        specs = [(links, float(nbytes)) for links, nbytes in flows]
        if any(not b >= 0 for _, b in specs):
            raise ValueError(f"transfer {transfer_id}: flow sizes must be >= 0")
        self._pending.extend(self._run_until(now_s))
        usage = self.usage
        live = 0
        for links, nbytes in specs:
            usage.bytes_added += nbytes
            usage.flows_added += 1
            if nbytes == 0 or not links:
                usage.bytes_delivered += nbytes
                continue
            self.flows.start(transfer_id, self._path(links), nbytes)
            live += 1
        self._transfers[transfer_id] = [live, float(latency_s)]
        if live == 0:
            self._bytes_done(transfer_id, self.now)
            self._pending.extend(self._pop_latency(self.now))

    def next_event_s(self) -> float | None:
        """The earliest time the state changes at current rates (a flow ends or a transfer
        completes); ``self.now`` if completions wait to be collected; None when idle."""
        if self._pending:
            return self.now
        self._settle()
        t = self.now + self.flows.time_to_first_end()
        if self._latency:
            t = min(t, self._latency[0][0])
        return None if t == np.inf else float(t)

    def advance(self, now_s: float) -> list[int]:
        """Run to ``now_s``; the ids of transfers complete by then, ordered by (finish time, id)."""
        done, self._pending = self._pending + self._run_until(now_s), []
        return done

    def account_isolated(self, start_s: float, flows: Sequence[FlowSpec]) -> None:
        """Book flows that ran alone on their links from ``start_s``, timed without the model
        (:meth:`LinkUsage.add_isolated`)."""
        for links, nbytes in flows:
            if nbytes > 0 and links:
                self.usage.add_isolated(start_s, self._path(links), nbytes)

    @property
    def active_flows(self) -> int:
        return int(self.flows.active.sum())

    @property
    def active_transfers(self) -> int:
        return len(self._transfers)

    def check_capacity(self) -> float:
        """Assert that no link carries more than its bandwidth (rates summed from scratch, with
        ``REL_TOL`` slack) and that the cached per-link rates agree; the max utilisation."""
        self._settle()
        load = self.flows.load(self.capacity.size)
        worst = int(np.argmax(load / self.capacity)) if load.size else 0
        if load.size and load[worst] > self.capacity[worst] * (1 + REL_TOL):
            raise AssertionError(f"link {self.edges[worst]} carries {load[worst]:.6g} B/s > "
                                 f"bandwidth {self.capacity[worst]:.6g} B/s")
        if not np.allclose(load, self.link_rate, rtol=1e-9, atol=1e-6):
            raise AssertionError("cached per-link rates disagree with the flows' rates")
        return float(load[worst] / self.capacity[worst]) if load.size else 0.0

    def _path(self, links: Sequence[Link]) -> np.ndarray:
        """The link indices of a path (interned: one array per distinct path)."""
        key = tuple(links)
        arr = self._paths.get(key)
        if arr is None:
            try:
                arr = np.array([self.index[tuple(e)] for e in key], dtype=np.int64)
            except KeyError as exc:
                raise ValueError(f"flow path uses a link not in the graph: {exc.args[0]}") from None
            self._paths[key] = arr
        return arr

    # ---- transfers ------------------------------------------------------------------------
    def _end_flow(self, s: int) -> None:
        flows = self.flows
        # bytes within the done-tolerance still count as carried, so every byte is delivered
        self.usage.bytes[flows.paths[s]] += max(flows.rem[s], 0.0)
        self.usage.bytes_delivered += flows.size[s]
        tid = flows.end(s)
        tr = self._transfers[tid]
        tr[0] -= 1
        if tr[0] == 0:
            self._bytes_done(tid, self.now)

    def _bytes_done(self, tid: int, t: float) -> None:
        heapq.heappush(self._latency, (t + self._transfers[tid][1], tid))

    def _pop_latency(self, t: float) -> list[int]:
        out = []
        while self._latency and self._latency[0][0] <= t:
            ft, tid = heapq.heappop(self._latency)
            del self._transfers[tid]
            self.finish_s[tid] = ft
            out.append(tid)
        return out

    # ---- time -----------------------------------------------------------------------------
    def _run_until(self, t: float) -> list[int]:
        if t < self.now - 1e-12 * max(1.0, abs(self.now)):
            raise ValueError(f"time goes backwards: {t} < {self.now}")
        t = max(t, self.now)
        done: list[int] = []
        while True:  # every internal event up to t, in order; each ends >= 1 flow or transfer
            self._settle()
            te = self.now + self.flows.time_to_first_end()
            step = min(te, self._latency[0][0] if self._latency else np.inf)
            if step > t:
                break
            self._step(step, flows_end=te <= step)
            done.extend(self._pop_latency(step))
        self._step(t, flows_end=False)
        done.extend(self._pop_latency(t))
        return done

    def _step(self, t: float, flows_end: bool) -> None:
        """Move every flow to ``t`` at its current rate and end the flows that are done."""
        dt = t - self.now
        flows = self.flows
        live = flows.live()
        if live.size == 0:
            self.now = t
            return
        rate = flows.rate[live]
        with np.errstate(divide="ignore"):
            finish = np.where(rate > 0, self.now + flows.rem[live] / rate, np.inf)
        if dt > 0:
            flows.rem[live] -= rate * dt
            self.usage.carry_links(self._busy, self.link_rate[self._busy], dt)
        self.now = t
        ended = (flows.rem[live] <= REL_TOL * flows.size[live])
        if flows_end:
            ended |= finish <= t * (1 + 1e-12)
        for s in live[ended].tolist():
            self._end_flow(s)

    # ---- rates ----------------------------------------------------------------------------
    def _settle(self) -> None:
        """Recompute the rates of the component(s) touched since the last recompute."""
        flows, usage = self.flows, self.usage
        if not flows.dirty:
            return
        slots, links = flows.component()
        flows.dirty = set()
        self.recomputes += 1
        busy = self._busy  # the links with a rate > 0 (the others are 0), sorted
        touched = busy if links is None else np.asarray(links, dtype=np.int64)
        self.link_rate[touched] = 0.0
        rest = busy[:0] if links is None else busy[~np.isin(busy, touched)]
        if slots.size == 0:
            self._busy = rest
            if usage.history is not None:
                usage.remember(self.now, touched, self.link_rate[touched])
            return
        rates, used, link_rates = self._max_min.rates([flows.paths[s] for s in slots.tolist()])
        flows.rate[slots] = rates
        self.link_rate[used] = link_rates
        self._busy = np.sort(np.concatenate((rest, used[link_rates > 0])))  # disjoint: used lies in touched
        usage.raise_peak(used, self.link_rate[used])
        if usage.history is not None:
            both = touched if links is not None else np.union1d(touched, used)
            usage.remember(self.now, both, self.link_rate[both])
