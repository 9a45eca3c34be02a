"""The bisection bandwidth of a cluster graph as a maximum flow on a reduced graph.

The bisection is the maximum flow from the first half of the GPUs to the second half
(:func:`simtrain.topology.cluster.bisection_bandwidth`). On a large cluster the graph has millions
of elements and a general maximum-flow algorithm is far from linear on it, so the graph is reduced
first by three rules that keep the maximum flow value exactly (Ford and Fulkerson, "Flows in
Networks", 1962, chapter I; the series and dead-end rules are the classical series-parallel
reductions of Duffin, "Topology of series-parallel networks", J. Math. Anal. Appl. 1965):

1. *Terminal merge*: a vertex joined to the source by an edge of unbounded capacity is on the
   source side of every finite cut, so it can be merged into the source (likewise for the sink).
   Every GPU is such a vertex; parallel edges that result add their capacities.
2. *Dead end*: a vertex with a single neighbour carries no flow from source to sink (what enters
   it must leave to the same neighbour), so it is removed.
3. *Series*: a vertex ``x`` with exactly two neighbours ``a`` and ``b`` passes a net flow from
   ``a`` to ``b`` of at most ``min(c(a, x), c(x, b))`` (and the other way at most
   ``min(c(b, x), c(x, a))``), and any such flow is feasible: ``x`` is replaced by those two edges.

On a fat-tree the reduced graph holds the terminals, the leaves and the spines: a node's
NVSwitch is a dead end after the merge and each NIC is in series between its GPUs and its leaf.
Capacities are integers (bytes/s rounded), so the value equals that of the unreduced graph.
"""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx

from simtrain.topology.build import paused_gc, plain_adjacency

SOURCE, SINK = "_source", "_sink"


def reduced_flow_graph(edges: Iterable[tuple[str, str, int]], terminals: dict[str, str]) -> nx.DiGraph:
    """The reduced graph (module docstring) of the directed ``edges`` (u, v, integer capacity),
    where ``terminals`` maps a vertex to :data:`SOURCE` or :data:`SINK` (the others are ordinary
    vertices). Every edge must have its reverse (the cluster graph's links are pairs)."""
    cap: dict[str, dict[str, int]] = {}
    for u, v, c in edges:
        a, b = terminals.get(u, u), terminals.get(v, v)
        if a != b:
            row = cap.get(a)
            if row is None:
                row = cap[a] = {}
            row[b] = row.get(b, 0) + c
            if b not in cap:
                cap[b] = {}
    todo = [x for x in cap if x not in (SOURCE, SINK)]
    while todo:
        x = todo.pop()
        row = cap.get(x)
        if row is None or len(row) > 2:
            continue
        nbrs = list(row)
        if len(nbrs) == 2:
            a, b = nbrs
            for p, q in ((a, b), (b, a)):
                c = min(cap[p].get(x, 0), row[q])
                if c:
                    cap[p][q] = cap[p].get(q, 0) + c
                    cap[q].setdefault(p, 0)
        for n in nbrs:
            del cap[n][x]
            if n not in (SOURCE, SINK):
                todo.append(n)
        del cap[x]
    g = nx.DiGraph()
    g.add_nodes_from((SOURCE, SINK))
    g.add_edges_from((u, v, {"capacity": c}) for u, row in cap.items() for v, c in row.items() if c)
    return g


def bisection_flow(graph: nx.DiGraph, num_gpus: int) -> float:
    """Maximum flow, bytes/s, from GPUs ``0 .. num_gpus // 2 - 1`` to the others over ``graph``'s
    line rates (``bandwidth_Bps`` rounded to whole bytes/s), computed on the reduced graph."""
    half = num_gpus // 2
    terminals = {v: SOURCE if d["index"] < half else SINK for v, d in graph.nodes(data=True) if d["kind"] == "gpu"}
    edges = ((u, v, round(d["bandwidth_Bps"])) for u, nbrs in plain_adjacency(graph).items()
             for v, d in nbrs.items())
    with paused_gc():
        reduced = reduced_flow_graph(edges, terminals)
    return float(nx.maximum_flow_value(reduced, SOURCE, SINK))
