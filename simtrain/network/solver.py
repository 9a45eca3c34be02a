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
over components; each recompute is vectorised with numpy over the flow-link incidence pairs, and
kept by what caused it (:mod:`simtrain.network.reshare_memo`): a collective that recurs repeats
its recomputations by lookup. Link statistics advance only over the links that carry traffic.
The events themselves run compiled (:mod:`simtrain.network.flowcore`), one floating-point
operation for each of the definition's.

The caller owns the clock; the model never schedules anything itself::

    model.add(now, tid, [(links, nbytes), ...], latency_s)  # any number at the same instant
    t = model.next_event_s()   # when the first transfer completes if nothing starts before;
                               # None when idle. Any add() may move it earlier.
    done = model.advance(t)    # transfer ids complete at or before t, by (finish time, id)

``advance(now)`` processes every internal event up to ``now`` in order, so calling it late is
correct too; :attr:`FlowModel.finish_s` holds each transfer's exact completion time. What the
links carried is in :attr:`FlowModel.usage` (:class:`~simtrain.network.links.LinkUsage`).
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

import numpy as np

from simtrain.network.flow_layout import (
    ENDED, H_T, ISTATE, LRATE, MISS, N_BUSY, N_DONE, N_ENDED, N_HEAP, N_LIVE, N_STARTED, NEED_HISTORY, NODE, NOW, OK,
    O_IX, O_T, RECOMPUTES, STARTED, T_ID, T_LAT, T_LEFT)
from simtrain.network.flowtable import FlowTable, PathTable
from simtrain.network.links import Link, LinkUsage
from simtrain.network.maxmin import REL_TOL, MaxMinMemo, max_min_rates  # noqa: F401
from simtrain.network.reshare_memo import ReshareMemo
from simtrain.network.sharing import Reshares
from simtrain.topology.cluster import Cluster

FlowSpec = tuple[Sequence[Link], float]  # (path as directed edges, bytes)


class FlowModel:
    """Transfers of max-min fair flows on ``cluster.graph``; see the module docstring. ``record``
    keeps the link rates over time (:attr:`LinkUsage.history`) for the trace's counter tracks.
    Its events run in :mod:`simtrain.network.flowcore` (compiled, loaded with the model), once per
    class of alike flows (:mod:`simtrain.network.flowclass`; ``group=False``: once per flow, the
    same times to the last bit)."""

    def __init__(self, cluster: Cluster, record: bool = False, group: bool = True) -> None:
        from simtrain.network.flow_kernels import AHEAD, CORE  # compiled: only where flows run

        self._core, self._look = CORE, AHEAD
        g = cluster.graph
        self.edges: list[Link] = sorted(g.edges())
        self.index = {e: i for i, e in enumerate(self.edges)}
        self.capacity = np.array([g.edges[e]["capacity_Bps"] for e in self.edges], dtype=float)
        self.usage = LinkUsage(self.edges, self.index, self.capacity, record)
        self.ist = np.zeros(ISTATE, dtype=np.int64)
        self.paths = PathTable(self.index)
        self.flows = FlowTable(self.paths, self.ist, group)
        self._max_min = MaxMinMemo(self.capacity)
        self.reshares = Reshares(self._max_min, self.ist)
        self.memo = ReshareMemo(self.ist, CORE.key_hash)
        self.fs = np.zeros(1)  # the clock, s
        self.busy = np.zeros(len(self.edges), dtype=np.int64)  # the links with a rate > 0, sorted (N_BUSY)
        self.transfers = Transfers()
        self._pending: list[int] = []  # completed during add(), returned by the next advance()
        self.finish_s = self.transfers.finish_s
        self._kept: _Kept | None = None  # the state kept before running ahead
        self._ahead: _Ahead | None = None  # where the state ran ahead to
        self.ist[NODE] = self.reshares.node(np.zeros(0, dtype=np.int64), self.busy[:0])  # the rates' state

    @property
    def now(self) -> float:
        """The model's clock, s (where it ran ahead, the time it ran ahead from)."""
        return self._ahead.start if self._ahead is not None else float(self.fs[NOW])

    link_rate = property(lambda self: self.usage.ef[LRATE], doc="The summed rate of each link's flows, B/s.")
    recomputes = property(lambda self: int(self.ist[RECOMPUTES]), doc="Rate recomputations so far.")

    # ---- public interface -----------------------------------------------------------------
    def add(self, now_s: float, transfer_id: int, flows: Iterable[FlowSpec],
            latency_s: float = 0.0) -> None:
        """Start transfer ``transfer_id`` at ``now_s`` (>= the model's clock): its flows begin now; it
        completes ``latency_s`` after the last byte. Flows with no link or no bytes end at once."""
        if transfer_id in self.transfers.index:
            raise ValueError(f"transfer {transfer_id} is already active")
        count, total, empty_bytes, pids, nbytes = self.paths.batch(transfer_id, flows)
        self._pending.extend(self._run_until(now_s))
        usage = self.usage
        usage.bytes_added += total  # (for the delivery check, within its tolerance)
        for b in empty_bytes:
            usage.us[0] += b
        usage.flows_added += count
        live = len(pids)
        tix = self.transfers.new(transfer_id, live, float(latency_s))
        if live:
            self.flows.start(tix, pids, nbytes)
        else:
            tr = self.transfers
            self._core.heap_push(tr.ti, tr.tf, self.ist, self.now + float(latency_s), transfer_id, tix)
            self._core.pop_done(tr.ti, tr.tf, self.ist, self.now)
            self._pending.extend(tr.collect(self.ist))

    def next_event_s(self) -> float | None:
        """When the first transfer completes if no transfer starts before; ``self.now`` if
        completions wait to be collected; None when idle. The model runs ahead to find it, on its
        state (kept first, :mod:`~simtrain.network.flowahead`): an :meth:`advance` to that time
        finds the work done, an :meth:`add` before it puts the state back. Where a recomputation
        on the way is not yet memoised, the first internal event instead."""
        if self._pending:
            return self.now
        if self._ahead is not None:
            return self._ahead.at
        self._settle()
        ist = self.ist
        if ist[N_LIVE] == 0 and ist[N_HEAP] == 0:
            return None
        self._kept = _Kept.fitting(self._kept, self)
        start = float(self.fs[NOW])
        status = self._kept.run_ahead(self)
        if status == NEED_HISTORY:
            self.usage.make_room(1, len(self.edges))
            status = self._run(np.inf, True)
        if status == OK and ist[N_DONE] > 0:
            self._ahead = _Ahead(start, float(self.fs[NOW]))
            return self._ahead.at
        self._restore()
        if status != MISS:  # no transfer ever completes
            return None
        # a recomputation on the way is not memoised: the next internal event (computing it ahead
        # would be lost work where a transfer starts before)
        t = self.now + self._core.first_end(self.flows.sf, self.flows.si, ist)
        if ist[N_HEAP]:
            t = min(t, float(self.transfers.tf[H_T, 0]))
        return None if t == np.inf else float(t)

    def advance(self, now_s: float) -> list[int]:
        """Run to ``now_s``; the ids of transfers complete by then, ordered by (finish time, id)."""
        done, self._pending = self._pending + self._run_until(now_s), []
        return done

    def settle_ahead(self) -> None:
        """Put back a state the model ran ahead to (:meth:`next_event_s`), so that its flows and
        link statistics are those of :attr:`now`."""
        if self._ahead is not None:
            self._restore()

    def account_isolated(self, start_s: float, flows: Sequence[FlowSpec]) -> None:
        """Book flows that ran alone on their links from ``start_s``, timed without the model
        (:meth:`LinkUsage.add_isolated`)."""
        for links, nbytes in flows:
            if nbytes > 0 and links:
                self.usage.add_isolated(start_s, self._path(links), nbytes)

    @property
    def active_flows(self) -> int:
        self.settle_ahead()
        return int(self.flows.active.sum())

    @property
    def active_transfers(self) -> int:
        return len(self.transfers.index)

    def check_capacity(self) -> float:
        """:func:`check_capacity` of this model."""
        return check_capacity(self)

    def _path(self, links: Sequence[Link]) -> np.ndarray:
        """The link indices of a path (interned: one array per distinct path)."""
        return self.paths.arrays[self.paths.intern(links)]

    # ---- transfers ------------------------------------------------------------------------
    # ---- time -----------------------------------------------------------------------------
    def _run_until(self, t: float) -> list[int]:
        if self._ahead is not None and t < float(self.fs[NOW]):  # back from ahead: to before that completion
            self._restore()
        self._ahead = None
        now = self.now
        if t < now - 1e-12 * max(1.0, abs(now)):
            raise ValueError(f"time goes backwards: {t} < {now}")
        t = max(t, now)
        if not self._still(t):  # (as where the run ahead reached ``t`` with no flow ending then)
            while self._handled(self._run(t, False)):
                pass
        return self.transfers.collect(self.ist)

    def _still(self, t: float) -> bool:
        return _at_rest(self.ist, self.fs, self.transfers.tf, t)

    def _run(self, t: float, first_done: bool) -> int:
        """The compiled loop to ``t`` (to the first completion with ``first_done``), history room
        made as it asks; its status (a recomputation not in the memo: :data:`MISS`)."""
        while True:
            flows, paths, usage = self.flows, self.paths, self.usage
            status = int(self._core.run_until(
                float(t), first_done, flows.sf, flows.si, flows.act, usage.ef, self.busy, flows.chg, flows.key, paths.pu,
                paths.puo, paths.phead, self.transfers.ti, self.transfers.tf, self.memo.tab, self.memo.ent,
                self.memo.keys, self.memo.ints, self.memo.flts, usage.ht, usage.hmeta, usage.hlinks, usage.hrates,
                usage.hst, self.fs, usage.us, self.ist))
            if status != NEED_HISTORY:
                return status
            self.usage.make_room(1, len(self.edges))

    def _restore(self) -> None:
        """The state as :meth:`next_event_s` kept it before running ahead."""
        assert self._kept is not None
        self._kept.restore(self)
        self._ahead = None

    # ---- rates ----------------------------------------------------------------------------
    def _settle(self) -> None:
        """Recompute the rates of the component(s) touched since the last recompute, if any."""
        ist = self.ist
        if ist[N_STARTED] == 0 and ist[N_ENDED] == 0:
            return
        while self._handled(self._apply()):
            pass

    def _apply(self) -> int:
        flows, paths, usage, memo = self.flows, self.paths, self.usage, self.memo
        return int(self._core.settle(
            flows.sf, flows.si, usage.ef, self.busy, flows.chg, flows.key, paths.phead, memo.tab,
            memo.ent, memo.keys, memo.ints, memo.flts, usage.ht, usage.hmeta, usage.hlinks, usage.hrates,
            usage.hst, self.fs, self.ist))

    def _handled(self, status: int) -> bool:
        """Serve the loop's request (a recomputation the memo lacks, room in the history);
        False when it asked for nothing."""
        if status == NEED_HISTORY:
            self.usage.make_room(1, len(self.edges))
            return True
        if status != MISS:
            return False
        _memoise_reshare(self)
        while self._handled(self._apply()):  # applied now, found where it was just stored
            pass
        if self.reshares.limit <= 0:
            self.memo.clear()
        return True


def _at_rest(ist: np.ndarray, fs: np.ndarray, tf: np.ndarray, t: float) -> bool:
    """Whether a run to ``t`` has nothing to do: the clock is at ``t`` (a run left it there, so
    no flow's finish is due by then), no flow started or ended since the rates were set, and no
    transfer waits out a latency due by ``t``. (Flows placed at ``t`` and given rates since
    finish after ``t``, unless their bytes take less time than ``t``'s last digit holds.)"""
    return (float(fs[NOW]) == t and ist[N_STARTED] == 0 and ist[N_ENDED] == 0
            and (ist[N_HEAP] == 0 or float(tf[H_T, 0]) > t))


def _memoise_reshare(model: FlowModel) -> None:
    """Compute the recomputation ``model``'s compiled loop missed in its memo, and store it there
    (the memo cleared first where it would hold more than its limit)."""
    ist, chg = model.ist, model.flows.chg
    started = np.sort(chg[STARTED, :ist[N_STARTED]])
    ended = np.sort(chg[ENDED, :ist[N_ENDED]])
    busy = model.busy[:ist[N_BUSY]].copy()
    share = model.reshares.compute(model.flows, busy, np.concatenate((started, ended)))
    reshares, memo = model.reshares, model.memo
    reshares.misses += 1
    reshares.held += share.size + started.size + ended.size
    if reshares.held > reshares.limit:
        memo.clear()
        reshares.forget()
    memo.insert(int(ist[NODE]), started, ended, share)


def check_capacity(model: FlowModel) -> float:
    """Assert that no link of ``model`` carries more than its bandwidth (rates summed from scratch, with
    ``REL_TOL`` slack) and that the cached per-link rates agree; the max utilisation."""
    model.settle_ahead()
    model._settle()
    load = model.flows.load(model.capacity.size)
    worst = int(np.argmax(load / model.capacity)) if load.size else 0
    if load.size and load[worst] > model.capacity[worst] * (1 + REL_TOL):
        raise AssertionError(f"link {model.edges[worst]} carries {load[worst]:.6g} B/s > "
                             f"bandwidth {model.capacity[worst]:.6g} B/s")
    if not np.allclose(load, model.link_rate, rtol=1e-9, atol=1e-6):
        raise AssertionError("cached per-link rates disagree with the flows' rates")
    return float(load[worst] / model.capacity[worst]) if load.size else 0.0


class Transfers:
    """The active transfers by index (rows of ``ti`` and ``tf``, :mod:`simtrain.network.flow_layout`,
    beside the latency heap and the completed ones), :attr:`index` by id, and
    :attr:`finish_s`, each completed transfer's completion time (s)."""

    def __init__(self) -> None:
        self.ti = np.zeros((5, 64), dtype=np.int64)
        self.tf = np.zeros((3, 64))
        self.index: dict[int, int] = {}
        self._free = list(range(63, -1, -1))  # smallest last
        self.finish_s: dict[int, float] = {}

    def new(self, tid: int, flows: int, latency_s: float) -> int:
        """The index of transfer ``tid``, of ``flows`` flows, completing ``latency_s`` after them."""
        if not self._free:
            n = self.ti.shape[1]
            self.ti = np.concatenate([self.ti, np.zeros_like(self.ti)], axis=1)
            self.tf = np.concatenate([self.tf, np.zeros_like(self.tf)], axis=1)
            self._free = list(range(2 * n - 1, n - 1, -1))
        tix = self._free.pop()
        self.index[tid] = tix
        self.ti[T_LEFT, tix], self.ti[T_ID, tix], self.tf[T_LAT, tix] = flows, tid, latency_s
        return tix

    def collect(self, ist: np.ndarray) -> list[int]:
        """The ids of the transfers the loop completed since the last call, in order; their
        indices freed, their completion times kept."""
        n = int(ist[N_DONE])
        if n == 0:
            return []
        out = []
        for tix, ft in zip(self.ti[O_IX, :n].tolist(), self.tf[O_T, :n].tolist()):
            tid = int(self.ti[T_ID, tix])
            del self.index[tid]
            self._free.append(tix)
            self.finish_s[tid] = ft
            out.append(tid)
        ist[N_DONE] = 0
        return out


class _Ahead(NamedTuple):
    """Where :meth:`FlowModel.next_event_s` ran the state ahead: from ``start`` to the first
    completion, at ``at`` (s)."""

    start: float
    at: float


class _Kept:
    """What :func:`simtrain.network.flowahead.save` keeps of a flow model's state of ``slots`` flow
    slots, ``transfers`` transfer indices and ``links`` links (rows as that module names them)."""

    def __init__(self, slots: int, transfers: int, links: int) -> None:
        self.sf = np.zeros((3, slots))
        self.si = np.zeros((4, slots), dtype=np.int64)
        self.t = np.zeros((3, max(slots, transfers)), dtype=np.int64)
        self.h = np.zeros(transfers)
        self.busy = np.zeros(links, dtype=np.int64)
        self.ef = np.zeros((4, links))
        self.ist = np.zeros(ISTATE, dtype=np.int64)
        self.hst = np.zeros(4, dtype=np.int64)
        self.fs = np.zeros(2)
        self.shape = (slots, transfers, links)

    @classmethod
    def fitting(cls, old: "_Kept | None", model: FlowModel) -> "_Kept":
        """``old`` where its arrays fit ``model``'s state, else a new one."""
        shape = (model.flows.sf.shape[1], model.transfers.ti.shape[1], model.busy.size)
        return old if old is not None and old.shape == shape else cls(*shape)

    def run_ahead(self, m: FlowModel) -> int:
        """Keep what running ahead may change of ``m``'s (settled) state, then run ``m``'s loop to
        the first event that completes a transfer, in one compiled call (:func:`simtrain.network.flowahead.run_ahead`); the loop's status."""
        flows, paths, usage, tr, memo = m.flows, m.paths, m.usage, m.transfers, m.memo
        return int(m._look.run_ahead(
            flows.sf, flows.si, flows.act, usage.ef, m.busy, flows.chg, flows.key, paths.pu, paths.puo, paths.phead,
            tr.ti, tr.tf, memo.tab, memo.ent, memo.keys, memo.ints, memo.flts, usage.ht, usage.hmeta, usage.hlinks,
            usage.hrates, usage.hst, m.fs, usage.us, m.ist, self.sf, self.si, self.t, self.h, self.busy, self.ef,
            self.ist, self.hst, self.fs))

    def restore(self, m: FlowModel) -> None:
        """Put ``m``'s state back as :meth:`run_ahead` kept it."""
        flows, usage, tr = m.flows, m.usage, m.transfers
        m._look.restore(flows.sf, flows.si, flows.act, usage.ef, m.busy, m.paths.phead, tr.ti, tr.tf, m.fs, usage.us, m.ist,
                        usage.hst, self.sf, self.si, self.t, self.h, self.busy, self.ef, self.ist, self.hst, self.fs)
