"""Topology: TOML format, graph, routing, bisection, summary, pictures, errors.

Expectations are hand-checkable: a DGX-H100-like node (8 GPUs, 8 x 400 Gb/s = 50 GB/s NICs) and
leaves of 4 nodes, so a leaf has 32 downlinks of 50 GB/s = 1.6 TB/s.
"""

from __future__ import annotations

import copy
import json

import pytest

from simtrain.errors import SpecError
from simtrain.outputs.topology_plot import draw_topology
from simtrain.specs.gpu import get_gpu
from simtrain.topology.cluster import (Cluster, bisection_bandwidth, build_topology, list_topologies,
                                       load_topology, summary)
from simtrain.topology.routes import Router

NIC_BPS = 50e9  # 400 Gb/s
NVLINK_BPS = 450e9

BASE = {
    "name": "t",
    "gpu": "h100-sxm",
    "nodes": 8,
    "node": {"gpus": 8, "nvlink_GBps": 450, "nic_gbps": 400, "pcie_GBps": 64},
    "fabric": {"kind": "fat-tree", "tiers": 2, "nodes_per_leaf": 4, "spines": 4,
               "oversubscription": 1.0},
}


def make(nodes: int | None = None, **fabric) -> Cluster:
    data = copy.deepcopy(BASE)
    data["fabric"].update(fabric)
    return build_topology(data, "test.toml", nodes=nodes)


def kinds(cluster: Cluster, path) -> list[str]:
    return [cluster.graph.nodes[n]["kind"] for n in path]


def tiers(cluster: Cluster, path) -> list[str]:
    return [cluster.graph.edges[e]["tier"] for e in zip(path, path[1:])]


# --- graph ---------------------------------------------------------------------------------------

def test_small_fat_tree_counts():
    c = make()  # 8 nodes, 2 leaves, 4 spines
    assert (c.num_nodes, c.gpus_per_node, c.num_gpus) == (8, 8, 64)
    s = summary(c)
    assert s["nodes_by_kind"] == {"gpu": 64, "nvswitch": 8, "nic": 64, "leaf": 2, "spine": 4}
    assert s["links_by_kind"] == {"nvlink": 64, "pcie": 64, "leaf": 64, "spine": 8}
    assert c.graph.number_of_edges() == 2 * (64 + 64 + 64 + 8)  # two directed edges per link
    # uplink per leaf-spine pair: 32 x 50 GB/s / 1 / 4 spines = 400 GB/s
    assert s["bandwidth_by_tier_Bps"] == {"nvlink": NVLINK_BPS, "pcie": 64e9, "leaf": NIC_BPS,
                                          "spine": 32 * NIC_BPS / 4}
    assert s["fabric"]["leaves"] == 2 and s["oversubscription"] == 1.0
    json.dumps(s)


def test_graph_attributes_and_gpu_ids():
    c = make()
    g = c.graph
    assert c.gpu_id(9) == "gpu9" and c.node_of(9) == 1 and c.node_of(63) == 7
    assert g.nodes["gpu9"] == {"kind": "gpu", "index": 9, "node": 1, "local": 1, "latency_s": 0.0}
    for u, v, d in g.edges(data=True):
        assert g.has_edge(v, u)
        assert isinstance(d["bandwidth_Bps"], float) and d["bandwidth_Bps"] > 0
        assert isinstance(d["latency_s"], float) and d["latency_s"] >= 0
    with pytest.raises(SpecError, match="64"):
        c.gpu_id(64)


def test_oversubscription_halves_bisection():
    full, half = make(), make(oversubscription=2.0)
    # halves = nodes 0-3 (leaf 0) and 4-7 (leaf 1): cut = leaf 0 uplinks = 32 x 50 GB/s
    assert bisection_bandwidth(full) == pytest.approx(32 * NIC_BPS)
    assert bisection_bandwidth(half) == pytest.approx(bisection_bandwidth(full) / 2)


def test_bisection_single_node_is_nvlink_plus_nic_paths():
    c = make(nodes=1)
    # 4 GPUs x 450 GB/s through the NVSwitch + 4 x 50 GB/s through NIC -> leaf -> NIC
    assert bisection_bandwidth(c) == pytest.approx(4 * NVLINK_BPS + 4 * NIC_BPS)


# --- routing -------------------------------------------------------------------------------------

def test_route_inside_node_is_nvlink_only():
    c = make()
    r = Router(c)
    path = r.route(1, 6)
    assert path == ("gpu1", "node0/nvswitch", "gpu6")
    assert tiers(c, path) == ["nvlink", "nvlink"]
    assert r.bandwidth(1, 6) == NVLINK_BPS
    assert r.links(1, 6) == (("gpu1", "node0/nvswitch"), ("node0/nvswitch", "gpu6"))


def test_route_between_nodes_same_leaf_and_across_spine():
    c = make()
    r = Router(c)
    assert kinds(c, r.route(0, 9)) == ["gpu", "nic", "leaf", "nic", "gpu"]
    path = r.route(0, 40)  # node 0 (leaf 0) -> node 5 (leaf 1)
    assert kinds(c, path) == ["gpu", "nic", "leaf", "spine", "leaf", "nic", "gpu"]
    assert tiers(c, path) == ["pcie", "leaf", "spine", "spine", "leaf", "pcie"]
    assert path[1] == "node0/nic0" and path[-2] == "node5/nic0"


def test_route_never_transits_a_gpu():
    c = make()
    r = Router(c)
    for a in range(0, 64, 5):
        for b in range(0, 64, 3):
            path = r.route(a, b)
            assert all(c.graph.nodes[n]["kind"] != "gpu" for n in path[1:-1])
            assert path[0] == c.gpu_id(a) and path[-1] == c.gpu_id(b)
    assert r.route(3, 3) == ("gpu3",)


def test_ecmp_deterministic_and_spread():
    c = make()
    r1, r2 = Router(c), Router(c)
    spines = set()
    for a in range(8):
        for b in range(32, 64):
            assert r1.route(a, b) == r2.route(a, b)
            spines.add(r1.route(a, b)[3])
    assert len(spines) > 1


def test_path_bandwidth_is_min_edge_and_latency_sums():
    c = make(oversubscription=2.0)
    r = Router(c)
    bws = [c.graph.edges[e]["bandwidth_Bps"] for e in r.links(0, 40)]
    assert r.bandwidth(0, 40) == min(bws) == NIC_BPS
    # 2 x 0.5 us NIC + 4 cables x 0.05 us + 3 switches x 0.13 us
    assert r.latency(0, 40) == pytest.approx(1.0e-6 + 4 * 0.05e-6 + 3 * 0.13e-6)
    assert r.latency(0, 1) == pytest.approx(1.0e-6)  # default nvlink_latency_us


def test_narrow_spine_link_is_the_bottleneck():
    c = make(oversubscription=4.0, spines=8)  # 1.6 TB/s / 4 / 8 = 50 GB/s per uplink
    r = Router(c)
    assert r.bandwidth(0, 40) == pytest.approx(NIC_BPS)
    c = make(oversubscription=8.0, spines=8)
    assert Router(c).bandwidth(0, 40) == pytest.approx(NIC_BPS / 2)


def test_three_tier_route_goes_through_core_across_pods():
    c = make(nodes=16, tiers=3, leaves_per_pod=2, cores=8)  # 4 leaves, 2 pods
    r = Router(c)
    path = r.route(0, 127)
    assert kinds(c, path) == ["gpu", "nic", "leaf", "spine", "core", "spine", "leaf", "nic",
                              "gpu"]
    assert path[3].startswith("pod0/") and path[5].startswith("pod1/")
    assert "core" not in kinds(c, r.route(0, 40))  # leaf 0 -> leaf 1, same pod
    assert summary(c)["nodes_by_kind"]["core"] == 8
    assert summary(c)["fabric"]["pods"] == 2


def test_rail_optimized_same_rail_one_leaf():
    c = make(kind="rail-optimized", nodes_per_leaf=4)  # 2 groups x 8 rails = 16 leaves
    r = Router(c)
    assert summary(c)["nodes_by_kind"]["leaf"] == 16
    same_rail = r.route(3, 8 + 3)  # GPU 3 of nodes 0 and 1: rail 3, same group
    assert kinds(c, same_rail) == ["gpu", "nic", "leaf", "nic", "gpu"]
    assert c.graph.nodes[same_rail[2]]["rail"] == 3
    cross = r.route(3, 8 + 4)  # rails 3 and 4: through a spine
    assert kinds(c, cross) == ["gpu", "nic", "leaf", "spine", "leaf", "nic", "gpu"]
    other_group = r.route(3, 4 * 8 + 3)  # rail 3 of node 4 (second group)
    assert kinds(c, other_group)[3] == "spine"


def test_nics_shared_by_gpus_without_nvswitch():
    data = copy.deepcopy(BASE)
    data["node"] = {"gpus": 4, "nvswitch": False, "nics": 2, "nic_gbps": 400}
    data["nodes"] = 2
    data["fabric"]["nodes_per_leaf"] = 2
    c = build_topology(data, "pcie.toml")
    r = Router(c)
    assert kinds(c, r.route(0, 1)) == ["gpu", "nic", "gpu"]  # GPUs 0, 1 share NIC 0
    assert kinds(c, r.route(0, 2)) == ["gpu", "nic", "leaf", "nic", "gpu"]


# --- presets -------------------------------------------------------------------------------------

def test_presets_listed():
    names = list_topologies()
    for name in ("a100-hdr", "h100-ib", "h200-ib", "b200-ib", "h100-rail", "h100-3tier",
                 "h800-rail", "gb200-nvl72", "h100-ib-2to1", "seed-h100"):
        assert name in names


@pytest.mark.parametrize("name", list_topologies())
def test_every_preset_loads_with_nodes_override(name):
    c = load_topology(name)
    assert c.source == name and c.name == name
    if c.fabric_kind != "none":
        assert c.fabric["leaves"] >= 2
    assert load_topology(name, nodes=1).num_nodes == 1
    twice = load_topology(name, nodes=2 * c.num_nodes)
    assert twice.num_gpus == 2 * c.num_gpus
    assert bisection_bandwidth(c) > 0
    json.dumps(summary(c))


def test_seed_h100_numbers():
    c = load_topology("seed-h100")
    r = Router(c)
    assert c.gpu.name == "seed-h100" and c.num_nodes == 8 and c.gpus_per_node == 8
    assert r.bandwidth(0, 1) == 450e9 and r.bandwidth(0, 63) == 50e9
    assert c.oversubscription == 1.0


def test_gb200_nvl72_domain():
    c = load_topology("gb200-nvl72")
    r = Router(c)
    assert c.gpus_per_node == 72
    assert kinds(c, r.route(0, 71)) == ["gpu", "nvswitch", "gpu"]
    assert kinds(c, r.route(0, 72))[1] == "nic"


def test_gpu_override_and_gpu_table():
    c = load_topology("h100-ib", gpu=get_gpu("h200"))
    assert c.gpu.name == "h200"
    data = copy.deepcopy(BASE)
    data["gpu"] = {"base": "h100-sxm", "name": "my-h100", "nvlink_GBps": 300}
    del data["node"]["nvlink_GBps"]
    c = build_topology(data, "t.toml")
    assert c.gpu.name == "my-h100" and Router(c).bandwidth(0, 1) == 300e9


def test_load_from_path(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('gpu = "h100-sxm"\nnodes = 1\n[node]\ngpus = 4\n')
    c = load_topology(str(path))
    assert c.name == "mine" and c.num_gpus == 4 and c.fabric_kind == "none"


# --- errors --------------------------------------------------------------------------------------

def test_unknown_preset_suggests_close_match():
    with pytest.raises(SpecError, match="h100-ib"):
        load_topology("h100-i")


def test_malformed_toml_names_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('gpu = "h100-sxm"\nnodes = 2\n[node\ngpus = 8\n')
    with pytest.raises(SpecError, match=r"bad\.toml.*line 3"):
        load_topology(str(path))


@pytest.mark.parametrize("value", [-400, 0])
def test_non_positive_bandwidth(value):
    data = copy.deepcopy(BASE)
    data["node"]["nic_gbps"] = value
    message = rf"test\.toml \[node\]: nic_gbps = {value}(\.0)?: must be > 0"
    with pytest.raises(SpecError, match=message):
        build_topology(data, "test.toml")


def test_zero_nvlink_bandwidth():
    data = copy.deepcopy(BASE)
    data["node"]["nvlink_GBps"] = 0
    with pytest.raises(SpecError, match="nvlink_GBps = 0"):
        build_topology(data, "test.toml")


def test_unknown_key():
    data = copy.deepcopy(BASE)
    data["fabric"]["spine"] = 4
    with pytest.raises(SpecError, match=r"\[fabric\]: unknown key 'spine'; did you mean 'spines'"):
        build_topology(data, "test.toml")


def test_wrong_type():
    data = copy.deepcopy(BASE)
    data["node"]["gpus"] = "8"
    with pytest.raises(SpecError, match="gpus = '8': expected int"):
        build_topology(data, "test.toml")


def test_disconnected_cluster():
    data = copy.deepcopy(BASE)
    data["nodes"] = 2
    data["fabric"] = {"kind": "none"}
    with pytest.raises(SpecError, match="gpu 0 has no route to gpu 8"):
        build_topology(data, "test.toml")


def test_isolated_gpus_without_nvswitch_or_nics():
    data = copy.deepcopy(BASE)
    data["nodes"] = 1
    data["node"] = {"gpus": 2, "nvswitch": False}
    del data["fabric"]
    with pytest.raises(SpecError, match="gpu 0 has no route to gpu 1"):
        build_topology(data, "test.toml")


@pytest.mark.parametrize("nodes", [0, -1])
def test_nodes_below_one(nodes):
    data = copy.deepcopy(BASE)
    data["nodes"] = nodes
    with pytest.raises(SpecError, match=rf"nodes = {nodes}: must be >= 1"):
        build_topology(data, "test.toml")
    with pytest.raises(SpecError, match=rf"nodes \(override\) = {nodes}"):
        load_topology("h100-ib", nodes=nodes)


def test_nodes_not_fitting_fabric():
    with pytest.raises(SpecError, match="nodes = 6.*nodes_per_leaf = 4"):
        load_topology("h100-ib", nodes=6)
    with pytest.raises(SpecError, match="nodes = 24.*leaves_per_pod"):
        make(nodes=24, tiers=3, leaves_per_pod=4, cores=4)
    assert make(nodes=3).num_nodes == 3  # fewer nodes than one leaf holds is fine


def test_three_tier_keys_rejected_with_two_tiers():
    with pytest.raises(SpecError, match="cores = 4: only valid with tiers = 3"):
        make(cores=4)
    with pytest.raises(SpecError, match="cores = 6: must be a multiple of spines = 4"):
        make(nodes=16, tiers=3, leaves_per_pod=2, cores=6)


def test_bad_fabric_kind_and_nic_count():
    with pytest.raises(SpecError, match="kind = 'fat_tree'.*did you mean 'fat-tree'"):
        make(kind="fat_tree")
    data = copy.deepcopy(BASE)
    data["node"]["nics"] = 3
    with pytest.raises(SpecError, match="nics = 3: must divide gpus = 8"):
        build_topology(data, "test.toml")


# --- picture -------------------------------------------------------------------------------------

def test_draw_topology_png(tmp_path):
    c = make()
    r = Router(c)
    util = {link: 0.7 for link in r.links(0, 40)}
    path = tmp_path / "topo.png"
    draw_topology(c, path, link_utilisation=util)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = tmp_path / "topo.svg"
    draw_topology(load_topology("h100-3tier"), svg)
    assert b"<svg" in svg.read_bytes()[:1000]
    with pytest.raises(SpecError, match=r"\.png or \.svg"):
        draw_topology(c, tmp_path / "topo.jpg")
