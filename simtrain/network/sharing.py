"""Which flows a rate recomputation covers, and its result, memoised by the change that caused it.

After flows start or end, the rates are recomputed on the flows linked to the changed links
through shared links (transitively: the connected component, since max-min allocations decompose
over components), or on every active flow once that component holds more than half of the
flow-link pairs (:class:`ComponentSearch`, compiled: :mod:`simtrain.network.flowcomponent`).
Both the set and the rates it gets are functions of the active flows' paths (a multiset), the
links then carrying traffic and the paths started and ended since the last recomputation.
:class:`Reshares` numbers each distinct (multiset, busy links) state once;
:class:`~simtrain.network.reshare_memo.ReshareMemo` keeps, per state and change, the resulting
state, the component and its rates, so a collective that recurs (the same all-to-all every layer)
repeats its recomputations by lookup.
The rates themselves come from progressive filling (:mod:`simtrain.network.maxmin`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simtrain.network.flow_layout import HITS
from simtrain.network.flow_kernels import COMPONENT
from simtrain.network.flowtable import FlowTable, PathTable
from simtrain.network.maxmin import MaxMinMemo


class ComponentSearch:
    """:func:`~simtrain.network.flowcomponent.component` with its scratch arrays, kept between
    calls (and grown with the paths) so that its machine code is handed the same arrays."""

    def __init__(self, num_links: int) -> None:
        self._per_link = [np.zeros(num_links, dtype=np.int64) for _ in range(6)]
        self._lseen = np.zeros(num_links, dtype=bool)
        self._out = np.zeros(1, dtype=np.int64)
        self._lpaths = self._found = np.zeros(0, dtype=np.int64)
        self._pseen = np.zeros(0, dtype=bool)

    def __call__(self, active: np.ndarray, counts: np.ndarray, table: PathTable, changed: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray] | None:
        """The paths and links of the component of the links of the ``changed`` paths (ids,
        ascending), with ``counts[p]`` flows on path ``p`` of ``table`` (``active``: the paths
        with flows); None where it holds more than half of the active flow-link pairs."""
        if self._found.size < counts.size:
            self._found = np.zeros(table.puo.size, dtype=np.int64)
            self._pseen = np.zeros(table.puo.size, dtype=bool)
        if self._lpaths.size < table.pu.size:
            self._lpaths = np.zeros(table.pu.size, dtype=np.int64)
        lcount, lstart, lfill, touched, stack, links = self._per_link
        n = COMPONENT.component(active, counts, table.psize, table.pu, table.puo, changed, lcount,
                                lstart, lfill, self._lpaths, touched, self._pseen, self._lseen, stack, self._found,
                                links, self._out)
        if n < 0:
            return None
        return np.sort(self._found[:n]), np.sort(links[:int(self._out[0])])


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

    def __init__(self, max_min: MaxMinMemo, ist: np.ndarray, limit: int = 4_000_000) -> None:
        self.max_min = max_min
        self.limit = limit
        self.component = ComponentSearch(max_min.capacity.size)
        self._flags = np.zeros(0, dtype=bool)  # scratch of _member: all False between calls
        self.ist = ist
        self._nodes: dict[tuple[bytes, bytes, bytes], int] = {}
        self.held = 0
        self._next_node = 0
        self.misses = 0

    @property
    def hits(self) -> int:
        return int(self.ist[HITS]) - self.misses

    def node(self, counts: np.ndarray, busy: np.ndarray, active: np.ndarray | None = None) -> int:
        """The number of the state: the active flows' paths with their multiplicities, ``busy``
        (``active``: the paths with flows, ``np.flatnonzero(counts)``, where known)."""
        nz = np.flatnonzero(counts) if active is None else active
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

    def compute(self, flows: FlowTable, busy: np.ndarray, changed: np.ndarray) -> Reshare:
        """The recomputation from scratch, on the flows of the component of the ``changed``
        paths' links (:class:`ComponentSearch`)."""
        table = flows.path_table
        live = flows.live()
        pid_live = flows.pidx[live]
        counts = np.bincount(pid_live, minlength=len(table))
        active = np.flatnonzero(counts)
        found = self.component(active, counts, table, changed)
        member = self._member
        if found is None:
            slots, touched, comp = live, None, None
        else:
            comp, touched = found
            slots = live[member(comp, pid_live)]
        hit = busy if touched is None else touched
        rest = busy[:0] if touched is None else busy[~member(touched, busy)]
        if slots.size == 0:
            return Reshare(self.node(counts, rest, active), comp, None, None, None, None, rest, hit)
        pids = flows.pidx[slots]
        rates, used, link_rates = self.max_min.rates(pids, table.pa, table.pao)
        rate_paths, first = np.unique(pids, return_index=True)  # a path's flows share one rate
        new_busy = np.sort(np.concatenate((rest, used[link_rates > 0])))  # disjoint: used lies in touched
        return Reshare(self.node(counts, new_busy, active), comp, rate_paths, rates[first], used, link_rates,
                       new_busy, hit[~member(used, hit)], link_rates / self.max_min.capacity[used])

    def _member(self, ids: np.ndarray, values: np.ndarray) -> np.ndarray:
        """``numpy.isin(values, ids)`` for non-negative integers (path or link ids): a table of
        flags kept between calls (grown to the largest id asked, and cleared again after), so
        that a call costs in proportion to its own values, where ``isin`` sorts."""
        if not values.size:
            return np.zeros(0, dtype=bool)
        top = max(int(ids.max(initial=-1)), int(values.max())) + 1
        if self._flags.size < top:
            self._flags = np.zeros(2 * top, dtype=bool)
        flags = self._flags
        flags[ids] = True
        picked: np.ndarray = flags[values]
        flags[ids] = False
        return picked
