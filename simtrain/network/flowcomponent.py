"""The connected component a rate recomputation covers, compiled (numba; called through its saved
machine code, :data:`simtrain.network.flow_kernels.COMPONENT`).

Max-min allocations decompose over the connected components of the graph of active paths and
the links they share, so a recomputation after flows start or end prices only the paths linked
to the changed paths' links through shared links, transitively (:mod:`simtrain.network.sharing`).
:func:`component` indexes the active paths by link (a counting sort over the paths' distinct
links, each link's paths in ascending order), then searches from the changed paths' links. Its
result does not depend on the order of the search: every path and link reachable, listed
ascending, or none where the component carries more than half of the active flow-link pairs (a
recomputation of every active flow is then as cheap).
"""

from __future__ import annotations

import numpy as np

from simtrain.network.flow_jit import compiled


@compiled
def component(counts: np.ndarray, psize: np.ndarray, pu: np.ndarray, puo: np.ndarray, changed: np.ndarray,
              lstart: np.ndarray, lpaths: np.ndarray, lfill: np.ndarray, pseen: np.ndarray, lseen: np.ndarray,
              stack: np.ndarray, found: np.ndarray, links: np.ndarray, out: np.ndarray) -> int:
    """The component of the links of the ``changed`` paths: the active paths (``counts[p]`` flows
    on path ``p``, of ``psize[p]`` links each; ``pu[puo[p]:puo[p + 1]]`` its distinct links)
    reachable from those links through shared links, ascending in ``found`` (how many: the
    return value), and the links visited, ascending in ``links`` (how many: ``out[0]``); -1
    where those paths carry more than half of the flow-link pairs of all active flows (each
    flow's ``psize``). ``lstart`` (one more than the links), ``lfill``, ``lseen``, ``stack``
    (one per link), ``lpaths`` (as long as ``pu``) and ``pseen`` (one per path) are scratch."""
    num_paths = counts.size
    num_links = lfill.size
    pairs = 0
    for j in range(num_links + 1):
        lstart[j] = 0
    for p in range(num_paths):
        if counts[p] > 0:
            pairs += counts[p] * psize[p]
            for k in range(puo[p], puo[p + 1]):
                lstart[pu[k] + 1] += 1
    for j in range(num_links):
        lstart[j + 1] += lstart[j]
        lfill[j] = lstart[j]
        lseen[j] = False
    for p in range(num_paths):
        pseen[p] = False
        if counts[p] > 0:
            for k in range(puo[p], puo[p + 1]):
                link = pu[k]
                lpaths[lfill[link]] = p
                lfill[link] += 1
    top = 0
    for c in range(changed.size):
        p = changed[c]
        for k in range(puo[p], puo[p + 1]):
            link = pu[k]
            if not lseen[link]:
                lseen[link] = True
                stack[top] = link
                top += 1
    budget = pairs // 2
    visited = 0
    while top > 0:
        top -= 1
        link = stack[top]
        for k in range(lstart[link], lstart[link + 1]):
            p = lpaths[k]
            if pseen[p]:
                continue
            pseen[p] = True
            visited += counts[p] * psize[p]
            if visited > budget:
                return -1
            for kk in range(puo[p], puo[p + 1]):
                other = pu[kk]
                if not lseen[other]:
                    lseen[other] = True
                    stack[top] = other
                    top += 1
    n = 0
    for p in range(num_paths):
        if pseen[p]:
            found[n] = p
            n += 1
    m = 0
    for j in range(num_links):
        if lseen[j]:
            links[m] = j
            m += 1
    out[0] = m
    return n
