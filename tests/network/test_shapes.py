"""Groups of one shape priced once (simtrain/network/shapes.py): every shared price equals the
price computed for that group alone, exactly, and translates do share it."""

import pytest

from simtrain.network.algorithms import hop_cost
from simtrain.network.planner import Planner
from simtrain.network.shapes import GroupShapes
from simtrain.topology.cluster import load_topology
from simtrain.topology.faults import perturb_links
from simtrain.topology.routing.router import Router

OPS = ("all_reduce", "all_gather", "reduce_scatter")
SIZES = (1 << 20, 3 << 28)


def _groups(nodes: int, gpn: int = 8) -> list[tuple[int, ...]]:
    """Data-parallel-like groups: one GPU per node on runs of nodes, two per node (several
    channels), reversed and rotated orders, runs across leaves and pods."""
    out = []
    for run in (2, 4, 5, 8, 16, 32):
        starts = range(0, nodes - run + 1, run)
        for start in starts[::max(1, len(starts) // 4)]:
            for r in range(gpn):
                out.append(tuple(r + gpn * (start + i) for i in range(run)))
            out.append(tuple(gpn * (start + i) + r for i in range(run) for r in (1, 5)))
            out.append(tuple(3 + gpn * (start + i) for i in reversed(range(run))))
            out.append(tuple(6 + gpn * (start + (i + 1) % run) for i in range(run)))
    out.append(tuple(range(nodes * gpn)))  # the whole cluster (several channels: never keyed)
    return out


def _clusters() -> list:
    h100 = load_topology("h100-ib", nodes=24)
    return [pytest.param(h100, True, id="h100-ib"),
            pytest.param(load_topology("h100-rail", nodes=64), True, id="h100-rail"),
            pytest.param(load_topology("h100-3tier", nodes=48), True, id="h100-3tier"),
            pytest.param(load_topology("h100-ib-2to1", nodes=24), True, id="h100-ib-2to1"),
            # a slow NIC uplink and a slow leaf uplink: groups crossing them get other keys
            pytest.param(perturb_links(h100, (("node1/nic0", "leaf0", 0.5), ("leaf2", "spine3", 0.25)), ()), True,
                         id="degraded"),
            # node 1 of another kind: one GPU's PCIe link to its NIC and another's NVLink slowed
            pytest.param(perturb_links(h100, (("gpu9", "node1/nic1", 0.5), ("gpu10", "node1/nvswitch", 0.5)), ()),
                         True, id="mixed-kinds"),
            # a failed link: routes searched on the graph, nothing keyed
            pytest.param(perturb_links(h100, (), (("leaf1", "spine0"),)), False, id="failed")]


def _check(cluster, structural: bool, groups) -> Planner:
    shared = Planner(cluster, Router(cluster, structural=structural))
    alone = Planner(cluster, Router(cluster, structural=structural), by_shape=False)
    for g in groups:
        for op in OPS:
            for size in SIZES:
                assert shared.price(op, g, size) == alone.price(op, g, size), (op, g, size)
    return shared


@pytest.mark.quick
def test_translates_share_one_price_and_it_is_the_price_alone():
    cluster = load_topology("h100-ib", nodes=16)
    groups = [tuple(r + 8 * n for n in range(start, start + 4)) for start in (0, 4, 8, 12) for r in range(8)]
    shared = _check(cluster, True, groups)
    shapes = shared.by_shape
    assert len({shapes.key(g) for g in groups}) == 1
    assert shapes.misses == 4 and shapes.hits == 4 * 31  # ring per op, tree for all-reduce: 31 shared each


@pytest.mark.parametrize("cluster,structural", _clusters())
def test_shared_prices_equal_prices_alone(cluster, structural):
    shared = _check(cluster, structural, _groups(cluster.num_nodes))
    shapes = shared.by_shape
    if structural:
        assert shapes.hits > 100 and shapes.misses > 0
    else:
        assert shapes.hits == 0 and shapes.misses == 0


@pytest.mark.parametrize("cluster,structural", _clusters())
def test_shared_hop_costs_equal_hop_costs(cluster, structural):
    router = Router(cluster, structural=structural)
    shapes = GroupShapes(Router(cluster, structural=structural))
    for g in _groups(cluster.num_nodes):
        for op in ("all_gather", "all_reduce"):
            for algo in ("ring", "tree") if op == "all_reduce" else ("ring",):
                assert shapes.hop_cost(op, algo, g) == hop_cost(op, algo, g, router), (op, algo, g)


def test_a_degraded_link_or_another_kind_of_node_is_another_shape():
    h100 = load_topology("h100-ib", nodes=8)
    one_per_node = [tuple(r + 8 * n for n in range(8)) for r in range(8)]
    for link, alone in ((("node1/nic0", "leaf0"), 0), (("gpu9", "node1/nic1"), 1), (("gpu9", "node1/nvswitch"), 1)):
        cluster = perturb_links(h100, ((*link, 0.5),), ())
        shapes = GroupShapes(Router(cluster))
        keys = [shapes.key(g) for g in one_per_node]
        assert len(set(keys)) == 2 and keys[alone] not in keys[:alone] + keys[alone + 1:]  # the group through it
        _check(cluster, True, one_per_node)
    # a slow uplink of the leaf every group uses: one key, but its rings cross unevenly wide middles
    cluster = perturb_links(h100, (("leaf0", "spine3", 0.5),), ())
    shared = _check(cluster, True, one_per_node)
    assert len({shared.by_shape.key(g) for g in one_per_node}) == 1 and shared.by_shape.hits == 0
    # two GPUs of each node of one leaf: node 1 of another kind (a GPU outside the group slowed)
    two_per_node = [tuple(8 * n + r for n in range(first, first + 4) for r in (1, 5)) for first in (0, 4)]
    for slowed, same in ((h100, True), (perturb_links(h100, (("gpu10", "node1/nvswitch", 0.5),), ()), False)):
        shapes = GroupShapes(Router(slowed))
        assert (shapes.key(two_per_node[0]) == shapes.key(two_per_node[1])) is same
        assert shapes.key(two_per_node[0]) is not None
        _check(slowed, True, two_per_node)
