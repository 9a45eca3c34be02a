"""Routes inside a node learned on one node and reused on its kind: the same routes the router's
own search finds (bit for bit) on every preset, and never reused where two switches tie (ECMP by
the GPUs' global numbers) or where the route leaves the node."""

from __future__ import annotations

import pytest

from simtrain.topology.cluster import build_topology, list_topologies, load_topology
from simtrain.topology.routing.router import Router


def _inside_pairs(cluster, nodes):
    gpn = cluster.gpus_per_node
    return [(n * gpn + i, n * gpn + j) for n in nodes for i in range(gpn) for j in range(gpn) if i != j]


def _same_as_search(cluster, nodes) -> Router:
    learned, searched = Router(cluster), Router(cluster, structural=False)
    for a, b in _inside_pairs(cluster, nodes):
        assert learned.route(a, b) == searched.route(a, b), (a, b)
    return learned


@pytest.mark.parametrize("name", list_topologies())
def test_learned_routes_are_the_searched_ones(name):
    cluster = load_topology(name, nodes=3 if name == "gb200-nvl72" else 12)
    _same_as_search(cluster, range(cluster.num_nodes))


def _node(nvlink_GBps, nics, nvswitch=True, nvlink_efficiency=0.822):
    node = {"gpus": 8, "nvswitch": nvswitch, "nics": nics, "nic_gbps": 400, "pcie_GBps": 64}
    if nvswitch:
        node.update(nvlink_GBps=nvlink_GBps, nvlink_efficiency=nvlink_efficiency)
    return build_topology({
        "gpu": "h100-sxm", "nodes": 6, "node": node,
        "fabric": {"kind": "fat-tree", "tiers": 2, "nodes_per_leaf": 2, "spines": 2}}, "t")


@pytest.mark.quick
def test_an_nvswitch_route_is_learned_and_renamed():
    cluster = _node(450, 8)
    router = _same_as_search(cluster, range(6))
    assert router.route(41, 46) == ("gpu41", "node5/nvswitch", "gpu46")
    assert router.node_routes._learned  # learned on node 0, reused on the others
    assert set(router.node_routes._learned.values()) == {"nvswitch"}


@pytest.mark.quick
def test_tied_switches_are_left_to_ecmp():
    """NVLink as wide as the PCIe link to a NIC two GPUs share: both one-switch routes tie, ECMP
    by the global GPU numbers picks one, so neither is reused (the search decides every pair)."""
    cluster = _node(64, 4, nvlink_efficiency=1.0)
    router = _same_as_search(cluster, range(6))
    shared = [router.node_routes._learned[k] for k in router.node_routes._learned if k[1] // 2 == k[2] // 2]
    assert shared and all(s is None for s in shared)
    picked = {router.route(a, a + 1)[1].split("/")[1] for a in range(0, 48, 2)}
    assert "nvswitch" in picked and len(picked) > 1  # ECMP spreads the ties over both kinds


@pytest.mark.quick
def test_without_nvswitch_only_a_shared_nic_is_reused():
    cluster = _node(450, 4, nvswitch=False)
    router = _same_as_search(cluster, range(6))
    learned = router.node_routes._learned
    assert all((s is not None) == (k[1] // 2 == k[2] // 2) for k, s in learned.items())
    assert router.route(8, 9) == ("gpu8", "node1/nic0", "gpu9")
    assert router.route(8, 10)[2].startswith("leaf")
