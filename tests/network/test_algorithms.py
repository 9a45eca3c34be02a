"""Collective algorithms: both fidelities agree without contention, the tuner's choice, a new
algorithm as one record, NVLS inside a node."""

from __future__ import annotations

import pytest

from helpers import GB, flow_time, nvlink_node
from simtrain.errors import SpecError
from simtrain.network.algorithms import (ALGORITHMS, REGISTRY, CollectiveAlgorithm, applicable, check_algorithm,
                                         phases, select_algorithm, uncontended_time)
from simtrain.network.analytic import AnalyticNetwork
from simtrain.network.phases import Phase
from simtrain.network.planner import Planner
from simtrain.topology.cluster import load_topology
from simtrain.topology.routes import Router


def test_ring_all_reduce_in_one_node_matches_alpha_beta_in_both_fidelities():
    c = nvlink_node(bw_GBps=450)
    r = Router(c)
    n, S, B, alpha = 8, 256 * 2**20, 450 * GB, 1e-6
    expected = 2 * (n - 1) / n * S / B + 2 * (n - 1) * alpha
    gpus = tuple(range(n))
    assert uncontended_time("all_reduce", "ring", gpus, S, r, c) == pytest.approx(expected, rel=1e-12)
    t, _ = flow_time(c, [phases("all_reduce", gpus, S, r, "ring")])
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
    t, model = flow_time(c, [phases(op, gpus, S, r, algo)])
    assert t == pytest.approx(uncontended_time(op, algo, gpus, S, r, c), rel=0.01)
    assert model.usage.bytes_delivered == pytest.approx(model.usage.bytes_added, rel=1e-12)


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
    t, _ = flow_time(c, [planner.phases("all_reduce", across, S)])
    assert t == pytest.approx(planner.collective_time("all_reduce", across, S), rel=0.01)
    assert "star" not in ALGORITHMS and "star" not in REGISTRY
    with pytest.raises(SpecError, match="unknown collective algorithm 'star'"):
        check_algorithm("star")


def test_nvls_beats_ring_inside_a_node():
    c = nvlink_node(bw_GBps=450, latency_us=0.0)
    r = Router(c)
    S, gpus = 2**30, tuple(range(8))
    t = uncontended_time("all_reduce", "nvls", gpus, S, r, c)
    assert t == pytest.approx(9 / 8 * S / (450 * GB))
    flow, _ = flow_time(c, [phases("all_reduce", gpus, S, r, "nvls")])
    assert flow == pytest.approx(t, rel=0.01)
    assert t < uncontended_time("all_reduce", "ring", gpus, S, r, c)
