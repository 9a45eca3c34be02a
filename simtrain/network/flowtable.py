"""The active flows of a :class:`~simtrain.network.solver.FlowModel`, in slots of numpy arrays.

Flows start in batches (a transfer's flows at once) with the same slot assignment as one flow at
a time: slots are taken smallest free first, in the order the flows are given; the compiled loop
(:mod:`simtrain.network.flowcore`) ends them. Paths are interned by the model (:class:`PathTable`):
one id and one array per distinct path, and each path's distinct links in the pools the loop reads.
"""

from __future__ import annotations

from typing import Iterable, Sequence, cast

import numpy as np

from simtrain.network.flow_layout import (ENDED, GROUP, ISTATE, LIVE, N_ENDED, N_LISTED, N_LIVE, N_STARTED, PIDX, RATE, REM,
                                          SF_ROWS, SI_ROWS, SIZE, TIX)
from simtrain.network.flow_kernels import CLASSES, CORE
from simtrain.network.links import Link

#: A transfer's flows as :meth:`PathTable.batch` gives them: how many, their bytes summed, the
#: sizes of the flows without links or bytes, the path ids and the sizes of the others.
Batch = tuple[int, float, list[float], np.ndarray, np.ndarray]


class PathTable:
    """Distinct paths as ids: each one's link indices (in path order), and in the pools the
    compiled code reads the same links once each (for adding bytes, where a repeated link counts
    once, and for searches) with each path's number of links."""

    def __init__(self, index: dict[Link, int]) -> None:
        self.index = index
        self.ids: dict[tuple[Link, ...], int] = {}
        self.arrays: list[np.ndarray] = []
        self.pu = np.zeros(256, dtype=np.int64)  # every path's distinct links, end to end
        self.puo = np.zeros(65, dtype=np.int64)  # where each path's lie in pu (one more than paths)
        self.pa = np.zeros(256, dtype=np.int64)  # every path's links in path order, end to end
        self.pao = np.zeros(65, dtype=np.int64)  # where each path's lie in pa (one more than paths)
        self.psize = np.zeros(65, dtype=np.int64)  # by path id: its links, a repeated one as often as it appears
        self.phead = np.zeros(65, dtype=np.int64)  # by path id: one more than its first live flow's slot (0: none)
        self._batches: dict[int, tuple[object, Batch]] = {}  # id of a flow tuple -> it, its batch

    def batch(self, tid: int, flows: Iterable[tuple[Sequence[Link], float]]) -> Batch:
        """The flows ``(links, bytes)`` of transfer ``tid`` as (how many, their bytes summed, the
        sizes of flows without links or bytes, the path ids and sizes of the others), kept per
        flow tuple: a phase's flows recur."""
        known = self._batches.get(id(flows)) if isinstance(flows, tuple) else None
        if known is not None and known[0] is flows:  # the tuple is kept, so its id stays its own
            return known[1]
        specs = [(links, float(nbytes)) for links, nbytes in flows]
        if any(not b >= 0 for _, b in specs):
            raise ValueError(f"transfer {tid}: flow sizes must be >= 0")
        moving = [(links, b) for links, b in specs if b != 0 and links]
        out = (len(specs), sum(b for _, b in specs), [b for links, b in specs if b == 0 or not links],
               np.array([self.intern(links) for links, _ in moving], dtype=np.int64),
               np.array([b for _, b in moving], dtype=np.float64))
        if isinstance(flows, tuple):
            self._batches[id(flows)] = (flows, out)
        return out

    def intern(self, links: Sequence[Link]) -> int:
        """The id of the path ``links`` (directed edges of the graph)."""
        key = tuple(links)
        pid = self.ids.get(key)
        if pid is None:
            try:
                arr = np.array([self.index[cast(Link, tuple(e))] for e in key], dtype=np.int64)
            except KeyError as exc:
                raise ValueError(f"flow path uses a link not in the graph: {exc.args[0]}") from None
            pid = self.ids[key] = len(self.arrays)
            self.arrays.append(arr)
            self._pool(pid, np.unique(arr), arr)
        return pid

    def __len__(self) -> int:
        return len(self.arrays)

    def _pool(self, pid: int, links: np.ndarray, path: np.ndarray) -> None:
        """Append path ``pid``'s distinct ``links`` and its links in order (``path``) to the
        pools the compiled code reads."""
        if pid + 2 > self.puo.size:
            grown = np.zeros(self.puo.size, dtype=np.int64)
            self.phead, self.puo, self.pao, self.psize = (np.concatenate([a, grown])
                                                          for a in (self.phead, self.puo, self.pao, self.psize))
        self.pu = _put(self.pu, self.puo, pid, links)
        self.pa = _put(self.pa, self.pao, pid, path)
        self.psize[pid] = path.size


def _put(pool: np.ndarray, offsets: np.ndarray, pid: int, links: np.ndarray) -> np.ndarray:
    """``pool`` (doubled as often as needed) with ``links`` appended as path ``pid``'s, its end
    in ``offsets[pid + 1]``."""
    at = int(offsets[pid])
    while at + links.size > pool.size:
        pool = np.concatenate([pool, np.zeros(pool.size, dtype=np.int64)])
    pool[at:at + links.size] = links
    offsets[pid + 1] = at + links.size
    return pool


class FlowTable:
    """The active flows in slots (reused smallest first, grown by doubling): each one's bytes
    left, rate, size, path and transfer index, as rows of ``sf`` and ``si``
    (:mod:`simtrain.network.flow_layout`), with the live slots in ascending order, the classes of
    alike flows (:mod:`simtrain.network.flowclass`; ``group=False``: one flow each) and the path
    ids of the flows started and ended since the rates were last computed (rows of ``chg``); the
    counts sit in ``ist``, shared with the model."""

    def __init__(self, paths: PathTable, ist: np.ndarray | None = None, group: bool = True) -> None:
        n = 64
        self.path_table = paths
        self.ist = np.zeros(ISTATE, dtype=np.int64) if ist is None else ist
        self.ist[GROUP] = int(group)
        self.sf = np.zeros((SF_ROWS, n))
        self.si = np.zeros((SI_ROWS, n), dtype=np.int64)
        self.si[PIDX] = -1
        self.act = np.zeros(n, dtype=bool)
        self.chg = np.zeros((2, n), dtype=np.int64)
        self.key = np.zeros(2 * n, dtype=np.int64)  # scratch: a memo key
        self._pids, self._sizes = np.zeros(64, dtype=np.int64), np.zeros(64)  # scratch: the flows being placed

    rem = property(lambda self: self.synced()[REM], doc="Bytes left per slot.")
    rate = property(lambda self: self.synced()[RATE], doc="Rate per slot, B/s.")
    size = property(lambda self: self.sf[SIZE], doc="Size per slot, bytes.")
    active = property(lambda self: self.act, doc="Whether a slot holds a flow.")
    pidx = property(lambda self: self.si[PIDX], doc="Path id per slot (-1: free).")
    transfer = property(lambda self: self.si[TIX], doc="Transfer index per slot.")

    @property
    def paths(self) -> "SlotPaths":
        """Each slot's path (its link indices), None for a free slot."""
        return SlotPaths(self)

    def start(self, tix: int, pids: np.ndarray | Sequence[int], nbytes: np.ndarray | Sequence[float]) -> None:
        """Flows of transfer index ``tix``: ``nbytes[k]`` to carry along path ``pids[k]``, at rate
        0 until the next rate computation; slots as if started one by one, smallest free first."""
        k = len(pids)
        while self.act.size - int(self.ist[N_LIVE]) < k:
            self._grow()
        self._room(int(self.ist[N_STARTED]) + k)
        if k > self._pids.size:
            self._pids, self._sizes = np.zeros(2 * k, dtype=np.int64), np.zeros(2 * k)
        self._pids[:k], self._sizes[:k] = pids, nbytes  # (the same arrays at every call: passed as they are)
        CORE.place(self._pids, self._sizes, k, tix, self.sf, self.si, self.act, self.chg, self.path_table.phead, self.ist)

    def end(self, slots: np.ndarray) -> np.ndarray:
        """Free ``slots`` (ascending); the transfer index each one's flow belonged to."""
        tix: np.ndarray = self.si[TIX, slots].copy()
        CLASSES.drop(np.ascontiguousarray(slots, dtype=np.int64), self.si, self.path_table.phead, self.ist)
        ne = int(self.ist[N_ENDED])
        self._room(ne + slots.size)
        self.chg[ENDED, ne:ne + slots.size] = self.si[PIDX, slots]
        self.ist[N_ENDED] = ne + slots.size
        self.act[slots] = False
        self.sf[REM, slots] = 0.0
        self.sf[RATE, slots] = 0.0
        self.si[PIDX, slots] = -1
        self._relist()
        return tix

    def _room(self, changes: int) -> None:
        """Room for ``changes`` paths started (or ended) before the next recomputation: at most
        the slots when the model recomputes between, as many as asked when not."""
        while changes > self.chg.shape[1]:
            n = self.chg.shape[1]
            self.chg = np.concatenate([self.chg, np.zeros((2, n), dtype=np.int64)], axis=1)
            self.key = np.zeros(4 * n, dtype=np.int64)

    def _relist(self) -> None:
        live = np.flatnonzero(self.act)
        self.si[LIVE, :live.size] = live
        self.ist[N_LIVE] = self.ist[N_LISTED] = live.size

    def _grow(self) -> None:
        n = self.act.size
        self.sf = np.concatenate([self.sf, np.zeros((SF_ROWS, n))], axis=1)
        self.si = np.concatenate([self.si, np.zeros((SI_ROWS, n), dtype=np.int64)], axis=1)
        self.si[PIDX, n:] = -1
        self.act = np.concatenate([self.act, np.zeros(n, dtype=bool)])
        self._room(2 * n)

    def synced(self) -> np.ndarray:
        """``sf`` with each live flow's bytes left and rate written from its class (the compiled
        loop keeps them there) and the live slots compacted."""
        CLASSES.sync(self.sf, self.si, self.act, self.ist)
        return self.sf

    def live(self) -> np.ndarray:
        """The active slots, in order."""
        self.synced()
        return self.si[LIVE, :self.ist[N_LIVE]]

    def load(self, num_links: int) -> np.ndarray:
        """The summed rate of the active flows on each link, from scratch."""
        load = np.zeros(num_links)
        self.synced()
        arrays = self.path_table.arrays
        for s in np.flatnonzero(self.act):
            np.add.at(load, arrays[self.si[PIDX, s]], self.sf[RATE, s])
        return load


class SlotPaths:
    """The path of each slot of a :class:`FlowTable` (its link indices), None where free."""

    def __init__(self, table: FlowTable) -> None:
        self.table = table

    def __getitem__(self, slot: int) -> np.ndarray | None:
        p = int(self.table.si[PIDX, slot])
        return self.table.path_table.arrays[p] if p >= 0 else None
