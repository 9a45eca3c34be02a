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

from simtrain.network.flowtable import FlowTable, PathTable
from simtrain.network.links import Link, LinkUsage
from simtrain.network.maxmin import REL_TOL, MaxMinMemo, max_min_rates  # noqa: F401
from simtrain.network.sharing import Reshares
from simtrain.topology.cluster import Cluster

FlowSpec = tuple[Sequence[Link], float]  # (path as directed edges, bytes)


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
        self.paths = PathTable(self.index)
        self.flows = FlowTable(self.paths)
        self._max_min = MaxMinMemo(self.capacity)
        self.reshares = Reshares(self._max_min, self.paths.sets)
        self._transfers: dict[int, list[float]] = {}  # id -> [flows left, latency_s]
        self._latency: list[tuple[float, int]] = []  # (completion time, id), bytes already done
        self._pending: list[int] = []  # completed during add(), returned by the next advance()
        self.finish_s: dict[int, float] = {}
        self.now = 0.0
        self.recomputes = 0
        self._busy = np.zeros(0, dtype=np.int64)  # the links with a rate > 0, sorted
        self._node = self.reshares.node(np.zeros(0, dtype=np.int64), self._busy)  # the rates' state

    # ---- public interface -----------------------------------------------------------------
    def add(self, now_s: float, transfer_id: int, flows: Iterable[FlowSpec],
            latency_s: float = 0.0) -> None:
        """Start transfer ``transfer_id`` at ``now_s`` (>= the model's clock): its flows begin now; it
        completes ``latency_s`` after the last byte. Flows with no link or no bytes end at once."""
        if transfer_id in self._transfers:
            raise ValueError(f"transfer {transfer_id} is already active")
        all_bytes, empty_bytes, pids, nbytes = self.paths.batch(transfer_id, flows)
        self._pending.extend(self._run_until(now_s))
        usage = self.usage
        for b in all_bytes:  # one at a time: the same float sums as flow by flow
            usage.bytes_added += b
        for b in empty_bytes:
            usage.bytes_delivered += b
        usage.flows_added += len(all_bytes)
        live = len(pids)
        if live:
            self.flows.start(transfer_id, pids, nbytes)
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
        return self.paths.arrays[self.paths.intern(links)]

    # ---- transfers ------------------------------------------------------------------------
    def _end_flows(self, slots: np.ndarray) -> None:
        """End the flows in ``slots`` (ascending), booking each one's bytes as if one by one."""
        flows, usage = self.flows, self.usage
        # bytes within the done-tolerance still count as carried, so every byte is delivered;
        # adding 0 changes no count, so only the flows with bytes left add theirs
        left = np.maximum(flows.rem[slots], 0.0)
        some = left > 0
        if some.any():
            unique = self.paths.unique
            arrays = [unique[p] for p in flows.pidx[slots[some]].tolist()]
            np.add.at(usage.bytes, np.concatenate(arrays), np.repeat(left[some], [a.size for a in arrays]))
        for b in flows.size[slots].tolist():
            usage.bytes_delivered += b
        transfers = self._transfers
        for tid in flows.end(slots).tolist():
            tr = transfers[tid]
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
        """Move every flow to ``t`` at its current rate and end the flows that are done. A step
        that moves no time and ends no flow by its finish time changes nothing: every flow within
        the done-tolerance already ended at the step that brought it there."""
        dt = t - self.now
        if dt == 0 and not flows_end:
            return
        flows = self.flows
        live = flows.live()
        if live.size == 0:
            self.now = t
            return
        rate = flows.rate[live]
        if flows_end:
            rem = flows.rem[live]
            if rate.all():  # every rate > 0: finish times as below, without the zero-rate guard
                finish = self.now + rem / rate
            else:
                with np.errstate(divide="ignore"):
                    finish = np.where(rate > 0, self.now + rem / rate, np.inf)
        if dt > 0:
            flows.rem[live] -= rate * dt
            flows.moved()
            self.usage.carry_links(self._busy, self.link_rate[self._busy], dt)
        self.now = t
        ended = (flows.rem[live] <= REL_TOL * flows.size[live])
        if flows_end:
            ended |= finish <= t * (1 + 1e-12)
        if ended.any():
            self._end_flows(live[ended])

    # ---- rates ----------------------------------------------------------------------------
    def _settle(self) -> None:
        """Recompute the rates of the component(s) touched since the last recompute
        (:class:`~simtrain.network.sharing.Reshares`)."""
        flows, usage = self.flows, self.usage
        if not flows.changed():
            return
        share = self.reshares.get(self._node, flows, self._busy)
        flows.started, flows.ended = [], []
        self._node = share.node
        self.recomputes += 1
        flows.moved()
        self.link_rate[self._busy if share.touched is None else share.touched] = 0.0
        self._busy = share.busy
        if share.used is not None:
            slots, rates = self.reshares.rates(share, flows)
            flows.rate[slots] = rates
            self.link_rate[share.used] = share.link_rates
            usage.raise_peak(share.used, self.link_rate[share.used])
        if usage.history is not None:
            usage.remember(self.now, share.both, self.link_rate[share.both])
