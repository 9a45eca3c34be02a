"""Clusters: counts and summary, bisection bandwidth, presets, loading from a path, load errors, the
A100 cluster of Megatron-LM's published 2,240- and 2,520-GPU runs.

Expectations are hand-checkable (see ``helpers.TOPOLOGY``): a DGX-H100-like node (8 GPUs, 8 x 400 Gb/s
= 50 GB/s NICs) and leaves of 4 nodes, so a leaf has 32 downlinks of 50 GB/s = 1.6 TB/s.
"""

from __future__ import annotations

import json

import pytest

from helpers import NIC_BPS, NVLINK_BPS, make_cluster, node_kinds
from simtrain.errors import SpecError
from simtrain.topology.cluster import bisection_bandwidth, list_topologies, load_topology, summary
from simtrain.topology.routing.router import Router


@pytest.mark.quick
def test_small_fat_tree_counts():
    c = make_cluster()  # 8 nodes, 2 leaves, 4 spines
    assert (c.num_nodes, c.gpus_per_node, c.num_gpus) == (8, 8, 64)
    s = summary(c)
    assert s["nodes_by_kind"] == {"gpu": 64, "nvswitch": 8, "nic": 64, "leaf": 2, "spine": 4}
    assert s["links_by_kind"] == {"nvlink": 64, "pcie": 64, "leaf": 64, "spine": 8}
    assert c.graph.number_of_edges() == 2 * (64 + 64 + 64 + 8)  # two directed edges per link
    # uplink per leaf-spine pair: 32 x 50 GB/s / 1 / 4 spines = 400 GB/s
    assert s["bandwidth_by_tier_Bps"] == {"nvlink": NVLINK_BPS, "pcie": 64e9, "leaf": NIC_BPS,
                                          "spine": 32 * NIC_BPS / 4}
    assert s["fabric"]["leaves"] == 2 and s["oversubscription"] == 1.0
    assert s["efficiency_by_tier"] == {"nvlink": 0.822, "pcie": 1.0, "leaf": 0.96, "spine": 0.96}
    assert s["nvls"] is False and s["fabric"]["nic_efficiency"] == 0.96
    json.dumps(s)


@pytest.mark.quick
def test_oversubscription_halves_bisection():
    full, half = make_cluster(), make_cluster(oversubscription=2.0)
    # halves = nodes 0-3 (leaf 0) and 4-7 (leaf 1): cut = leaf 0 uplinks = 32 x 50 GB/s
    assert bisection_bandwidth(full) == pytest.approx(32 * NIC_BPS)
    assert bisection_bandwidth(half) == pytest.approx(bisection_bandwidth(full) / 2)


@pytest.mark.quick
def test_bisection_single_node_is_nvlink_plus_nic_paths():
    c = make_cluster(nodes=1)
    # 4 GPUs x 450 GB/s through the NVSwitch + 4 x 50 GB/s through NIC -> leaf -> NIC
    assert bisection_bandwidth(c) == pytest.approx(4 * NVLINK_BPS + 4 * NIC_BPS)


# --- presets -------------------------------------------------------------------------------------


@pytest.mark.quick
def test_presets_listed():
    names = list_topologies()
    for name in ("a100-hdr", "h100-ib", "h200-ib", "b200-ib", "h100-rail", "h100-3tier",
                 "h800-rail", "gb200-nvl72", "h100-ib-2to1", "seed-h100"):
        assert name in names


@pytest.mark.quick
@pytest.mark.parametrize("name", list_topologies())
def test_every_preset_loads_with_nodes_override(name):
    c = load_topology(name)
    assert c.source == name and c.name == name
    if c.fabric_kind != "none":
        assert c.fabric["leaves"] >= 2
    assert load_topology(name, nodes=1).num_nodes == 1
    assert load_topology(name, nodes=c.num_nodes + 1).num_nodes == c.num_nodes + 1  # a partly filled leaf
    twice = load_topology(name, nodes=2 * c.num_nodes)
    assert twice.num_gpus == 2 * c.num_gpus
    assert bisection_bandwidth(c) > 0
    json.dumps(summary(c))


@pytest.mark.quick
def test_seed_h100_numbers():
    c = load_topology("seed-h100")
    r = Router(c)
    assert c.gpu.name == "seed-h100" and c.num_nodes == 8 and c.gpus_per_node == 8
    assert r.bandwidth(0, 1) == 450e9 and r.bandwidth(0, 63) == 50e9
    assert c.oversubscription == 1.0


@pytest.mark.quick
def test_gb200_nvl72_domain():
    c = load_topology("gb200-nvl72")
    r = Router(c)
    assert c.gpus_per_node == 72
    assert node_kinds(c, r.route(0, 71)) == ["gpu", "nvswitch", "gpu"]
    assert node_kinds(c, r.route(0, 72))[1] == "nic"


@pytest.mark.quick
def test_load_from_path(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('gpu = "h100-sxm"\nnodes = 1\n[node]\ngpus = 4\n')
    c = load_topology(str(path))
    assert c.name == "mine" and c.num_gpus == 4 and c.fabric_kind == "none"


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.quick
def test_unknown_preset_suggests_close_match():
    with pytest.raises(SpecError, match="h100-ib"):
        load_topology("h100-i")


@pytest.mark.quick
def test_malformed_toml_names_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('gpu = "h100-sxm"\nnodes = 2\n[node\ngpus = 8\n')
    with pytest.raises(SpecError, match=r"bad\.toml.*line 3"):
        load_topology(str(path))


# Megatron-LM's GPT 530B (Korthikanti et al. 2022, table 3; Narayanan et al., SC21, table 1: 529.6B)
GPT_530B = {"model_type": "gpt2", "n_embd": 20480, "n_layer": 105, "n_head": 128, "vocab_size": 51200,
            "n_positions": 2048, "n_inner": 81920, "activation_function": "gelu_new"}


def test_megatrons_a100_runs_fit_the_a100_cluster(tmp_path):
    """TP8 x PP35 (interleaved, 3 chunks) of GPT 530B with DP 8 on 2,240 GPUs (Korthikanti et al.)
    and DP 9 on 2,520 GPUs (SC21) take 280 and 315 DGX A100 nodes: both resolve, and the larger
    lowers to a program."""
    from simtrain import api
    from simtrain.topology.mesh import build_mesh
    from simtrain.workload.lower import lower

    path = tmp_path / "gpt-530b.json"
    path.write_text(json.dumps(GPT_530B))
    layout = dict(model=str(path), topology="a100-hdr", tp=8, pp=35, vpp=3, mbs=1, seq=2048, sp=False,
                  schedule="interleaved-1f1b", recompute="full")
    korthikanti = api.resolve({**layout, "gpus": 2240, "gbs": 2240})
    sc21 = api.resolve({**layout, "gpus": 2520, "gbs": 2520})
    assert (korthikanti.cluster.num_nodes, korthikanti.parallel.dp) == (280, 8)
    assert (sc21.cluster.num_nodes, sc21.parallel.dp) == (315, 9)
    par = sc21.parallel
    mesh = build_mesh(par.tp, par.cp, par.dp, par.pp, gpus_per_node=8)
    program = lower(sc21.model, par, sc21.gpu, api.build_schedule(sc21), mesh)
    assert len(program.ranks) == 35 and program.group_sets


@pytest.mark.quick
def test_link_capacities_are_the_graphs():
    cluster = load_topology("h100-ib-2to1", nodes=4)
    capacity = cluster.capacity_Bps
    assert len(capacity) == cluster.graph.number_of_edges()
    assert all(capacity[(u, v)] == d["capacity_Bps"] for u, v, d in cluster.graph.edges(data=True))
    assert cluster.capacity_Bps is capacity  # built once
