"""Which flows a rate recomputation covers, and its result, memoised by the change that caused it.

After flows start or end, the rates are recomputed on the flows linked to the changed links
through shared links (transitively: the connected component, since max-min allocations decompose
over components), or on every active flow once that component holds more than half of the
flow-link pairs (:func:`component`). Both the set and the rates it gets are functions of the
active flows' paths (a multiset), the links then carrying traffic and the paths started and
ended since the last recomputation. :class:`Reshares` numbers each distinct (multiset, busy links)
state once; :class:`~simtrain.network.reshare_memo.ReshareMemo` keeps, per state and change, the
resulting state, the component and its rates, so a collective that recurs (the same all-to-all
every layer) repeats its recomputations by lookup.
The rates themselves come from progressive filling (:mod:`simtrain.network.maxmin`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from simtrain.network.flow_layout import HITS
from simtrain.network.flowtable import FlowTable
from simtrain.network.maxmin import MaxMinMemo


class LinkPaths:
    """The active paths on each link, brought up to date on demand from the flows' counts per
    path (:meth:`sync`): only the paths that became active or idle since the last call change."""

    def __init__(self, paths: list[frozenset[int]]) -> None:
        self.paths = paths
        self.on: dict[int, set[int]] = {}
        self._active = np.zeros(0, dtype=bool)

    def sync(self, counts: np.ndarray) -> None:
        """``counts[p]``: the active flows on path ``p`` now."""
        now = counts > 0
        before = np.zeros(now.size, dtype=bool)
        k = min(now.size, self._active.size)
        before[:k] = self._active[:k]
        gone = np.flatnonzero(self._active[k:]) + k
        for p in np.flatnonzero(now != before).tolist() + gone.tolist():
            on = self.on
            if p < now.size and now[p]:
                for link in self.paths[p]:
                    on.setdefault(link, set()).add(p)
            else:
                for link in self.paths[p]:
                    on[link].discard(p)
        self._active = now


def component(counts: np.ndarray, pairs: int, dirty: set[int], on: dict[int, set[int]],
              paths: list[frozenset[int]], sizes: list[int]) -> tuple[list[int], list[int]] | None:
    """The component of the links ``dirty``: the active paths (``counts[p]`` flows on path ``p``,
    ``on[link]`` the active paths on a link) reachable from them through shared links, sorted, and
    the links visited, sorted; None when those paths carry more than half of the ``pairs``
    flow-link pairs of all active flows (``sizes``: links per path)."""
    budget = pairs // 2
    seen_links, found = set(dirty), set()
    stack = list(seen_links)
    visited = 0
    while stack:  # the result does not depend on the order of the search
        for p in on.get(stack.pop(), ()):
            if p in found:
                continue
            found.add(p)
            visited += int(counts[p]) * sizes[p]
            if visited > budget:
                return None
            fresh = paths[p] - seen_links
            seen_links |= fresh
            stack.extend(fresh)
    return sorted(found), sorted(seen_links)


@dataclass(frozen=True)
class Reshare:
    """One recomputation: the state after it; ``paths`` (sorted path ids, None: every active
    flow) and ``rates`` (each one's rate, in the order of ``rate_paths``) select and price the
    flows; the ``zeroed`` links (of the component's, or of those busy before, the ones not
    priced) drop to 0 and ``used`` get ``link_rates`` (their utilisations, rate over capacity,
    with them: a link's peak is the largest); ``busy``: the links with traffic after it."""

    node: int
    paths: np.ndarray | None
    rate_paths: np.ndarray | None
    rates: np.ndarray | None
    used: np.ndarray | None
    link_rates: np.ndarray | None
    busy: np.ndarray
    zeroed: np.ndarray
    utilisations: np.ndarray | None = None

    @property
    def size(self) -> int:
        """Numbers held, for the memo's bound."""
        return sum(a.size for a in (self.paths, self.rate_paths, self.rates, self.used, self.link_rates, self.busy,
                                    self.zeroed, self.utilisations) if a is not None)


class Reshares:
    """Recomputations from scratch (:meth:`compute`) and the numbering of the states they lead to
    (:meth:`node`); the memo of them by (state, paths started, paths ended) is
    :class:`~simtrain.network.reshare_memo.ReshareMemo`, which ``limit`` bounds (the numbers it and
    the state numbering hold: both are cleared when full; 0: no memo). :attr:`hits` counts the
    recomputations applied from the memo without being computed again."""

    def __init__(self, max_min: MaxMinMemo, paths: list[frozenset[int]], ist: np.ndarray,
                 limit: int = 4_000_000) -> None:
        self.max_min = max_min
        self.limit = limit
        self.link_paths = LinkPaths(paths)
        self.ist = ist
        self._nodes: dict[tuple[bytes, bytes, bytes], int] = {}
        self.held = 0
        self._next_node = 0
        self.misses = 0

    @property
    def hits(self) -> int:
        return int(self.ist[HITS]) - self.misses

    def node(self, counts: np.ndarray, busy: np.ndarray) -> int:
        """The number of the state: the active flows' paths with their multiplicities, ``busy``."""
        nz = np.flatnonzero(counts)
        key = (nz.astype(np.int32).tobytes(), counts[nz].astype(np.int32).tobytes(),
               busy.astype(np.int32).tobytes())
        n = self._nodes.get(key)
        if n is None:  # never a number handed out before, even after the memo was cleared
            n = self._nodes[key] = self._next_node
            self._next_node += 1
            self.held += 2 * nz.size + busy.size
        return n

    def forget(self) -> None:
        """Clear the state numbering (numbers already handed out are not reused: see node())."""
        self._nodes.clear()
        self.held = 0

    def compute(self, flows: FlowTable, busy: np.ndarray, changed: Iterable[int]) -> Reshare:
        """The recomputation from scratch, on the flows of :func:`component`."""
        table = flows.path_table
        live = flows.live()
        pid_live = flows.pidx[live]
        counts = np.bincount(pid_live, minlength=len(table.sizes))
        self.link_paths.sync(counts)
        sizes = table.sizes
        pairs = sum(sizes[p] for p in pid_live.tolist())
        dirty: set[int] = set()
        for p in changed:
            dirty |= table.sets[p]
        found = component(counts, pairs, dirty, self.link_paths.on, table.sets, sizes)
        if found is None:
            slots, touched, comp = live, None, None
        else:
            comp = np.asarray(found[0], dtype=np.int64)
            slots = live[_member(comp, pid_live)]
            touched = np.asarray(found[1], dtype=np.int64)
        hit = busy if touched is None else touched
        rest = busy[:0] if touched is None else busy[~_member(touched, busy)]
        if slots.size == 0:
            return Reshare(self.node(counts, rest), comp, None, None, None, None, rest, hit)
        pids = flows.pidx[slots]
        rates, used, link_rates = self.max_min.rates([table.arrays[p] for p in pids.tolist()], pids)
        rate_paths, first = np.unique(pids, return_index=True)  # a path's flows share one rate
        new_busy = np.sort(np.concatenate((rest, used[link_rates > 0])))  # disjoint: used lies in touched
        return Reshare(self.node(counts, new_busy), comp, rate_paths, rates[first], used, link_rates, new_busy,
                       hit[~_member(used, hit)], link_rates / self.max_min.capacity[used])


def _member(ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``numpy.isin(values, ids)`` for non-negative integers: a table of flags as long as the
    largest of either (a recomputation asks twice, on tens of values, where ``isin`` sorts)."""
    if not values.size:
        return np.zeros(0, dtype=bool)
    flags = np.zeros(max(int(ids.max(initial=-1)), int(values.max())) + 1, dtype=bool)
    flags[ids] = True
    picked: np.ndarray = flags[values]
    return picked
