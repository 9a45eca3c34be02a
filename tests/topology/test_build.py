"""Building a cluster from a topology table: graph attributes, shared NICs, GPU tables, and every
table error naming its key and value."""

from __future__ import annotations

import copy

import pytest

from helpers import TOPOLOGY, make_cluster, node_kinds
from simtrain.errors import SpecError
from simtrain.specs.gpu import get_gpu
from simtrain.topology.cluster import build_topology, load_topology
from simtrain.topology.routes import Router


def test_graph_attributes_and_gpu_ids():
    c = make_cluster()
    g = c.graph
    assert c.gpu_id(9) == "gpu9" and c.node_of(9) == 1 and c.node_of(63) == 7
    assert g.nodes["gpu9"] == {"kind": "gpu", "index": 9, "node": 1, "local": 1, "latency_s": 0.0}
    for u, v, d in g.edges(data=True):
        assert g.has_edge(v, u)
        assert isinstance(d["bandwidth_Bps"], float) and d["bandwidth_Bps"] > 0
        assert isinstance(d["latency_s"], float) and d["latency_s"] >= 0
    with pytest.raises(SpecError, match="64"):
        c.gpu_id(64)


def test_nics_shared_by_gpus_without_nvswitch():
    data = copy.deepcopy(TOPOLOGY)
    data["node"] = {"gpus": 4, "nvswitch": False, "nics": 2, "nic_gbps": 400}
    data["nodes"] = 2
    data["fabric"]["nodes_per_leaf"] = 2
    c = build_topology(data, "pcie.toml")
    r = Router(c)
    assert node_kinds(c, r.route(0, 1)) == ["gpu", "nic", "gpu"]  # GPUs 0, 1 share NIC 0
    assert node_kinds(c, r.route(0, 2)) == ["gpu", "nic", "leaf", "nic", "gpu"]


def test_gpu_override_and_gpu_table():
    c = load_topology("h100-ib", gpu=get_gpu("h200"))
    assert c.gpu.name == "h200"
    data = copy.deepcopy(TOPOLOGY)
    data["gpu"] = {"base": "h100-sxm", "name": "my-h100", "nvlink_GBps": 300}
    del data["node"]["nvlink_GBps"]
    c = build_topology(data, "t.toml")
    assert c.gpu.name == "my-h100" and Router(c).bandwidth(0, 1) == 300e9


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [-400, 0])
def test_non_positive_bandwidth(value):
    data = copy.deepcopy(TOPOLOGY)
    data["node"]["nic_gbps"] = value
    message = rf"test\.toml \[node\]: nic_gbps = {value}(\.0)?: must be > 0"
    with pytest.raises(SpecError, match=message):
        build_topology(data, "test.toml")


def test_zero_nvlink_bandwidth():
    data = copy.deepcopy(TOPOLOGY)
    data["node"]["nvlink_GBps"] = 0
    with pytest.raises(SpecError, match="nvlink_GBps = 0"):
        build_topology(data, "test.toml")


def test_unknown_key():
    data = copy.deepcopy(TOPOLOGY)
    data["fabric"]["spine"] = 4
    with pytest.raises(SpecError, match=r"\[fabric\]: unknown key 'spine'; did you mean 'spines'"):
        build_topology(data, "test.toml")


def test_wrong_type():
    data = copy.deepcopy(TOPOLOGY)
    data["node"]["gpus"] = "8"
    with pytest.raises(SpecError, match="gpus = '8': expected int"):
        build_topology(data, "test.toml")


def test_disconnected_cluster():
    data = copy.deepcopy(TOPOLOGY)
    data["nodes"] = 2
    data["fabric"] = {"kind": "none"}
    with pytest.raises(SpecError, match="gpu 0 has no route to gpu 8"):
        build_topology(data, "test.toml")


def test_isolated_gpus_without_nvswitch_or_nics():
    data = copy.deepcopy(TOPOLOGY)
    data["nodes"] = 1
    data["node"] = {"gpus": 2, "nvswitch": False}
    del data["fabric"]
    with pytest.raises(SpecError, match="gpu 0 has no route to gpu 1"):
        build_topology(data, "test.toml")


@pytest.mark.parametrize("nodes", [0, -1])
def test_nodes_below_one(nodes):
    data = copy.deepcopy(TOPOLOGY)
    data["nodes"] = nodes
    with pytest.raises(SpecError, match=rf"nodes = {nodes}: must be >= 1"):
        build_topology(data, "test.toml")
    with pytest.raises(SpecError, match=rf"nodes \(override\) = {nodes}"):
        load_topology("h100-ib", nodes=nodes)


def test_nodes_not_fitting_fabric():
    with pytest.raises(SpecError, match="nodes = 6.*nodes_per_leaf = 4"):
        load_topology("h100-ib", nodes=6)
    with pytest.raises(SpecError, match="nodes = 24.*leaves_per_pod"):
        make_cluster(nodes=24, tiers=3, leaves_per_pod=4, cores=4)
    assert make_cluster(nodes=3).num_nodes == 3  # fewer nodes than one leaf holds is fine


def test_three_tier_keys_rejected_with_two_tiers():
    with pytest.raises(SpecError, match="cores = 4: only valid with tiers = 3"):
        make_cluster(cores=4)
    with pytest.raises(SpecError, match="cores = 6: must be a multiple of spines = 4"):
        make_cluster(nodes=16, tiers=3, leaves_per_pod=2, cores=6)


def test_bad_fabric_kind_and_nic_count():
    with pytest.raises(SpecError, match="kind = 'fat_tree'.*did you mean 'fat-tree'"):
        make_cluster(kind="fat_tree")
    data = copy.deepcopy(TOPOLOGY)
    data["node"]["nics"] = 3
    with pytest.raises(SpecError, match="nics = 3: must divide gpus = 8"):
        build_topology(data, "test.toml")
