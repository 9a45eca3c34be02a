"""Max-min fair rates of flows on links by progressive filling, and their memo by flow set.

Progressive filling (water-filling): raise every unfrozen flow's rate together until some link
saturates, freeze the flows crossing it, repeat (Bertsekas and Gallager, "Data Networks", 2nd
ed. 1992, section 6.5.2). :mod:`simtrain.network.solver` runs flows with these rates.
"""

from __future__ import annotations

import numpy as np

REL_TOL = 1e-9  # relative slack for "this flow is done" and for the capacity invariant


def max_min_rates(pair_flow: np.ndarray, pair_link: np.ndarray, capacity: np.ndarray,
                  num_flows: int) -> np.ndarray:
    """Max-min fair rates by progressive filling. ``pair_flow[i]`` crosses link ``pair_link[i]``
    (indices into ``range(num_flows)`` and ``capacity``); every flow must cross >= 1 link.

    Each round all unfrozen flows share one rate, the level; a link saturates when level *
    (unfrozen flows on it) reaches its capacity left by frozen flows; the smallest such level wins
    and the flows on the links reaching it (within REL_TOL, rounding down) freeze there.
    """
    nlinks = capacity.shape[0]
    rate = np.zeros(num_flows)
    frozen = np.zeros(num_flows, dtype=bool)
    load = np.zeros(nlinks)
    pf, pl = pair_flow, pair_link
    while pf.size:
        count = np.bincount(pl, minlength=nlinks)
        used = count > 0
        share = np.full(nlinks, np.inf)
        share[used] = np.maximum(capacity[used] - load[used], 0.0) / count[used]
        level = share.min()
        saturated = share <= level * (1 + REL_TOL)
        newly = pf[saturated[pl]]
        rate[newly] = level
        frozen[newly] = True
        gone = frozen[pf]
        load += level * np.bincount(pl[gone], minlength=nlinks)
        pf, pl = pf[~gone], pl[~gone]
    return rate


def filled_rates(pair_flow: np.ndarray, pair_link: np.ndarray, capacity: np.ndarray, num_flows: int) -> np.ndarray:
    """:func:`max_min_rates` by its compiled rounds (:mod:`simtrain.network.maxmin_fill`): the same
    rates, bit for bit."""
    from simtrain.network.flow_kernels import FILL  # compiled: loaded with the flow model

    links = capacity.size
    rate = np.zeros(num_flows)
    FILL.fill(pair_flow.astype(np.int64), pair_link.astype(np.int64), np.ascontiguousarray(capacity, dtype=np.float64), rate,
              np.zeros(num_flows, dtype=bool), np.zeros(links), np.zeros(links, dtype=np.int64), np.empty(links))
    return rate


class MaxMinMemo:
    """Max-min fair rates of a set of paths on links of bandwidth ``capacity``, memoised by the
    set: the same set (a TP ring alone on its links, say) recurs thousands of times, and its
    solution depends only on the paths. Paths must be interned (one array per distinct path)."""

    def __init__(self, capacity: np.ndarray) -> None:
        self.capacity = capacity
        self._memo: dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # sorted path ids

    def rates(self, paths: list[np.ndarray], keys: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rate of each path (in the order given), the links used, each used link's load
        (summed over the paths in the order of their ``keys``: one integer per distinct path,
        by default its array's ``id``)."""
        pids = (np.fromiter(map(id, paths), dtype=np.int64, count=len(paths)) if keys is None
                else np.asarray(keys, dtype=np.int64))
        order = np.argsort(pids, kind="stable")
        key = pids[order].tobytes()
        hit = self._memo.get(key)
        if hit is None:
            ordered = [paths[i] for i in order.tolist()]
            lens = np.fromiter((p.size for p in ordered), dtype=np.int64, count=len(ordered))
            pair_link = np.concatenate(ordered)
            pair_flow = np.repeat(np.arange(len(ordered)), lens)
            used, local = np.unique(pair_link, return_inverse=True)
            sorted_rates = filled_rates(pair_flow, local, self.capacity[used], len(ordered))
            link_rates = np.bincount(local, weights=sorted_rates[pair_flow], minlength=used.size)
            if len(self._memo) > 50_000:
                self._memo.clear()
            hit = self._memo[key] = (sorted_rates, used, link_rates)
        sorted_rates, used, link_rates = hit
        rates = np.empty(len(order))
        rates[order] = sorted_rates
        return rates, used, link_rates
