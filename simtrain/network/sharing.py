"""Which flows a rate recomputation covers, and its result, memoised by the change that caused it.

After flows start or end, the rates are recomputed on the flows linked to the changed links
through shared links (transitively: the connected component, since max-min allocations decompose
over components), or on every active flow once that component holds more than half of the
flow-link pairs (:func:`component`). Both the set and the rates it gets are functions of the
active flows' paths (a multiset), the links then carrying traffic and the paths started and
ended since the last recomputation. :class:`Reshares` numbers each distinct (multiset, busy links)
state once and keeps, per state and change, the resulting state, the component and its rates, so
a collective that recurs (the same all-to-all every layer) repeats its recomputations by lookup.
The rates themselves come from progressive filling (:mod:`simtrain.network.maxmin`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from simtrain.network.flowtable import FlowTable
from simtrain.network.maxmin import MaxMinMemo


def component(active: dict[int, int], dirty: set[int], paths: list[frozenset[int]],
              sizes: list[int]) -> tuple[list[int], list[int]] | None:
    """The component of the links ``dirty``: the active paths (id -> flows on it) reachable from
    them through shared links, sorted, and the links visited, sorted; None when those paths carry
    more than half of all flow-link pairs (``sizes``: links per path)."""
    budget = sum(n * sizes[p] for p, n in active.items()) // 2
    link_paths: dict[int, list[int]] = {}
    for p in active:
        for link in paths[p]:
            link_paths.setdefault(link, []).append(p)
    seen_links, found = set(dirty), set()
    stack = list(seen_links)
    visited = 0
    while stack:  # the result does not depend on the order of the search
        for p in link_paths.get(stack.pop(), ()):
            if p in found:
                continue
            found.add(p)
            visited += active[p] * sizes[p]
            if visited > budget:
                return None
            fresh = paths[p] - seen_links
            seen_links |= fresh
            stack.extend(fresh)
    return sorted(found), sorted(seen_links)


@dataclass(frozen=True)
class Reshare:
    """One recomputation: the state after it; ``member`` (a mask over path ids, None: every active
    flow) and ``rate_of`` (each path's rate) select and price the flows; ``touched`` links (None:
    those busy before) drop to 0, then ``used`` get ``link_rates``; ``busy`` and ``both`` (the
    links whose rates are remembered) as the model keeps them."""

    node: int
    member: np.ndarray | None
    rate_of: np.ndarray | None
    touched: np.ndarray | None
    used: np.ndarray | None
    link_rates: np.ndarray | None
    busy: np.ndarray
    both: np.ndarray


class Reshares:
    """Recomputations memoised by (state, paths started, paths ended); see the module docstring.
    ``limit`` bounds the memo (it is cleared when full; 0: no memo)."""

    def __init__(self, max_min: MaxMinMemo, limit: int = 20_000) -> None:
        self.max_min = max_min
        self.limit = limit
        self._nodes: dict[tuple[bytes, bytes, bytes], int] = {}
        self._memo: dict[tuple[int, tuple[int, ...], tuple[int, ...]], Reshare] = {}
        self.hits = self.misses = 0

    def node(self, flows: FlowTable, busy: np.ndarray) -> int:
        """The number of the state: the active flows' paths with their multiplicities, ``busy``."""
        counts = np.bincount(flows.pidx[flows.live()])
        nz = np.flatnonzero(counts)
        key = (nz.tobytes(), counts[nz].tobytes(), busy.tobytes())
        return self._nodes.setdefault(key, len(self._nodes))

    def get(self, node: int, flows: FlowTable, busy: np.ndarray) -> Reshare:
        """The recomputation after the changes recorded in ``flows`` from state ``node``."""
        key = (node, tuple(sorted(flows.started)), tuple(sorted(flows.ended)))
        hit = self._memo.get(key)
        if hit is not None:
            self.hits += 1
            return hit
        self.misses += 1
        out = self.compute(flows, busy, set(key[1]) | set(key[2]))
        if len(self._memo) >= self.limit:
            self._memo.clear()
        if self.limit > 0:
            self._memo[key] = out
        return out

    def compute(self, flows: FlowTable, busy: np.ndarray, changed: Iterable[int]) -> Reshare:
        """The recomputation from scratch, on the flows of :func:`component`."""
        table = flows.path_table
        live = flows.live()
        pid_live = flows.pidx[live]
        counts = np.bincount(pid_live)
        active = {int(p): int(counts[p]) for p in np.flatnonzero(counts)}
        dirty: set[int] = set()
        for p in changed:
            dirty |= table.sets[p]
        found = component(active, dirty, table.sets, table.sizes)
        if found is None:
            slots, touched = live, None
            member = None
        else:
            member = np.zeros(counts.size, dtype=bool)
            member[found[0]] = True
            slots = live[member[pid_live]]
            touched = np.asarray(found[1], dtype=np.int64)
        hit = busy if touched is None else touched
        rest = busy[:0] if touched is None else busy[~np.isin(busy, touched)]
        if slots.size == 0:
            return Reshare(self.node(flows, rest), member, None, touched, None, None, rest, hit)
        rates, used, link_rates = self.max_min.rates([flows.paths[s] for s in slots.tolist()],
                                                       flows.pidx[slots])
        rate_of = np.zeros(counts.size)
        rate_of[flows.pidx[slots]] = rates  # a path's flows share one rate
        new_busy = np.sort(np.concatenate((rest, used[link_rates > 0])))  # disjoint: used lies in touched
        both = touched if touched is not None else np.union1d(hit, used)
        return Reshare(self.node(flows, new_busy), member, rate_of, touched, used, link_rates,
                       new_busy, both)
