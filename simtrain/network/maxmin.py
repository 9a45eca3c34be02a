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


class MaxMinMemo:
    """Max-min fair rates of a set of paths on links of bandwidth ``capacity``, memoised by the
    set: the same set (a TP ring alone on its links, say) recurs thousands of times, and its
    solution depends only on the paths. A path is an id into pools of links: path ``p`` crosses
    ``pa[pao[p]:pao[p + 1]]``, in order (:class:`~simtrain.network.flowtable.PathTable`'s pools)."""

    def __init__(self, capacity: np.ndarray) -> None:
        self.capacity = capacity
        self._memo: dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # sorted path ids
        links = capacity.size
        self._per_link = [np.zeros(links, dtype=np.int64) for _ in range(3)] + [np.zeros(links) for _ in range(4)]
        self._mark = np.zeros(links, dtype=bool)
        self._per_pair = [np.zeros(0, dtype=np.int64) for _ in range(4)]
        self._rate, self._frozen = np.zeros(0), np.zeros(0, dtype=bool)

    def rates(self, pids: np.ndarray, pa: np.ndarray, pao: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rate of a flow on each path of ``pids`` (in the order given), the links used
        (ascending), each used link's load (summed over the flows in the order of their path
        ids)."""
        pids = np.asarray(pids, dtype=np.int64)
        order = np.argsort(pids, kind="stable")
        ordered = pids[order]
        key = ordered.tobytes()
        hit = self._memo.get(key)
        if hit is None:
            hit = self._filled(ordered, pa, pao)
            if len(self._memo) > 50_000:
                self._memo.clear()
            self._memo[key] = hit
        sorted_rates, used, link_rates = hit
        rates = np.empty(len(order))
        rates[order] = sorted_rates
        return rates, used, link_rates

    def _filled(self, ordered: np.ndarray, pa: np.ndarray, pao: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:func:`~simtrain.network.maxmin_fill.fill_paths` of flows on the paths ``ordered``
        (its scratch arrays kept between calls, grown as needed): the flows' rates, the links
        used, their loads."""
        from simtrain.network.flow_kernels import FILL  # compiled: loaded with the flow model

        n = ordered.size
        pairs = int((pao[ordered + 1] - pao[ordered]).sum())
        if self._per_pair[0].size < pairs:
            self._per_pair = [np.zeros(2 * pairs, dtype=np.int64) for _ in range(4)]
        if self._rate.size < n:
            self._rate, self._frozen = np.zeros(2 * n), np.zeros(2 * n, dtype=bool)
        pos, count, used, cap_used, load, share, link_rates = self._per_link
        u = FILL.fill_paths(ordered, pa, pao, self.capacity, *self._per_pair, self._mark, pos, cap_used, self._rate,
                            self._frozen, load, count, share, used, link_rates)
        return self._rate[:n].copy(), used[:u].copy(), link_rates[:u].copy()

