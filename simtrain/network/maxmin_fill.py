"""Progressive filling compiled: :func:`simtrain.network.maxmin.max_min_rates`'s rounds in one
pass each over the flow-link pairs, with its floating-point operations (numba; called through
its saved machine code, :data:`simtrain.network.flow_kernels.FILL`).

The flow model recomputes the rates of a connected component from scratch wherever its memo of
recomputations misses (a few hundred times a run, each over hundreds of flows): NumPy's rounds
make a dozen small arrays each, this loop none.
"""

from __future__ import annotations

import numpy as np

from simtrain.network.flow_jit import compiled
from simtrain.network.flowheap import sort
from simtrain.network.maxmin import REL_TOL


@compiled
def fill_paths(order: np.ndarray, pa: np.ndarray, pao: np.ndarray, capacity: np.ndarray, flow_of: np.ndarray,
               local: np.ndarray, pf: np.ndarray, pl: np.ndarray, mark: np.ndarray, pos: np.ndarray,
               cap_used: np.ndarray, rate: np.ndarray, frozen: np.ndarray, load: np.ndarray, count: np.ndarray,
               share: np.ndarray, used: np.ndarray, link_rates: np.ndarray) -> int:
    """Max-min fair rates of flows on paths, as :class:`~simtrain.network.maxmin.MaxMinMemo`
    computes them with NumPy: flow ``k`` crosses the links ``pa[pao[p]:pao[p + 1]]`` of path
    ``p = order[k]``; the pairs are listed flow by flow, the links used numbered ascending
    (``np.unique``'s numbering), filled (:func:`fill`), and each link's flows' rates summed in
    the pairs' order (``np.bincount``'s). Returns how many links are used: ``used[:u]`` (link
    ids, ascending), ``link_rates[:u]``; ``rate[:n]`` the flows' rates. The other arrays are
    scratch: ``flow_of``, ``local``, ``pf`` and ``pl`` per pair, ``mark``, ``pos``, ``cap_used``,
    ``load``, ``count`` and ``share`` per link (``mark`` all False, and left so), ``frozen`` per
    flow. The work is in proportion to the pairs, not to every link of the cluster."""
    n = order.size
    m = 0
    for k in range(n):
        p = order[k]
        for i in range(pao[p], pao[p + 1]):
            flow_of[m] = k
            local[m] = pa[i]
            m += 1
    u = 0
    for i in range(m):
        if not mark[local[i]]:
            mark[local[i]] = True
            used[u] = local[i]
            u += 1
    sort(used, u)
    for j in range(u):
        mark[used[j]] = False
        pos[used[j]] = j
        cap_used[j] = capacity[used[j]]
    for i in range(m):
        local[i] = pos[local[i]]
        pf[i] = flow_of[i]
        pl[i] = local[i]
    for k in range(n):
        rate[k] = 0.0
        frozen[k] = False
    for j in range(u):
        load[j] = 0.0
        link_rates[j] = 0.0
    fill(pf, pl, m, cap_used, u, rate, frozen, load, count, share)
    for i in range(m):
        link_rates[local[i]] += rate[flow_of[i]]
    return u


@compiled
def fill(pf: np.ndarray, pl: np.ndarray, n: int, capacity: np.ndarray, links: int, rate: np.ndarray,
         frozen: np.ndarray, load: np.ndarray, count: np.ndarray, share: np.ndarray) -> None:
    """Max-min fair ``rate`` of each flow (zeros in, with ``frozen`` all False and ``load`` zero)
    where pair ``i < n`` puts flow ``pf[i]`` on link ``pl[i] < links`` (both overwritten: the
    pairs left each round); ``count`` and ``share`` are scratch per link. Each round: every
    link's share, its capacity left over its unfrozen flows (``np.maximum(left, 0.0) / count``),
    the level (the smallest share), the flows on the links within ``REL_TOL`` of it frozen
    there, and their links' load raised by the level times the flows frozen on each, as
    :func:`~simtrain.network.maxmin.max_min_rates` does it."""
    while n > 0:
        for j in range(links):
            count[j] = 0
        for i in range(n):
            count[pl[i]] += 1
        level = np.inf
        for j in range(links):
            if count[j] > 0:
                left = capacity[j] - load[j]
                if left <= 0.0:  # (NaN stays NaN, -0.0 becomes 0.0: np.maximum's result)
                    left = 0.0
                share[j] = left / count[j]
                if share[j] < level:
                    level = share[j]
            else:
                share[j] = np.inf
        bound = level * (1 + REL_TOL)
        for i in range(n):
            if share[pl[i]] <= bound:
                rate[pf[i]] = level
                frozen[pf[i]] = True
        for j in range(links):
            count[j] = 0
        kept = 0
        for i in range(n):
            if frozen[pf[i]]:
                count[pl[i]] += 1
            else:
                pf[kept], pl[kept] = pf[i], pl[i]
                kept += 1
        for j in range(links):
            if count[j] > 0:
                load[j] += level * count[j]
        n = kept
