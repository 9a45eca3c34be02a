"""Flow fidelity: max-min fair flows, collective algorithms, the ``collective`` command."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from simtrain.cli.collective import add_collective_command, collective_report, parse_size
from simtrain.errors import SimtrainError, SpecError
from simtrain.network.algorithms import (ALGORITHMS, REGISTRY, CollectiveAlgorithm, uncontended_time, applicable,
                                         bandwidths, bus_factor, check_algorithm, phases, select_algorithm)
from simtrain.network.analytic import AnalyticNetwork, alpha_beta_time
from simtrain.network.chains import run_chains, run_transfers
from simtrain.network.phases import Phase, dtree_parents
from simtrain.network.planner import Planner
from simtrain.network.solver import FlowModel, max_min_rates
from simtrain.topology.cluster import build_topology, load_topology
from simtrain.topology.routes import Router

GB = 1e9
SW = "node0/nvswitch"
L1 = ("gpu0", SW)  # GPU 0 -> NVSwitch
L2 = (SW, "gpu1")  # NVSwitch -> GPU 1


def node(bw_GBps: float = 100, latency_us: float = 1.0, gpus: int = 8):
    return build_topology({"gpu": "h100-sxm", "nodes": 1,
                           "node": {"gpus": gpus, "nvlink_GBps": bw_GBps,
                                    "nvlink_latency_us": latency_us}}, "node")


def fat_tree(oversubscription: float, nodes_per_leaf: int = 1, spines: int = 2):
    """8 nodes x 8 H100, one 50 GB/s NIC per GPU; one node per leaf so every ring hop between
    nodes crosses a spine."""
    return build_topology({
        "gpu": "h100-sxm", "nodes": 8,
        "node": {"gpus": 8, "nvlink_GBps": 450, "nics": 8, "nic_gbps": 400, "pcie_GBps": 64},
        "fabric": {"kind": "fat-tree", "tiers": 2, "nodes_per_leaf": nodes_per_leaf,
                   "spines": spines, "oversubscription": oversubscription}}, "ft")


# ---- the flow model ---------------------------------------------------------------------------
def test_one_flow_one_link_takes_bytes_over_bandwidth_plus_latency():
    c = node()
    assert run_transfers(c, [(0.0, [((L1,), 1 * GB)], 0.0)]) == [pytest.approx(0.010, rel=1e-12)]
    assert run_transfers(c, [(0.5, [((L1,), 1 * GB)], 2e-6)]) == [pytest.approx(0.510002, rel=1e-12)]


def test_two_flows_share_a_link_and_the_survivor_speeds_up():
    c = node()
    model = FlowModel(c)
    model.add(0.0, 1, [((L1,), 1 * GB)])
    model.add(0.0, 2, [((L1,), 2 * GB)])
    assert model.next_event_s() == pytest.approx(0.020)  # both at 50 GB/s
    assert model.advance(0.015) == []
    assert model.flows.rate[model.flows.active].tolist() == [50 * GB, 50 * GB]
    assert model.advance(0.020) == [1]
    assert model.next_event_s() == pytest.approx(0.030)  # alone at 100 GB/s: 1 GB left
    assert model.advance(1.0) == [2]
    assert model.finish_s == {1: pytest.approx(0.020), 2: pytest.approx(0.030)}
    assert model.next_event_s() is None
    st = model.usage.stats()[L1]
    assert st["bytes"] == pytest.approx(3 * GB) and st["busy_s"] == pytest.approx(0.030)
    assert st["peak_utilisation"] == pytest.approx(1.0)


def test_max_min_textbook_chain():
    """Bertsekas & Gallager's progressive filling on two links of capacity 1 and 2: flow 0 crosses
    both, flow 1 only the first, flow 2 only the second -> 0.5, 0.5, 1.5."""
    rates = max_min_rates(np.array([0, 0, 1, 2]), np.array([0, 1, 0, 1]), np.array([1.0, 2.0]), 3)
    assert rates.tolist() == [0.5, 0.5, 1.5]


def test_three_flows_on_a_chain_with_a_bottleneck():
    """L1 and L2 100 GB/s. long: L1+L2 (1 GB); s1: L1 (2 GB); s2: L2 (0.5 GB); s3: L2 (1 GB).
    L2 is the bottleneck: long, s2, s3 at 33.3, s1 takes the rest of L1 (66.7). At 15 ms s2 ends
    (0.5/33.3) and s1 has 1 GB left; then L2: long, s3 at 50, L1: s1 at 50. At 25 ms long and s3
    end (0.5 GB left at 50), s1 has 0.5 GB left alone at 100 -> 30 ms."""
    c = node()
    model = FlowModel(c)
    done = run_transfers(c, [(0.0, [((L1, L2), 1 * GB)], 0.0), (0.0, [((L1,), 2 * GB)], 0.0),
                             (0.0, [((L2,), 0.5 * GB)], 0.0), (0.0, [((L2,), 1 * GB)], 0.0)],
                         model, check=True)
    assert done == pytest.approx([0.025, 0.030, 0.015, 0.025], rel=1e-9)
    assert model.usage.bytes_delivered == pytest.approx(model.usage.bytes_added) == 4.5 * GB


def test_late_advance_processes_intermediate_events_in_order():
    c = node()
    model = FlowModel(c)
    model.add(0.0, 7, [((L1,), 1 * GB)], 1e-3)
    model.add(0.0, 3, [((L1,), 2 * GB)])
    assert model.advance(10.0) == [7, 3]
    assert model.finish_s == {7: pytest.approx(0.021), 3: pytest.approx(0.030)}


def test_empty_and_zero_byte_transfers_complete_after_their_latency():
    c = node()
    model = FlowModel(c)
    model.add(1.0, 1, [], 5e-6)
    model.add(1.0, 2, [((L1,), 0.0), ((), 10.0)], 0.0)
    assert model.next_event_s() == pytest.approx(1.0)
    assert model.advance(1.0) == [2]
    assert model.next_event_s() == pytest.approx(1.000005)
    assert model.advance(2.0) == [1]
    with pytest.raises(ValueError, match="backwards"):
        model.add(0.5, 3, [((L1,), 1.0)])


def test_incremental_rates_equal_a_full_recompute():
    """Component-restricted recomputes give the same rates as progressive filling from scratch."""
    c = load_topology("h100-ib")
    router = Router(c)
    rng = random.Random(1)
    model = FlowModel(c)
    t = 0.0
    for tid in range(300):
        a, b = rng.sample(range(c.num_gpus), 2)
        model.add(t, tid, [(router.links(a, b), rng.uniform(1e6, 1e8))])
        t += rng.uniform(0, 2e-4)
        model.advance(t)
        if tid % 25 == 0:
            model.next_event_s()
            slots = np.flatnonzero(model.flows.active)
            paths = [model.flows.paths[s] for s in slots]
            pf = np.repeat(np.arange(slots.size), [p.size for p in paths])
            used, local = np.unique(np.concatenate(paths), return_inverse=True)
            ref = max_min_rates(pf, local, model.capacity[used], slots.size)
            assert np.allclose(model.flows.rate[slots], ref, rtol=1e-12)
            model.check_capacity()
    model.advance(1e3)
    assert model.active_flows == 0 and model.active_transfers == 0
    assert model.usage.bytes_delivered == pytest.approx(model.usage.bytes_added, rel=1e-12)


# ---- collectives: agreement of the two fidelities ---------------------------------------------
def _flow_time(cluster, groups_phases, check=True):
    model = FlowModel(cluster)
    return max(run_chains(cluster, [(0.0, p) for p in groups_phases], model, check)), model


def test_ring_all_reduce_in_one_node_matches_alpha_beta_in_both_fidelities():
    c = node(bw_GBps=450)
    r = Router(c)
    n, S, B, alpha = 8, 256 * 2**20, 450 * GB, 1e-6
    expected = 2 * (n - 1) / n * S / B + 2 * (n - 1) * alpha
    gpus = tuple(range(n))
    assert uncontended_time("all_reduce", "ring", gpus, S, r, c) == pytest.approx(expected, rel=1e-12)
    t, _ = _flow_time(c, [phases("all_reduce", gpus, S, r, "ring")])
    assert t == pytest.approx(expected, rel=0.01)
    assert AnalyticNetwork(c, r).collective_time("all_reduce", gpus, S) == pytest.approx(expected)


@pytest.mark.parametrize("op,algo,gpus", [
    ("all_reduce", "ring", tuple(range(0, 64, 8))),
    ("all_gather", "ring", tuple(range(16))),
    ("reduce_scatter", "ring", tuple(range(8))),
    ("all_reduce", "tree", tuple(range(0, 64, 8))),
    ("all_reduce", "tree", tuple(range(0, 56, 8))),  # odd n: shifted second tree
    ("all_reduce", "hierarchical", tuple(range(32))),
    ("all_to_all", "direct", tuple(range(8))),
    ("all_to_all", "direct", tuple(range(0, 64, 8))),
    ("p2p", "direct", (0, 9)),
])
def test_flow_and_analytic_agree_without_contention(op, algo, gpus):
    c = load_topology("h100-ib")
    r = Router(c)
    S = 64 * 2**20
    t, model = _flow_time(c, [phases(op, gpus, S, r, algo)])
    assert t == pytest.approx(uncontended_time(op, algo, gpus, S, r, c), rel=0.01)
    assert model.usage.bytes_delivered == pytest.approx(model.usage.bytes_added, rel=1e-12)


def test_analytic_ring_and_p2p_are_the_analytic_network():
    c = load_topology("h100-ib")
    r, net = Router(c), AnalyticNetwork(c, Router(c))
    for gpus in (tuple(range(8)), tuple(range(0, 64, 8)), tuple(range(64))):
        assert uncontended_time("all_reduce", "ring", gpus, 1e8, r, c) == \
            pytest.approx(net.collective_time("all_reduce", gpus, 1e8), rel=1e-12)
    assert Planner(c, r).p2p_time(0, 9, 1e8) == pytest.approx(net.p2p_time(0, 9, 1e8), rel=1e-12)


def test_double_binary_tree_matches_nccl():
    first, second = dtree_parents(8)
    assert first == [-1, 2, 4, 2, 0, 6, 4, 6]  # 0 -> 4 -> {2, 6} -> {1, 3}, {5, 7}
    assert second == [1, 3, 1, 7, 5, 3, 5, -1]  # mirror: 7 -> 3 -> {1, 5} -> {0, 2}, {4, 6}
    first, second = dtree_parents(7)
    assert second[1] == -1 and sum(p < 0 for p in second) == 1  # shifted: root 1


# ---- contention ---------------------------------------------------------------------------------
def test_oversubscription_doubles_concurrent_dp_all_reduce_in_flow_mode_only():
    """TP8 x DP8 on 8 nodes: the 8 DP groups (one per local GPU index) all-reduce at once across a
    fat-tree with one node per leaf. All 8 rings leave each leaf at 50 GB/s (NIC) = 400 GB/s =
    the leaf's downlink capacity: non-blocking at 1:1, half the rate at 2:1."""
    S = 256 * 2**20
    groups = [tuple(range(j, 64, 8)) for j in range(8)]
    flow, analytic, uplink = {}, {}, {}
    for os_ in (1.0, 2.0):
        c = fat_tree(os_)
        r = Router(c)
        flow[os_], model = _flow_time(c, [phases("all_reduce", g, S, r, "ring") for g in groups])
        analytic[os_] = max(uncontended_time("all_reduce", "ring", g, S, r, c) for g in groups)
        assert model.usage.bytes_delivered == pytest.approx(model.usage.bytes_added, rel=1e-12)
        assert max(st["peak_utilisation"] for st in model.usage.stats().values()) <= 1 + 1e-9
        uplink[os_] = c.graph.edges["leaf0", "spine0"]["bandwidth_Bps"]
    ratio = flow[2.0] / flow[1.0]
    assert 1.8 <= ratio <= 2.2
    # analytic: one ring alone. Its bottleneck is min(NIC 50, PCIe 64, leaf uplink per spine
    # 400 / oversubscription / 2 spines = 200 or 100 GB/s shared by at most one hop) = the NIC at
    # both ratios, so oversubscription explains no difference at all: ratio exactly 1.
    assert uplink == {1.0: 200 * GB, 2.0: 100 * GB}
    c = fat_tree(2.0)
    alpha = max(Router(c).latency(a, b) for a, b in zip(groups[0], groups[0][1:] + groups[0][:1]))
    assert analytic[2.0] == pytest.approx(alpha_beta_time("all_reduce", 8, S, 50 * GB, alpha))
    assert analytic[2.0] / analytic[1.0] == pytest.approx(1.0, abs=1e-12)
    # and flow mode at 1:1 is the uncontended analytic time
    assert flow[1.0] == pytest.approx(analytic[1.0], rel=1e-6)


def test_plan_launches_all_folded_groups_together():
    c = fat_tree(2.0)
    net = Planner(c, algo="ring")
    groups = tuple(tuple(range(j, 64, 8)) for j in range(8))
    plan = net.plan("all_reduce", groups, 2**28)
    assert len(plan) == 1 and len(plan[0].flows) == 64
    together, _ = _flow_time(c, [plan])
    alone, _ = _flow_time(c, [net.plan("all_reduce", groups[:1], 2**28)])
    assert together / alone == pytest.approx(2.0, rel=0.1)
    assert net.collective_time("all_reduce", groups[0], 2**28) == pytest.approx(alone, rel=1e-6)
    p2p = net.plan("p2p", ((0, 8), (1, 9)), 1e6)
    assert len(p2p) == 1 and len(p2p[0].flows) == 2


def test_contended_runs_are_deterministic():
    c = fat_tree(2.0, nodes_per_leaf=2, spines=4)
    r = Router(c)
    chains = [(j * 1e-5, phases("all_reduce", tuple(range(j, 64, 8)), 2**26, r, "ring"))
              for j in range(8)]
    assert run_chains(c, chains) == run_chains(c, chains)


# ---- algorithms and bandwidths -----------------------------------------------------------------
def test_algorithm_selection():
    c = load_topology("h100-ib")
    r = Router(c)
    big, small = 2**30, 2**10
    across = tuple(range(0, 64, 8))
    assert select_algorithm("all_reduce", tuple(range(8)), big, c, r) == "ring"
    assert select_algorithm("all_reduce", tuple(range(8)), small, c, r) == "ring"  # no tree in a node
    assert select_algorithm("all_reduce", across, big, c, r) == "ring"
    assert select_algorithm("all_reduce", across, small, c, r) == "tree"
    assert select_algorithm("all_reduce", tuple(range(16)), big, c, r) == "hierarchical"
    assert select_algorithm("all-gather", tuple(range(16)), big, c, r) == "ring"
    assert select_algorithm("all_to_all", tuple(range(8)), big, c, r) == "direct"
    assert select_algorithm("p2p", (0, 9), big, c, r) == "direct"
    assert select_algorithm("all_reduce", tuple(range(8)), big, c, r, nvls=True) == "nvls"
    assert select_algorithm("all_reduce", across, big, c, r, nvls=True) == "ring"
    assert select_algorithm("all_reduce", across, big, c, r, force="tree") == "tree"
    # forced but not applicable: an error when strict, the tuner otherwise
    with pytest.raises(SpecError, match="hierarchical.*>= 2 nodes"):
        select_algorithm("all_reduce", tuple(range(8)), big, c, r, force="hierarchical")
    with pytest.raises(SpecError, match="does not implement all-gather"):
        select_algorithm("all_gather", tuple(range(8)), big, c, r, force="tree")
    with pytest.raises(SpecError, match="nvls.*off"):
        select_algorithm("all_reduce", tuple(range(8)), big, c, r, force="nvls")
    assert select_algorithm("all_gather", tuple(range(8)), big, c, r, force="tree",
                            strict=False) == "ring"
    with pytest.raises(SpecError, match="unknown collective algorithm 'rnig'; did you mean 'ring'"):
        select_algorithm("all_reduce", tuple(range(8)), big, c, r, force="rnig")
    with pytest.raises(SpecError, match="unknown collective 'allreduce'; did you mean 'all-reduce'"):
        select_algorithm("allreduce", tuple(range(8)), big, c, r)
    with pytest.raises(SpecError, match="unknown collective algorithm"):
        Planner(c, algo="bogus")


def _star_phases(op, gpus, nbytes, router):
    """A naive all-reduce: every GPU sends S to the first, which sends S back to each."""
    root, others = gpus[0], gpus[1:]
    if not others or nbytes <= 0:
        return []
    alpha = max(router.latency(g, root) for g in others)
    return [Phase(tuple((router.links(g, root), nbytes) for g in others), alpha, "star reduce"),
            Phase(tuple((router.links(root, g), nbytes) for g in others), alpha, "star broadcast")]


def test_a_new_algorithm_is_one_record():
    """A registry with one more record: the checks, the tuner and the planner take it up, and
    both fidelities time it alike; the built-in registry is untouched."""
    c = load_topology("h100-ib")
    r = Router(c)
    registry = {**REGISTRY, "star": CollectiveAlgorithm("star", ("all_reduce",), _star_phases)}
    across = tuple(range(0, 64, 8))
    assert check_algorithm("star", registry) == "star"
    assert "does not implement all-gather" in applicable("star", "all_gather", across, c, registry=registry)
    # two route latencies beat the tree's 2 log2(n) for a tiny buffer; the root's links lose for a big one
    assert select_algorithm("all_reduce", across, 2**10, c, r, registry=registry) == "star"
    assert select_algorithm("all_reduce", across, 2**30, c, r, registry=registry) == \
        select_algorithm("all_reduce", across, 2**30, c, r) == "ring"
    planner = Planner(c, r, algo="star", registry=registry)
    assert planner.algorithm("all_reduce", across, 2**30) == "star"
    S = 64 * 2**20
    t, _ = _flow_time(c, [planner.phases("all_reduce", across, S)])
    assert t == pytest.approx(planner.collective_time("all_reduce", across, S), rel=0.01)
    assert "star" not in ALGORITHMS and "star" not in REGISTRY
    with pytest.raises(SpecError, match="unknown collective algorithm 'star'"):
        check_algorithm("star")


def test_nvls_beats_ring_inside_a_node():
    c = node(bw_GBps=450, latency_us=0.0)
    r = Router(c)
    S, gpus = 2**30, tuple(range(8))
    t = uncontended_time("all_reduce", "nvls", gpus, S, r, c)
    assert t == pytest.approx(9 / 8 * S / (450 * GB))
    flow, _ = _flow_time(c, [phases("all_reduce", gpus, S, r, "nvls")])
    assert flow == pytest.approx(t, rel=0.01)
    assert t < uncontended_time("all_reduce", "ring", gpus, S, r, c)


def test_busbw_of_an_uncontended_ring_in_one_node_is_the_link_bandwidth():
    c = node(bw_GBps=450, latency_us=0.0)
    rep = collective_report("all-reduce", size_bytes=2**30, gpus=8, topology=c, network="flow",
                            algo="ring")
    assert rep["busbw_Bps"] == pytest.approx(450 * GB, rel=1e-9)
    assert rep["algbw_Bps"] == pytest.approx(450 * GB * 8 / 14, rel=1e-9)
    for op in ("all-gather", "reduce-scatter"):
        rep = collective_report(op, size_bytes=2**30, gpus=8, topology=c)
        assert rep["busbw_Bps"] == pytest.approx(450 * GB, rel=1e-9)
    assert bus_factor("all_to_all", 8) == 7 / 8 and bus_factor("p2p", 2) == 1.0
    assert bandwidths("all_reduce", 4, 1e9, 1.0) == (1e9, 1.5e9)


# ---- the collective command ------------------------------------------------------------------
def test_parse_size():
    assert parse_size("256M") == 256 * 2**20
    assert parse_size("1G") == 2**30
    assert parse_size("64KiB") == 65536
    assert parse_size("1GB") == 10**9
    assert parse_size("4096") == 4096
    assert parse_size("1.5k") == 1536
    for bad in ("1x", "", "-1", "G"):
        with pytest.raises(SpecError, match="size"):
            parse_size(bad)


def test_collective_report_concurrent_groups_show_contention():
    c = fat_tree(2.0)
    dp = list(range(0, 64, 8))
    flow = collective_report("all-reduce", size_bytes=2**28, ranks=dp, topology=c, algo="ring",
                             network="flow", concurrent_groups=8)
    assert flow["groups"] == [list(range(j, 64, 8)) for j in range(8)]
    assert flow["time_s"] / flow["uncontended_time_s"] == pytest.approx(2.0, rel=0.1)
    assert flow["top_links"] and flow["top_links"][0]["mean_utilisation"] <= 1 + 1e-9
    analytic = collective_report("all-reduce", size_bytes=2**28, ranks=dp, topology=c,
                                 algo="ring", concurrent_groups=8)
    assert analytic["time_s"] == pytest.approx(analytic["uncontended_time_s"])
    blocks = collective_report("all-gather", size_bytes=2**20, gpus=8, topology=c,
                               concurrent_groups=3)
    assert blocks["groups"] == [list(range(8 * k, 8 * k + 8)) for k in range(3)]
    assert set(flow) >= {"time_s", "algbw_Bps", "busbw_Bps", "algorithm", "network", "ranks"}


def test_collective_report_bad_inputs():
    c = load_topology("h100-ib")
    one = collective_report("all-to-all", size_bytes=2**20, gpus=1, topology=c, network="flow")
    assert one["time_s"] == 0.0 and one["algbw_Bps"] is None
    with pytest.raises(SpecError, match=r"rank 64 is out of range \[0, 64\).*--nodes"):
        collective_report("all-reduce", size_bytes=1, ranks=[0, 64], topology=c)
    with pytest.raises(SpecError, match="more than the 64 GPUs"):
        collective_report("all-reduce", size_bytes=1, gpus=65, topology=c)
    with pytest.raises(SpecError, match="did you mean 'ring'"):
        collective_report("all-reduce", size_bytes=1, gpus=8, topology=c, algo="rign")
    with pytest.raises(SpecError, match="ranks repeat"):
        collective_report("all-reduce", size_bytes=1, ranks=[1, 1], topology=c)
    with pytest.raises(SpecError, match="either --gpus N or --ranks"):
        collective_report("all-reduce", size_bytes=1, topology=c)
    with pytest.raises(SpecError, match="exactly two ranks"):
        collective_report("p2p", size_bytes=1, ranks=[0, 1, 2], topology=c)
    with pytest.raises(SpecError, match="--network"):
        collective_report("all-reduce", size_bytes=1, gpus=8, topology=c, network="fast")
    with pytest.raises(SpecError, match="concurrent-groups 9"):
        collective_report("all-reduce", size_bytes=1, gpus=8, topology=c, concurrent_groups=9)


def _cli(*argv: str) -> tuple[int, str]:
    import argparse
    import contextlib
    import io

    from simtrain.cli.main import _Parser

    parser = _Parser(prog="simtrain")
    add_collective_command(parser.add_subparsers(dest="command", parser_class=_Parser))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        args = parser.parse_args(list(argv))
        assert isinstance(args, argparse.Namespace)
        code = args.func(args)
    return code, out.getvalue()


def test_collective_cli():
    code, out = _cli("collective", "all-reduce", "--size", "256M", "--gpus", "8",
                     "--topology", "h100-ib")
    assert code == 0 and "ring" in out and "busbw GB/s" in out
    code, out = _cli("collective", "all-reduce", "--size", "64M", "--ranks", "0,8,16,24",
                     "--topology", "h100-ib", "--network", "flow", "--concurrent-groups", "2",
                     "--json")
    rep = json.loads(out)
    assert code == 0 and rep["network"] == "flow" and rep["groups"][1] == [1, 9, 17, 25]
    assert rep["size_bytes"] == 64 * 2**20 and "top_links" in rep
    with pytest.raises(SimtrainError, match="--size"):
        _cli("collective", "all-reduce", "--size", "lots", "--gpus", "8", "--topology", "h100-ib")
    with pytest.raises(SimtrainError, match="out of range"):
        _cli("collective", "p2p", "--size", "1M", "--ranks", "0,64", "--topology", "h100-ib")
    with pytest.raises(SimtrainError):
        _cli("collective", "all-reduce", "--size", "1M", "--topology", "h100-ib")


def test_phase_volumes():
    c = load_topology("h100-ib")
    r = Router(c)
    S = 8e6
    (ring,) = phases("all_reduce", tuple(range(8)), S, r, "ring")
    assert len(ring.flows) == 8 and ring.flows[0][1] == pytest.approx(2 * 7 / 8 * S)
    assert ring.latency_s == pytest.approx(14 * r.latency(0, 1))
    (a2a,) = phases("all_to_all", tuple(range(4)), S, r, "direct")
    assert len(a2a.flows) == 12 and a2a.nbytes == pytest.approx(3 * S)
    hier = phases("all_reduce", tuple(range(16)), S, r, "hierarchical")
    assert [len(p.flows) for p in hier] == [16, 16, 16]
    assert hier[1].flows[0][1] == pytest.approx(2 * 1 / 2 * S / 8)
    assert phases("all_reduce", (3,), S, r, "ring") == [] and phases("p2p", (2, 2), S, r, "direct") == []
    assert isinstance(ring, Phase)
