"""The active flows of a :class:`~simtrain.network.solver.FlowModel`, in slots of numpy arrays.

Flows start and end in batches (a transfer's flows at once, the flows done at one instant at once)
with the same slot assignment and the same float sums as one flow at a time: slots are taken
smallest free first, in the order the flows are given, and a batch of ends books its bytes link by
link in slot order (``numpy.add.at`` adds in index order, unbuffered). Paths are interned by the
model (:class:`PathTable`): one id and one array per distinct path.
"""

from __future__ import annotations

from typing import Iterable, Sequence, cast

import numpy as np

from simtrain.network.links import Link

#: A transfer's flows as :meth:`PathTable.batch` gives them: every size, the sizes of the flows
#: without links or bytes, the path ids and the sizes of the others.
Batch = tuple[list[float], list[float], list[int], list[float]]


class PathTable:
    """Distinct paths as ids: each one's link indices (in path order), the same links once each
    (for adding bytes, where a repeated link counts once) and as a set (for searches)."""

    def __init__(self, index: dict[Link, int]) -> None:
        self.index = index
        self.ids: dict[tuple[Link, ...], int] = {}
        self.arrays: list[np.ndarray] = []
        self.unique: list[np.ndarray] = []
        self.sets: list[frozenset[int]] = []
        self.sizes: list[int] = []
        self._batches: dict[int, tuple[object, Batch]] = {}  # id of a flow tuple -> it, its batch

    def batch(self, tid: int, flows: Iterable[tuple[Sequence[Link], float]]) -> Batch:
        """The flows ``(links, bytes)`` of transfer ``tid`` as (every size, the sizes of flows
        without links or bytes, the path ids and sizes of the others), kept per flow tuple: a
        phase's flows recur."""
        known = self._batches.get(id(flows)) if isinstance(flows, tuple) else None
        if known is not None and known[0] is flows:  # the tuple is kept, so its id stays its own
            return known[1]
        specs = [(links, float(nbytes)) for links, nbytes in flows]
        if any(not b >= 0 for _, b in specs):
            raise ValueError(f"transfer {tid}: flow sizes must be >= 0")
        moving = [(links, b) for links, b in specs if b != 0 and links]
        out = ([b for _, b in specs], [b for links, b in specs if b == 0 or not links],
               [self.intern(links) for links, _ in moving], [b for _, b in moving])
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
            self.unique.append(np.unique(arr))
            self.sets.append(frozenset(arr.tolist()))
            self.sizes.append(int(arr.size))
        return pid


class FlowTable:
    """The active flows in slots (reused smallest first, grown by doubling): each one's bytes
    left, rate, size, path (its id and array) and transfer; and the path ids of the flows started
    and ended since the rates were last computed (:attr:`started`, :attr:`ended`)."""

    def __init__(self, paths: PathTable) -> None:
        n = 64
        self.path_table = paths
        self.rem, self.rate, self.size = np.zeros(n), np.zeros(n), np.zeros(n)
        self.active = np.zeros(n, dtype=bool)
        self.pidx = np.full(n, -1, dtype=np.int64)
        self.transfer = np.full(n, -1, dtype=np.int64)
        self.paths: list[np.ndarray | None] = [None] * n
        self.started: list[int] = []
        self.ended: list[int] = []
        self._live: np.ndarray | None = None  # the active slots, None when they changed
        self._first_end: float | None = None  # time_to_first_end(), None when it may have changed

    def start(self, tid: int, pids: Sequence[int], nbytes: Sequence[float]) -> None:
        """Flows of transfer ``tid``: ``nbytes[k]`` to carry along path ``pids[k]``, at rate 0
        until the next rate computation; slots as if started one by one, smallest free first."""
        k = len(pids)
        free = np.flatnonzero(~self.active)
        while free.size < k:
            self._grow()
            free = np.flatnonzero(~self.active)
        slots = free[:k]
        sizes = np.asarray(nbytes, dtype=float)
        self.rem[slots] = sizes
        self.size[slots] = sizes
        self.rate[slots] = 0.0
        self.active[slots] = True
        self.pidx[slots] = pids
        self.transfer[slots] = tid
        arrays = self.path_table.arrays
        paths = self.paths
        for s, p in zip(slots.tolist(), pids):
            paths[s] = arrays[p]
        self.started.extend(pids)
        self._live = None
        self._first_end = None

    def end(self, slots: np.ndarray) -> np.ndarray:
        """Free ``slots``; the transfer each one's flow belonged to."""
        tids: np.ndarray = self.transfer[slots]
        self.active[slots] = False
        self.rem[slots] = 0.0
        self.rate[slots] = 0.0
        self.ended.extend(self.pidx[slots].tolist())
        self.pidx[slots] = -1
        paths = self.paths
        for s in slots.tolist():
            paths[s] = None
        self._live = None
        self._first_end = None
        return tids

    def changed(self) -> bool:
        """Whether flows started or ended since the rates were last computed."""
        return bool(self.started or self.ended)

    def _grow(self) -> None:
        n = self.active.size
        self.rem, self.rate, self.size = (np.concatenate([a, np.zeros(n)])
                                          for a in (self.rem, self.rate, self.size))
        self.active = np.concatenate([self.active, np.zeros(n, dtype=bool)])
        self.pidx = np.concatenate([self.pidx, np.full(n, -1, dtype=np.int64)])
        self.transfer = np.concatenate([self.transfer, np.full(n, -1, dtype=np.int64)])
        self.paths += [None] * n

    def live(self) -> np.ndarray:
        """The active slots, in order (kept until a flow starts or ends)."""
        if self._live is None:
            self._live = np.flatnonzero(self.active)
        return self._live

    def moved(self) -> None:
        """The flows' bytes left or rates changed."""
        self._first_end = None

    def time_to_first_end(self) -> float:
        """Seconds until the first flow delivers its last byte at current rates (inf: never);
        kept until flows start, end or move (:meth:`moved`)."""
        if self._first_end is None:
            live = self.live()
            live = live[self.rate[live] > 0]
            self._first_end = float(np.min(self.rem[live] / self.rate[live])) if live.size else np.inf
        return self._first_end

    def load(self, num_links: int) -> np.ndarray:
        """The summed rate of the active flows on each link, from scratch."""
        load = np.zeros(num_links)
        for s in np.flatnonzero(self.active):
            np.add.at(load, cast(np.ndarray, self.paths[s]), self.rate[s])  # an active slot has a path
        return load
