"""Route costs without routes: the bottleneck bandwidth and latency of every route equal the
router's own (bit for bit) on every preset, across nodes, leaves, spines and pods, cached or not."""

from __future__ import annotations

import random

import pytest

from simtrain.errors import SpecError
from simtrain.topology.cluster import list_topologies, load_topology
from simtrain.topology.routing.router import Router

pytestmark = pytest.mark.quick


def _pairs(n: int, count: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randrange(n), rng.randrange(n)) for _ in range(count)]


@pytest.mark.parametrize("name", list_topologies())
def test_cost_is_the_routers_bandwidth_and_latency(name):
    cluster = load_topology(name, nodes=40)  # three pods of the 3-tier preset, ten leaves of 2-tier ones
    fast, plain = Router(cluster), Router(cluster)
    pairs = _pairs(cluster.num_gpus, 1500, 7)
    for a, b in pairs + pairs[:200]:  # the second time from the cache
        assert fast.cost(a, b) == (plain.bandwidth(a, b), plain.latency(a, b))


def test_cost_by_search_and_of_a_gpu_to_itself():
    cluster = load_topology("h100-3tier", nodes=40)
    searched, plain = Router(cluster, structural=False), Router(cluster)
    for a, b in _pairs(cluster.num_gpus, 200, 3):
        assert searched.cost(a, b) == (plain.bandwidth(a, b), plain.latency(a, b))
    assert plain.cost(5, 5) == (float("inf"), 0)


def test_cost_adds_latencies_in_path_order():
    """Node 0 (leaf 0) to node 5 (leaf 1) on h100-ib: two NIC crossings of 0.5 us, four cables of
    0.05 us and three switches (leaf, spine, leaf) of 0.13 us: 1.59 us (the preset's values)."""
    cluster = load_topology("h100-ib", nodes=8)
    path = Router(cluster).route(0, 40)
    g = cluster.graph
    edges = [g.edges[e]["latency_s"] for e in zip(path, path[1:])]
    nodes = [g.nodes[n]["latency_s"] for n in path[1:-1]]
    bandwidth, latency = Router(cluster).cost(0, 40)
    assert latency == sum(edges) + sum(nodes)
    assert latency == pytest.approx(1.59e-6, rel=1e-12)
    assert bandwidth == min(g.edges[e]["capacity_Bps"] for e in zip(path, path[1:]))


def test_cost_rejects_an_unknown_gpu():
    cluster = load_topology("h100-ib", nodes=2)
    with pytest.raises(SpecError, match="gpu 99"):
        Router(cluster).cost(0, 99)
