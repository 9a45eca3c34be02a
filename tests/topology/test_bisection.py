"""The bisection bandwidth on the reduced graph (simtrain.topology.bisection): the same maximum
flow as the unreduced graph, and the fat-tree's cut by hand."""

from __future__ import annotations

import networkx as nx
import pytest

from simtrain.topology.bisection import SINK, SOURCE, bisection_flow, reduced_flow_graph
from simtrain.topology.cluster import bisection_bandwidth, load_topology

pytestmark = pytest.mark.quick


def _unreduced(graph: nx.DiGraph, n: int) -> float:
    """The maximum flow on the whole graph, GPUs joined to the terminals by unbounded edges."""
    flow = nx.DiGraph()
    for u, v, bw in graph.edges(data="bandwidth_Bps"):
        flow.add_edge(u, v, capacity=round(bw))
    for g in range(n):
        if g < n // 2:
            flow.add_edge(SOURCE, f"gpu{g}")
        else:
            flow.add_edge(f"gpu{g}", SINK)
    return float(nx.maximum_flow_value(flow, SOURCE, SINK))


@pytest.mark.parametrize("name, nodes", [("h100-ib", 3), ("h100-ib-2to1", 5), ("h100-rail", 3),
                                         ("h100-3tier", 9), ("gb200-nvl72", 2), ("a100-hdr", 1)])
def test_reduced_flow_equals_the_whole_graphs(name, nodes):
    cluster = load_topology(name, nodes=nodes)
    assert bisection_flow(cluster.graph, cluster.num_gpus) == _unreduced(cluster.graph, cluster.num_gpus)


def test_fat_tree_bisection_by_hand():
    # h100-ib, 8 nodes: the first 4 nodes fill leaf 0, whose 32 NDR uplinks (50 GB/s each, 1:1)
    # carry everything that crosses to the second half
    assert bisection_bandwidth(load_topology("h100-ib", nodes=8)) == 32 * 400e9 / 8


def test_series_and_dead_end_rules():
    # source -a- x -b- sink with a = 5 and b = 3 each way, and a dead end d hanging off x
    edges = [(SOURCE, "x", 5), ("x", SOURCE, 5), ("x", SINK, 3), (SINK, "x", 3), ("x", "d", 9), ("d", "x", 9)]
    reduced = reduced_flow_graph(edges, {})
    assert set(reduced.nodes) == {SOURCE, SINK}
    assert reduced[SOURCE][SINK]["capacity"] == 3 and reduced[SINK][SOURCE]["capacity"] == 3
