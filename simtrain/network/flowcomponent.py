"""The connected component a rate recomputation covers, compiled (numba; called through its saved
machine code, :data:`simtrain.network.flow_kernels.COMPONENT`).

Max-min allocations decompose over the connected components of the graph of active paths and
the links they share, so a recomputation after flows start or end prices only the paths linked
to the changed paths' links through shared links, transitively (:mod:`simtrain.network.sharing`).
:func:`component` indexes the active paths by link (a counting sort over the active paths'
distinct links), then searches from the changed paths' links. Its
result does not depend on the order of the search: every path and link reachable (the caller
sorts them), or none where the component carries more than half of the active flow-link pairs (a
recomputation of every active flow is then as cheap).
"""

from __future__ import annotations

import numpy as np

from simtrain.network.flow_jit import compiled


@compiled
def component(active: np.ndarray, counts: np.ndarray, psize: np.ndarray, pu: np.ndarray, puo: np.ndarray,
              changed: np.ndarray, lcount: np.ndarray, lstart: np.ndarray, lfill: np.ndarray, lpaths: np.ndarray,
              touched: np.ndarray, pseen: np.ndarray, lseen: np.ndarray, stack: np.ndarray, found: np.ndarray,
              links: np.ndarray, out: np.ndarray) -> int:
    """The component of the links of the ``changed`` paths: of the ``active`` paths (``counts[p]``
    flows on path ``p``, of ``psize[p]`` links each; ``pu[puo[p]:puo[p + 1]]`` its distinct
    links), those reachable from those links through shared links, in ``found`` (how many: the
    return value), and the links visited, in ``links`` (how many: ``out[0]``), both in the
    order the search met them; -1 where those paths carry more than half of the flow-link pairs
    of all active flows (each flow's ``psize``). Per link ``lcount``, ``lstart``, ``lfill``,
    ``touched``, ``lseen`` and ``stack``, ``lpaths`` (as long as ``pu``) and per path ``pseen``
    are scratch: ``lcount``, ``lseen`` and ``pseen`` must be all zero, and are left so. The work
    is in proportion to the active paths' links, not to every path and link of the table."""
    num_touched = 0
    pairs = 0
    for a in range(active.size):
        p = active[a]
        pairs += counts[p] * psize[p]
        for k in range(puo[p], puo[p + 1]):
            link = pu[k]
            if lcount[link] == 0:
                touched[num_touched] = link
                num_touched += 1
            lcount[link] += 1
    at = 0
    for i in range(num_touched):
        link = touched[i]
        lstart[link] = at
        lfill[link] = at
        at += lcount[link]
    for a in range(active.size):
        p = active[a]
        for k in range(puo[p], puo[p + 1]):
            link = pu[k]
            lpaths[lfill[link]] = p
            lfill[link] += 1
    top = 0
    m = 0
    for c in range(changed.size):
        m, top = _visit(changed[c], pu, puo, lseen, links, m, stack, top)
    budget = pairs // 2
    visited = 0
    n = 0
    over = False
    while top > 0 and not over:
        top -= 1
        link = stack[top]
        for k in range(lstart[link], lstart[link] + lcount[link]):  # (no paths where lcount is 0)
            p = lpaths[k]
            if pseen[p]:
                continue
            pseen[p] = True
            found[n] = p
            n += 1
            visited += counts[p] * psize[p]
            if visited > budget:
                over = True
                break
            m, top = _visit(p, pu, puo, lseen, links, m, stack, top)
    for i in range(num_touched):
        lcount[touched[i]] = 0
    for i in range(n):
        pseen[found[i]] = False
    for i in range(m):
        lseen[links[i]] = False
    out[0] = m
    return -1 if over else n


@compiled
def _visit(p: int, pu: np.ndarray, puo: np.ndarray, lseen: np.ndarray, links: np.ndarray, m: int,
           stack: np.ndarray, top: int) -> tuple[int, int]:
    """Mark the links of path ``p`` not seen yet, list them (``links[m:]``) and push them
    (``stack[top:]``); the new ``m`` and ``top``."""
    for k in range(puo[p], puo[p + 1]):
        link = pu[k]
        if not lseen[link]:
            lseen[link] = True
            links[m] = link
            m += 1
            stack[top] = link
            top += 1
    return m, top
