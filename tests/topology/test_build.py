"""Building a cluster's graph: attributes (line rate and achievable rate per link), shared NICs, GPU
tables, partly filled last leaves and pods, graphs where a GPU has no route."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from helpers import TOPOLOGY, make_cluster, node_kinds
from simtrain.errors import SpecError
from simtrain.specs.gpu import get_gpu
from simtrain.topology.build import build_graph, check_graph, link_kinds, routable
from simtrain.topology.cluster import build_topology, list_topologies, load_topology, preset_table, summary
from simtrain.topology.spec import parse_spec
from topology.reference_build import assert_same_graph, reference_graph
from simtrain.topology.routing.router import Router

pytestmark = pytest.mark.quick


def test_graph_attributes_and_gpu_ids():
    c = make_cluster()
    g = c.graph
    assert c.gpu_id(9) == "gpu9" and c.node_of(9) == 1 and c.node_of(63) == 7
    assert g.nodes["gpu9"] == {"kind": "gpu", "index": 9, "node": 1, "local": 1, "latency_s": 0.0}
    for u, v, d in g.edges(data=True):
        assert g.has_edge(v, u)
        assert isinstance(d["bandwidth_Bps"], float) and d["bandwidth_Bps"] > 0
        assert 0 < d["capacity_Bps"] <= d["bandwidth_Bps"]
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
    assert c.gpu.name == "my-h100" and Router(c).bandwidth(0, 1) == pytest.approx(300e9 * 0.822)


# --- graphs that cannot route ---------------------------------------------------------------------


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


def test_achievable_rate_per_tier():
    data = copy.deepcopy(TOPOLOGY)
    data["node"]["nvlink_efficiency"] = 0.5
    data["fabric"]["nic_efficiency"] = 0.8
    g = build_topology(data, "eff.toml").graph
    assert g.edges["gpu0", "node0/nvswitch"]["capacity_Bps"] == pytest.approx(225e9)
    assert g.edges["node0/nic0", "leaf0"]["capacity_Bps"] == pytest.approx(40e9)
    assert g.edges["leaf0", "spine0"]["capacity_Bps"] == pytest.approx(0.8 * g.edges["leaf0", "spine0"]["bandwidth_Bps"])
    assert g.edges["gpu0", "node0/nic0"]["capacity_Bps"] == g.edges["gpu0", "node0/nic0"]["bandwidth_Bps"]  # PCIe


def test_partly_filled_last_leaf_and_pod():
    c = make_cluster(nodes=6)  # leaves of 4 nodes: the second holds 2
    assert summary(c)["nodes_by_kind"]["leaf"] == 2
    assert sorted(c.graph.predecessors("leaf1")) == sorted(
        [f"node{n}/nic{k}" for n in (4, 5) for k in range(8)] + [f"spine{s}" for s in range(4)])
    # uplinks keep the design size of a full leaf: 32 x 50 GB/s / 4 spines
    assert c.graph.edges["leaf1", "spine0"]["bandwidth_Bps"] == pytest.approx(400e9)
    three = make_cluster(nodes=20, tiers=3, leaves_per_pod=4, cores=4)  # 5 leaves: pods of 4 and 1
    assert summary(three)["fabric"]["pods"] == 2
    assert Router(three).route(0, 159)[4].startswith("core")
    rail = make_cluster(nodes=6, kind="rail-optimized", nodes_per_leaf=4)
    assert summary(rail)["nodes_by_kind"]["leaf"] == 16  # two groups of 8 rail leaves


# --- the fast builder against the straightforward one; specs whose full check is skipped -------


def _variants() -> list[tuple[str, dict[str, Any], int | None]]:
    out: list[tuple[str, dict[str, Any], int | None]] = [(name, preset_table(name), None) for name in list_topologies()]
    partly = copy.deepcopy(TOPOLOGY)
    partly["fabric"].update(nodes_per_leaf=3, oversubscription=2.0)
    out.append(("partly-filled-2to1", partly, 7))
    three = preset_table("h100-3tier")
    out.append(("3tier-partly-filled", three, 37))
    rail = preset_table("h100-rail")
    out.append(("rail-partly-filled", rail, 13))
    pcie = copy.deepcopy(TOPOLOGY)
    pcie["node"] = {"gpus": 4, "nvswitch": False, "nics": 2, "nic_gbps": 400}
    out.append(("no-nvswitch", pcie, 3))
    single = copy.deepcopy(TOPOLOGY)
    single["fabric"] = {"kind": "none"}
    out.append(("no-fabric", single, 1))
    return out


@pytest.mark.parametrize("label, data, nodes", _variants(), ids=lambda v: v if isinstance(v, str) else "")
def test_builder_matches_the_reference(label: str, data: dict[str, Any], nodes: int | None) -> None:
    spec = parse_spec(data, label, nodes)
    assert_same_graph(build_graph(spec), reference_graph(spec))


def _unroutable() -> list[tuple[str, dict[str, Any], int | None]]:
    two_nodes = copy.deepcopy(TOPOLOGY)
    two_nodes["fabric"] = {"kind": "none"}
    split_nics = copy.deepcopy(TOPOLOGY)
    split_nics["fabric"] = {"kind": "none"}
    split_nics["node"] = {"gpus": 4, "nvswitch": False, "nics": 2, "nic_gbps": 400}
    isolated = copy.deepcopy(TOPOLOGY)
    isolated["fabric"] = {"kind": "none"}
    isolated["node"] = {"gpus": 2, "nvswitch": False}
    return [("two-nodes-no-fabric", two_nodes, 2), ("nics-no-fabric", split_nics, 1),
            ("isolated-gpus", isolated, 1)]


@pytest.mark.parametrize("label, data, nodes", _variants(), ids=lambda v: v if isinstance(v, str) else "")
def test_routable_specs_pass_the_full_check(label: str, data: dict[str, Any], nodes: int | None) -> None:
    """What lets build_topology skip the full check: a spec it calls routable gives a graph the
    check passes (and the builder's own tiers have the line rates the graph's links have)."""
    spec = parse_spec(data, label, nodes)
    g = build_graph(spec)
    if routable(spec):
        check_graph(g, spec, label)
    tiers = {d["tier"]: d["bandwidth_Bps"] for _, _, d in g.edges(data=True)}
    assert tiers == {t: bw for t, (bw, _) in link_kinds(spec).items() if t in tiers}


@pytest.mark.parametrize("label, data, nodes", _unroutable(), ids=lambda v: v if isinstance(v, str) else "")
def test_unroutable_specs_are_checked(label: str, data: dict[str, Any], nodes: int | None) -> None:
    spec = parse_spec(data, label, nodes)
    assert not routable(spec)
    with pytest.raises(SpecError, match="has no route to gpu"):
        check_graph(build_graph(spec), spec, label)
    with pytest.raises(SpecError, match="has no route to gpu"):
        build_topology(data, label, nodes)


def test_every_preset_is_routable() -> None:
    """The presets skip the full check; the check itself passes on each of them."""
    for name in list_topologies():
        spec = parse_spec(preset_table(name), name)
        assert routable(spec), name
        check_graph(build_graph(spec), spec, name)


def test_routable_never_hides_a_failing_check() -> None:
    """Over a grid of small specs (GPUs per node, NVSwitch, NICs, fabric, node count): wherever
    the full check fails, routable is False; wherever routable is True, the check passes."""
    seen = {True: 0, False: 0}
    for gpus in (1, 2, 4):
        for nvswitch in (True, False):
            for nics in (0, 1, 2):
                for fabric in ("none", "fat-tree", "rail-optimized"):
                    for nodes in (1, 2, 3):
                        data = copy.deepcopy(TOPOLOGY)
                        data["node"] = {"gpus": gpus, "nvswitch": nvswitch, "nics": nics,
                                        **({"nic_gbps": 400} if nics else {})}
                        if fabric == "none":
                            data["fabric"] = {"kind": "none"}
                        else:
                            data["fabric"].update(kind=fabric, nodes_per_leaf=2)
                        try:
                            spec = parse_spec(data, "grid", nodes)
                        except SpecError:
                            continue
                        try:
                            check_graph(build_graph(spec), spec, "grid")
                            passes = True
                        except SpecError:
                            passes = False
                        assert passes or not routable(spec), (gpus, nvswitch, nics, fabric, nodes)
                        seen[passes] += 1
    assert seen[True] > 10 and seen[False] > 3
