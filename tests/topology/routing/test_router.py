"""Routes: NVLink inside a node, NIC, leaf, spine (and core) across nodes, never through a GPU; ECMP;
the achievable bottleneck bandwidth and the summed latency of a path, its fabric part; a GPU's NIC."""

from __future__ import annotations

import pytest

from helpers import NIC_BPS, NVLINK_BPS, make_cluster, node_kinds

NVLINK_ACHIEVED = NVLINK_BPS * 0.822  # the default nvlink_efficiency (simtrain.topology.spec)
NIC_ACHIEVED = NIC_BPS * 0.96  # the default nic_efficiency
from simtrain.topology.cluster import Cluster, summary
from simtrain.topology.routing.router import Router


def tiers(cluster: Cluster, path) -> list[str]:
    return [cluster.graph.edges[e]["tier"] for e in zip(path, path[1:])]


def test_route_inside_node_is_nvlink_only():
    c = make_cluster()
    r = Router(c)
    path = r.route(1, 6)
    assert path == ("gpu1", "node0/nvswitch", "gpu6")
    assert tiers(c, path) == ["nvlink", "nvlink"]
    assert r.bandwidth(1, 6) == pytest.approx(NVLINK_ACHIEVED)
    assert r.links(1, 6) == (("gpu1", "node0/nvswitch"), ("node0/nvswitch", "gpu6"))


def test_route_between_nodes_same_leaf_and_across_spine():
    c = make_cluster()
    r = Router(c)
    assert node_kinds(c, r.route(0, 9)) == ["gpu", "nic", "leaf", "nic", "gpu"]
    path = r.route(0, 40)  # node 0 (leaf 0) -> node 5 (leaf 1)
    assert node_kinds(c, path) == ["gpu", "nic", "leaf", "spine", "leaf", "nic", "gpu"]
    assert tiers(c, path) == ["pcie", "leaf", "spine", "spine", "leaf", "pcie"]
    assert path[1] == "node0/nic0" and path[-2] == "node5/nic0"


def test_route_never_transits_a_gpu():
    c = make_cluster()
    r = Router(c)
    for a in range(0, 64, 5):
        for b in range(0, 64, 3):
            path = r.route(a, b)
            assert all(c.graph.nodes[n]["kind"] != "gpu" for n in path[1:-1])
            assert path[0] == c.gpu_id(a) and path[-1] == c.gpu_id(b)
    assert r.route(3, 3) == ("gpu3",)


def test_ecmp_deterministic_and_spread():
    c = make_cluster()
    r1, r2 = Router(c), Router(c)
    spines = set()
    for a in range(8):
        for b in range(32, 64):
            assert r1.route(a, b) == r2.route(a, b)
            spines.add(r1.route(a, b)[3])
    assert len(spines) > 1


def test_path_bandwidth_is_min_edge_and_latency_sums():
    c = make_cluster(oversubscription=2.0)
    r = Router(c)
    caps = [c.graph.edges[e]["capacity_Bps"] for e in r.links(0, 40)]
    assert r.bandwidth(0, 40) == min(caps) == pytest.approx(NIC_ACHIEVED)
    assert min(c.graph.edges[e]["bandwidth_Bps"] for e in r.links(0, 40)) == NIC_BPS  # the line rate
    # 2 x 0.5 us NIC + 4 cables x 0.05 us + 3 switches x 0.13 us
    assert r.latency(0, 40) == pytest.approx(1.0e-6 + 4 * 0.05e-6 + 3 * 0.13e-6)
    assert r.fabric_latency(0, 40) == pytest.approx(4 * 0.05e-6 + 3 * 0.13e-6)  # beyond the NICs
    assert r.latency(0, 1) == pytest.approx(1.0e-6)  # default nvlink_latency_us
    assert r.fabric_latency(0, 1) == 0.0
    assert r.nic_of(9) == "node1/nic1"


def test_narrow_spine_link_is_the_bottleneck():
    c = make_cluster(oversubscription=4.0, spines=8)  # 1.6 TB/s / 4 / 8 = 50 GB/s per uplink
    r = Router(c)
    assert r.bandwidth(0, 40) == pytest.approx(NIC_ACHIEVED)
    c = make_cluster(oversubscription=8.0, spines=8)
    assert Router(c).bandwidth(0, 40) == pytest.approx(NIC_ACHIEVED / 2)


def test_three_tier_route_goes_through_core_across_pods():
    c = make_cluster(nodes=16, tiers=3, leaves_per_pod=2, cores=8)  # 4 leaves, 2 pods
    r = Router(c)
    path = r.route(0, 127)
    assert node_kinds(c, path) == ["gpu", "nic", "leaf", "spine", "core", "spine", "leaf", "nic",
                                   "gpu"]
    assert path[3].startswith("pod0/") and path[5].startswith("pod1/")
    assert "core" not in node_kinds(c, r.route(0, 40))  # leaf 0 -> leaf 1, same pod
    assert summary(c)["nodes_by_kind"]["core"] == 8
    assert summary(c)["fabric"]["pods"] == 2


def test_rail_optimized_same_rail_one_leaf():
    c = make_cluster(kind="rail-optimized", nodes_per_leaf=4)  # 2 groups x 8 rails = 16 leaves
    r = Router(c)
    assert summary(c)["nodes_by_kind"]["leaf"] == 16
    same_rail = r.route(3, 8 + 3)  # GPU 3 of nodes 0 and 1: rail 3, same group
    assert node_kinds(c, same_rail) == ["gpu", "nic", "leaf", "nic", "gpu"]
    assert c.graph.nodes[same_rail[2]]["rail"] == 3
    cross = r.route(3, 8 + 4)  # rails 3 and 4: through a spine
    assert node_kinds(c, cross) == ["gpu", "nic", "leaf", "spine", "leaf", "nic", "gpu"]
    other_group = r.route(3, 4 * 8 + 3)  # rail 3 of node 4 (second group)
    assert node_kinds(c, other_group)[3] == "spine"


# Routes from the fabric's structure equal the graph search's, on every preset topology.
from simtrain.topology.cluster import list_topologies, load_topology  # noqa: E402

pytestmark = pytest.mark.quick

# node counts that give several leaves (several pods, several rail groups) on each preset
_STRUCTURE_NODES = {"h100-3tier": 40, "h100-rail": 40, "h800-rail": 33, "gb200-nvl72": 3}


@pytest.mark.parametrize("preset", list_topologies())
def test_structural_routes_equal_breadth_first_search(preset):
    c = load_topology(preset, nodes=_STRUCTURE_NODES.get(preset, 9))
    fast, slow = Router(c), Router(c, structural=False)
    n = c.num_gpus
    gpus = sorted({0, 1, c.gpus_per_node - 1, n - 1, n // 2, n // 3 + 5 if n > 16 else 0}
                  | set(range(0, n, max(1, n // 24))))
    for a in gpus:
        for b in gpus:
            assert fast.route(a, b) == slow.route(a, b), (preset, a, b)
    leaves = [x for x, k in c.graph.nodes(data="kind") if k == "leaf"]
    for a in leaves:
        for b in leaves:
            assert fast._mids(a, b) == slow._mids(a, b), (preset, a, b)


def test_structural_three_tier_paths_by_hand():
    """Two pods of 4 leaves (4 nodes per leaf), 8 spines per pod, 16 cores: leaves 0 and 5 are in
    pods 0 and 1 and meet through each of the 16 cores, core c via spine c % 8 of both pods."""
    c = load_topology("h100-3tier", nodes=32)
    paths, _ = Router(c)._mids("leaf0", "leaf5")
    assert len(paths) == 16
    assert ("leaf0", "pod0/spine3", "core11", "pod1/spine3", "leaf5") in paths
    assert Router(c)._mids("leaf0", "leaf3")[0] == tuple(sorted(
        ("leaf0", f"pod0/spine{s}", "leaf3") for s in range(8)))
