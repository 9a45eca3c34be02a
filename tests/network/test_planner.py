"""The planner: folded groups launch together in one phase, and so do p2p pairs; NVLink SHARP as the
topology says; the price names its protocol and channels; ZeRO-0 never beats ZeRO-1. Its shortcuts
change no price: a send priced from its route's cost, an algorithm skipped when NCCL's latency alone
exceeds the best price, a price inside one node reused on nodes of its kind give exactly (bit for
bit) the price of building every candidate's phases and taking the smallest, on random groups of
every preset."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from helpers import fat_tree, flow_time
from simtrain.errors import SpecError
from simtrain.network import algorithms
from simtrain.network.planner import Planner
from simtrain.topology.cluster import build_topology, list_topologies, load_topology
from simtrain.topology.routing.router import Router


@pytest.mark.quick
def test_plan_launches_all_folded_groups_together():
    c = fat_tree(2.0)
    net = Planner(c, algo="ring")
    groups = tuple(tuple(range(j, 64, 8)) for j in range(8))
    plan = net.plan("all_reduce", groups, 2**28)
    assert len(plan) == 1 and len(plan[0].flows) == 64
    together, _ = flow_time(c, [plan])
    alone, _ = flow_time(c, [net.plan("all_reduce", groups[:1], 2**28)])
    assert together / alone == pytest.approx(2.0, rel=0.1)
    assert net.collective_time("all_reduce", groups[0], 2**28) == pytest.approx(alone, rel=1e-6)
    p2p = net.plan("p2p", ((0, 8), (1, 9)), 1e6)
    assert len(p2p) == 1 and len(p2p[0].flows) == 2


@pytest.mark.quick
def test_nvls_follows_the_topology_unless_told():
    h100, a100 = load_topology("h100-ib"), load_topology("a100-hdr")
    assert Planner(h100).nvls and not Planner(a100).nvls
    assert not Planner(h100, nvls=False).nvls
    node = tuple(range(8))
    assert Planner(h100).algorithm("all_reduce", node, 2**30) == "nvls"
    assert Planner(h100, nvls=False).algorithm("all_reduce", node, 2**30) == "ring"
    assert Planner(a100).algorithm("all_reduce", node, 2**30) == "ring"


@pytest.mark.quick
def test_price_names_protocol_and_channels():
    net = Planner(load_topology("h100-ib"), nvls=False)
    cost = net.price("all_gather", tuple(range(32)), 2**30)
    assert (cost.algorithm, cost.protocol, cost.channels) == ("ring", "Simple", 8)
    assert net.collective_time("all_gather", tuple(range(32)), 2**30) == cost.time_s
    assert net.phases("all_gather", (5,), 2**30) == [] and net.price("all_gather", (5,), 2**30).time_s == 0


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topology=st.sampled_from(["h100-ib", "a100-hdr", "h100-rail", "h100-ib-2to1"]),
       gpus=st.sampled_from([8, 16, 32]), tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2]),
       seq=st.sampled_from([1024, 2048]), network=st.sampled_from(["analytic", "flow"]))
def test_zero0_is_never_faster_than_zero1(topology, gpus, tp, pp, seq, network):
    """ZeRO-0 all-reduces the gradients, ZeRO-1 reduce-scatters them and all-gathers the
    parameters: at least as much data moves either way, and the one tuner prices both, so
    ZeRO-0's step is never the shorter one (the same layout and network)."""
    from simtrain import api

    assume(tp * pp < gpus)
    dp = gpus // (tp * pp)
    base = dict(model="llama3-8b", topology=topology, gpus=gpus, tp=tp, pp=pp, seq=seq, gbs=2 * dp * pp,
                network=network)
    steps = [api.simulate(api.resolve({**base, "zero": zero})).report["step_time_s"] for zero in (0, 1)]
    assert steps[0] >= steps[1] * (1 - 1e-9)


OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def straightforward(op: str, gpus: tuple[int, ...], nbytes: float, router: Router, nvls: bool) -> algorithms.Price:
    """Every candidate's phases built and priced, the smallest time winning (ties in registry order)."""
    best = None
    for algo in algorithms.candidates(op, gpus, router.cluster, nvls):
        cand = algorithms.price(op, algo, gpus, nbytes, router)
        if best is None or cand.time_s < best.time_s:
            best = cand
    return best


def groups(n: int, per_node: int, rng: random.Random) -> list[tuple[int, ...]]:
    """Random groups: a node, a strided (data-parallel-like) set, a random subset, everyone."""
    node = rng.randrange(n // per_node)
    stride = per_node * rng.choice([1, 2])
    out = [tuple(range(node * per_node, (node + 1) * per_node)),
           tuple(range(rng.randrange(per_node), n, stride)),
           tuple(sorted(rng.sample(range(n), rng.randrange(2, 24)))),
           tuple(range(n))]
    return [g for g in out if len(g) >= 2]


@pytest.mark.parametrize("name", list_topologies())
def test_collective_prices_are_the_straightforward_ones(name):
    cluster = load_topology(name, nodes=3 if name == "gb200-nvl72" else 36)
    rng = random.Random(name)
    for nvls in (False, cluster.nvls):
        planner, router = Planner(cluster, nvls=nvls), Router(cluster, structural=False)
        for gpus in groups(cluster.num_gpus, cluster.gpus_per_node, rng):
            for op in OPS:
                if op == "all_to_all" and len(gpus) > 40:
                    continue  # n^2 flows: the small groups cover it
                for nbytes in (4.0, 3.0e6, 2.0**30):
                    assert planner.price(op, gpus, nbytes) == straightforward(op, gpus, nbytes, router, nvls), \
                        (op, len(gpus), nbytes)


@pytest.mark.parametrize("name", list_topologies())
def test_send_prices_are_the_straightforward_ones(name):
    cluster = load_topology(name, nodes=40)
    planner, router = Planner(cluster), Router(cluster, structural=False)
    rng = random.Random(name)
    n = cluster.num_gpus
    for _ in range(400):
        a, b = rng.randrange(n), rng.randrange(n)
        for nbytes in (0.0, 1.0, 3.7e8):
            assert planner.price("p2p", (a, b), nbytes) == algorithms.price("p2p", "direct", (a, b), nbytes, router)
    assert planner.price("p2p", (3, 3), 1e6).time_s == 0.0


@pytest.mark.parametrize("name", list_topologies())
def test_many_sends_at_once_are_priced_as_one_by_one(name):
    """A folded transfer's pairs (any two GPUs, one node, a GPU and itself) priced at once: the
    longest send exactly; too few pairs, no bytes or a bad GPU take the one-by-one path."""
    cluster = load_topology(name, nodes=3 if name == "gb200-nvl72" else 40)
    rng = random.Random(name)
    n, gpn = cluster.num_gpus, cluster.gpus_per_node
    pairs = [(a, rng.randrange(n) if i % 3 else a - a % gpn + rng.randrange(gpn))
             for i, a in enumerate(rng.randrange(n) for _ in range(600))] + [(7, 7)]
    for nbytes in (0.0, 1.0, 3.7e8):
        one_by_one = Planner(cluster)
        want = max(one_by_one.p2p_time(a, b, nbytes) for a, b in pairs)
        assert Planner(cluster).p2p_max_time(pairs, nbytes) == want
        assert Planner(cluster).p2p_max_time(pairs[:5], nbytes) == max(one_by_one.p2p_time(a, b, nbytes)
                                                                         for a, b in pairs[:5])
    with pytest.raises(SpecError, match=f"gpu {n}"):
        Planner(cluster).p2p_max_time(pairs + [(0, n)], 1.0)


@pytest.mark.quick
def test_the_ring_over_everyone_is_skipped_only_when_it_cannot_win():
    """4 bytes over 36 nodes: the ring's latency (2(n-1) steps) exceeds the tree's whole price, so
    it is never priced; at 1 GiB the ring is priced (and weighed), from its hops: its phases are
    built only when the flow network asks for them."""
    cluster = load_topology("h100-ib", nodes=36)
    planner = Planner(cluster, nvls=False)
    world = tuple(range(cluster.num_gpus))
    assert planner.price("all_reduce", world, 4.0).algorithm == "tree"
    assert ("all_reduce", "ring", world) not in planner._costs
    planner.price("all_reduce", world, 2.0**30)
    assert ("all_reduce", "ring", world) in planner._costs
    assert not planner._units
    planner.phases("all_reduce", world, 2.0**30)
    assert list(planner._units) == [("all_reduce", planner.algorithm("all_reduce", world, 2.0**30), world)]


@pytest.mark.parametrize("name", ["h100-ib", "h100-rail", "a100-hdr", "gb200-nvl72", "seed-h100"])
def test_prices_inside_a_node_are_reused_only_where_exact(name):
    """The same local group on every node (learned once, reused on the others), and random local
    groups in random order, against building every one."""
    cluster = load_topology(name, nodes=3 if name == "gb200-nvl72" else 12)
    gpn, rng = cluster.gpus_per_node, random.Random(name)
    shapes = [tuple(range(gpn)), tuple(range(0, gpn, 2)), tuple(rng.sample(range(gpn), min(gpn, 5)))]
    for nvls in (False, cluster.nvls):
        planner, router = Planner(cluster, nvls=nvls), Router(cluster, structural=False)
        for local in shapes:
            for node in range(cluster.num_nodes):
                gpus = tuple(node * gpn + i for i in local)
                for op in ("all_reduce", "all_gather", "reduce_scatter"):
                    for nbytes in (4.0, 2.0**27):
                        assert planner.price(op, gpus, nbytes) == straightforward(op, gpus, nbytes, router, nvls)
        assert planner._node_prices  # reused, not only built


@pytest.mark.quick
def test_a_tied_node_is_never_reused():
    """NVLink as wide as a NIC two GPUs share: their routes tie and ECMP picks by global numbers,
    so a pair's price inside one node is built on every node."""
    cluster = build_topology({
        "gpu": "h100-sxm", "nodes": 6,
        "node": {"gpus": 8, "nvswitch": True, "nvlink_GBps": 64, "nvlink_efficiency": 1.0, "nics": 4,
                 "nic_gbps": 400, "pcie_GBps": 64},
        "fabric": {"kind": "fat-tree", "tiers": 2, "nodes_per_leaf": 2, "spines": 2}}, "t")
    planner, router = Planner(cluster, nvls=False), Router(cluster, structural=False)
    for node in range(6):
        gpus = (node * 8, node * 8 + 1)
        assert planner.price("all_gather", gpus, 1e6) == straightforward("all_gather", gpus, 1e6, router, False)
    assert not planner._node_prices
