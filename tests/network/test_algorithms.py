"""Collective algorithms: the price of each (NCCL's latency, the protocol's factor, the busiest
link), both fidelities agree without contention, the tuner's choice, a new algorithm as one record,
the acceptance figures of an 8-GPU H100 node."""

from __future__ import annotations

import pytest

from helpers import GB, flow_time
from simtrain.errors import SpecError
from simtrain.network.algorithms import (ALGORITHMS, REGISTRY, CollectiveAlgorithm, applicable, bandwidths,
                                         check_algorithm, phases, price, select_algorithm, uncontended_time)
from simtrain.network.phases import Phase
from simtrain.network.planner import Planner
from simtrain.network.nccl_protocols import GroupShape, latency_s
from simtrain.topology.cluster import load_topology
from simtrain.topology.routing.router import Router

pytestmark = pytest.mark.quick


def test_ring_price_is_nccl_latency_plus_the_busiest_link():
    c = load_topology("h100-ib", nodes=1)
    r = Router(c)
    n, S = 8, 2**30
    gpus = tuple(range(n))
    cost = price("all_reduce", "ring", gpus, S, r)
    expected = latency_s("ring", "all_reduce", "Simple", GroupShape(8, 1)) + 2 * (n - 1) / n * S / (450 * GB * 0.822)
    assert (cost.algorithm, cost.protocol, cost.channels) == ("ring", "Simple", 1)
    assert cost.time_s == pytest.approx(expected, rel=1e-12)
    assert uncontended_time("all_reduce", "ring", gpus, S, r, c) == cost.time_s
    tiny = price("all_reduce", "ring", gpus, 1024, r)
    assert tiny.protocol == "LL" and tiny.time_s == pytest.approx(
        latency_s("ring", "all_reduce", "LL", GroupShape(8, 1)) + 4 * 1.75 * 1024 / (450 * GB * 0.822))


def test_an_8_gpu_h100_node_reaches_nccl_s_measured_busbw():
    """NCCL maintainers (NVIDIA/nccl-tests issue 212): ~370 GB/s ring busbw, ~480 GB/s with
    NVLink SHARP on 8 H100s at large sizes."""
    c = load_topology("h100-ib", nodes=1)
    r = Router(c)
    gpus = tuple(range(8))
    ring = bandwidths("all_reduce", 8, 2**30, uncontended_time("all_reduce", "ring", gpus, 2**30, r, c))[1]
    nvls = bandwidths("all_reduce", 8, 2**30, uncontended_time("all_reduce", "nvls", gpus, 2**30, r, c))[1]
    assert 340 * GB <= ring <= 400 * GB
    assert 440 * GB <= nvls <= 500 * GB


@pytest.mark.parametrize("topology,op,algo,gpus", [
    ("h100-ib", "all_reduce", "ring", tuple(range(0, 64, 8))),
    ("h100-ib", "all_gather", "ring", tuple(range(16))),
    ("h100-ib", "reduce_scatter", "ring", tuple(range(0, 64, 2))),
    ("h100-ib", "all_reduce", "tree", tuple(range(0, 64, 8))),
    ("h100-ib", "all_reduce", "tree", tuple(range(0, 56, 8))),  # odd n: shifted second tree
    ("h100-ib", "all_reduce", "tree", tuple(range(32))),
    ("h100-ib", "all_reduce", "nvls", tuple(range(8))),
    ("h100-ib", "all_reduce", "nvls_tree", tuple(range(32))),
    ("h100-ib", "all_reduce", "hierarchical", tuple(range(32))),
    ("h100-ib", "all_to_all", "direct", tuple(range(8))),
    ("h100-ib", "all_to_all", "direct", tuple(range(0, 64, 8))),
    ("h100-rail", "all_to_all", "direct", tuple(range(32))),  # PXN relays
    ("h100-rail", "all_reduce", "ring", tuple(range(0, 256, 16))),
    ("a100-hdr", "all_reduce", "tree", tuple(range(24))),
    ("h100-ib", "p2p", "direct", (0, 9)),
])
def test_flow_and_analytic_agree_without_contention(topology, op, algo, gpus):
    c = load_topology(topology)
    r = Router(c)
    S = 64 * 2**20
    t, model = flow_time(c, [phases(op, gpus, S, r, algo)])
    assert t == pytest.approx(uncontended_time(op, algo, gpus, S, r, c), rel=0.01)
    assert model.usage.bytes_delivered == pytest.approx(model.usage.bytes_added, rel=1e-12)


def test_algorithm_selection():
    c = load_topology("h100-ib")
    r = Router(c)
    big, small = 2**30, 2**10
    node, two_nodes, across = tuple(range(8)), tuple(range(16)), tuple(range(0, 64, 8))
    assert select_algorithm("all_reduce", node, big, c, r) == "ring"
    assert select_algorithm("all_reduce", node, small, c, r) == "ring"  # no tree in a node
    assert select_algorithm("all_reduce", across, big, c, r) == "ring"
    assert select_algorithm("all_reduce", across, small, c, r) == "tree"
    assert select_algorithm("all_reduce", two_nodes, big, c, r) == "ring"  # every NIC: no need for hierarchical
    assert select_algorithm("all-gather", two_nodes, big, c, r) == "ring"
    assert select_algorithm("all_to_all", node, big, c, r) == "direct"
    assert select_algorithm("p2p", (0, 9), big, c, r) == "direct"
    assert select_algorithm("ring_shift", (0, 8), big, c, r) == "direct"
    assert select_algorithm("all_reduce", node, big, c, r, nvls=True) == "nvls"
    assert select_algorithm("all_reduce", two_nodes, big, c, r, nvls=True) == "nvls_tree"
    assert select_algorithm("all_reduce", across, big, c, r, nvls=True) == "ring"  # one GPU per node
    assert select_algorithm("all_reduce", across, big, c, r, force="tree") == "tree"
    # forced but not applicable: an error when strict, the tuner otherwise
    with pytest.raises(SpecError, match="hierarchical.*>= 2 nodes"):
        select_algorithm("all_reduce", node, big, c, r, force="hierarchical")
    with pytest.raises(SpecError, match="does not implement all-gather"):
        select_algorithm("all_gather", node, big, c, r, force="tree")
    with pytest.raises(SpecError, match="nvls.*off.*nvls = true"):
        select_algorithm("all_reduce", node, big, c, r, force="nvls")
    with pytest.raises(SpecError, match="nvls_tree.*>= 2 GPUs"):
        select_algorithm("all_reduce", across, big, c, r, force="nvls_tree", nvls=True)
    assert select_algorithm("all_gather", node, big, c, r, force="tree", strict=False) == "ring"
    with pytest.raises(SpecError, match="unknown collective algorithm 'rnig'; did you mean 'ring'"):
        select_algorithm("all_reduce", node, big, c, r, force="rnig")
    with pytest.raises(SpecError, match="unknown collective 'allreduce'; did you mean 'all-reduce'"):
        select_algorithm("allreduce", node, big, c, r)
    with pytest.raises(SpecError, match="unknown collective algorithm"):
        Planner(c, algo="bogus")


def test_protocols_by_size():
    """LL for tiny messages, LL128 in between, Simple for large ones (NCCL's tuner)."""
    c = load_topology("h100-ib", nodes=1)
    r = Router(c)
    node = tuple(range(8))
    protos = [price("all_reduce", "ring", node, size, r).protocol for size in (2**10, 2**24, 2**30)]
    assert protos == ["LL", "LL128", "Simple"]


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
    # two route latencies beat NCCL's tree latency for a tiny buffer; the root's links lose for a big one
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


def test_a_forced_algorithm_must_run_somewhere_in_the_run():
    """check_forced: the rule of ``simtrain collective --algo`` over a run's collectives."""
    from simtrain.network.algorithms import check_forced
    from simtrain.workload.program import Program

    c = load_topology("h100-ib", nodes=2)
    tp = tuple(range(8))  # one node
    dp = (0, 8)  # two nodes
    program = Program(group_sets=[(tp,), (dp,), ((0, 8),)])
    for comm, gs in ((None, -1), ("reduce_scatter+all_gather", 0), ("all_reduce", 1), ("p2p", 2)):
        program.append(0, 0, 0, "op", 0, -1, -1, comm=comm, group_set=gs)
    for algo in ("ring", "tree", "direct"):
        check_forced(algo, program, c)  # each runs one of the run's collectives
    check_forced(None, program, c)
    with pytest.raises(SpecError, match=r"^--collective-algo nvls: runs none of this run's collectives \(all-gather, "
                                        r"all-reduce, p2p, reduce-scatter\); it implements all-reduce, and algorithm "
                                        r"'nvls' needs all GPUs of the group on one node"):
        check_forced("nvls", program, c)
    with pytest.raises(SpecError, match="--network none makes communication free"):
        check_forced("ring", program, c, network="none")
    with pytest.raises(SpecError, match="unknown collective algorithm"):
        check_forced("rign", program, c)


@pytest.mark.quick
def test_the_collective_algo_setting_names_every_algorithm_of_the_registry():
    from simtrain.network.algorithms import ALGORITHMS
    from simtrain.settings import SETTINGS

    assert SETTINGS["collective_algo"].help.endswith(": " + ", ".join(ALGORITHMS))
