"""Reading a topology table: every error names its key and value; efficiencies and NVLink SHARP; the
fabric's capacity (every node count up to it builds)."""

from __future__ import annotations

import copy

import pytest

from helpers import TOPOLOGY, make_cluster
from simtrain.errors import SpecError
from simtrain.topology.cluster import build_topology, load_topology
from simtrain.topology.spec import DEFAULT_NIC_EFFICIENCY, DEFAULT_NVLINK_EFFICIENCY, parse_spec

pytestmark = pytest.mark.quick


def test_efficiencies_and_nvls():
    spec = parse_spec(copy.deepcopy(TOPOLOGY), "t.toml")
    assert spec.node.nvlink_efficiency == DEFAULT_NVLINK_EFFICIENCY == 0.822
    assert spec.fabric.nic_efficiency == DEFAULT_NIC_EFFICIENCY == 0.96
    assert spec.node.nvls is False and spec.fabric.switch_ports is None
    data = copy.deepcopy(TOPOLOGY)
    data["node"].update(nvls=True, nvls_efficiency=0.7, nvlink_efficiency=1.0)
    data["fabric"]["nic_efficiency"] = 0.9
    spec = parse_spec(data, "t.toml")
    assert (spec.node.nvls, spec.node.nvls_efficiency, spec.node.nvlink_efficiency) == (True, 0.7, 1.0)
    assert spec.fabric.nic_efficiency == 0.9
    assert load_topology("h100-ib").nvls and not load_topology("a100-hdr").nvls


@pytest.mark.parametrize("key,value,message", [
    ("nvlink_efficiency", 1.2, "nvlink_efficiency = 1.2: must be <= 1"),
    ("nvlink_efficiency", 0, "nvlink_efficiency = 0(.0)?: must be > 0"),
    ("nvls", "yes", "nvls = 'yes': expected bool"),
])
def test_bad_node_efficiency(key, value, message):
    data = copy.deepcopy(TOPOLOGY)
    data["node"][key] = value
    with pytest.raises(SpecError, match=message):
        build_topology(data, "test.toml")


def test_nvlink_keys_need_an_nvswitch():
    data = copy.deepcopy(TOPOLOGY)
    data["node"] = {"gpus": 4, "nvswitch": False, "nvls": True, "nic_gbps": 400}
    with pytest.raises(SpecError, match="nvls = True: only valid with nvswitch = true"):
        build_topology(data, "test.toml")
    data = copy.deepcopy(TOPOLOGY)
    data["fabric"]["nic_efficiency"] = 2
    with pytest.raises(SpecError, match=r"\[fabric\]: nic_efficiency = 2(.0)?: must be <= 1"):
        build_topology(data, "test.toml")


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


@pytest.mark.parametrize("nodes", [0, -1])
def test_nodes_below_one(nodes):
    data = copy.deepcopy(TOPOLOGY)
    data["nodes"] = nodes
    with pytest.raises(SpecError, match=rf"nodes = {nodes}: must be >= 1"):
        build_topology(data, "test.toml")
    with pytest.raises(SpecError, match=rf"nodes \(override\) = {nodes}"):
        load_topology("h100-ib", nodes=nodes)


def test_every_node_count_builds_until_the_capacity():
    for nodes in (1, 3, 5, 6, 7, 9, 13):
        assert load_topology("h100-ib", nodes=nodes).num_nodes == nodes  # partly filled last leaf
    assert make_cluster(nodes=24, tiers=3, leaves_per_pod=4, cores=4).num_nodes == 24  # partly filled pod
    # 64-port switches: a leaf has 32 down and 32 up; a spine takes 8 uplinks from each leaf: 8 leaves
    assert make_cluster(nodes=32, switch_ports=64).num_nodes == 32
    with pytest.raises(SpecError, match=r"nodes = 33: exceeds the fabric's capacity of 32 nodes "
                                        r"\(\[fabric\] switch_ports = 64: a spine joins at most 8 leaves"):
        make_cluster(nodes=33, switch_ports=64)
    with pytest.raises(SpecError, match="switch_ports = 48: a leaf needs 32 downlinks and 32 uplinks"):
        make_cluster(nodes=2, switch_ports=48)
    # three tiers: a pod's spine takes 4 leaves x 8 = 32 down, 32 up; a core 16 ports of each pod: 4 pods
    assert make_cluster(nodes=64, tiers=3, leaves_per_pod=4, cores=8, switch_ports=64).num_nodes == 64
    with pytest.raises(SpecError, match="capacity of 64 nodes.*a core joins at most 4 pods of 4 leaves"):
        make_cluster(nodes=65, tiers=3, leaves_per_pod=4, cores=8, switch_ports=64)


def test_a100_cluster_of_megatrons_published_runs_builds():
    """Korthikanti et al.'s 530B on 280 GPUs (35 nodes) and SC21's 529.6B on 2,520 GPUs (315 nodes)."""
    for nodes in (35, 280, 315):
        c = load_topology("a100-hdr", nodes=nodes)
        assert c.num_gpus == 8 * nodes and c.fabric["leaves"] == -(-nodes // 2)


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
