"""Links of many routes at once: on every preset, and with degraded or failed links, every route's
links (in path order), bottleneck and latency equal the router's own, bit for bit; the busiest
link of many flows equals the phase built from them."""

from __future__ import annotations

import random

import numpy as np
import pytest

from simtrain.network.phases import Phase, hops_time, phase_time
from simtrain.topology.cluster import list_topologies, load_topology
from simtrain.topology.faults import perturb_links
from simtrain.topology.routing.router import Router


def _pairs(cluster, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random pairs: any two GPUs, two of one node, two of one leaf's nodes, a GPU and itself."""
    rng = random.Random(seed)
    n, gpn = cluster.num_gpus, cluster.gpus_per_node
    src, dst = [], []
    for i in range(count):
        a = rng.randrange(n)
        kind = i % 4
        if kind == 0:
            b = rng.randrange(n)
        elif kind == 1:
            b = a - a % gpn + rng.randrange(gpn)
        elif kind == 2:
            b = min(n - 1, a + gpn * rng.randrange(1, 3))
        else:
            b = a
        src.append(a)
        dst.append(b)
    return np.array(src), np.array(dst)


def _check_routes(cluster, router: Router, count: int = 1200, seed: int = 5) -> None:
    plain = Router(cluster, structural=router.structural)
    ids = router.link_ids()
    src, dst = _pairs(cluster, count, seed)
    rows = ids.routes(src, dst)
    assert rows.dtype == np.int32  # every id of these clusters fits: half the memory of int64
    bandwidth, latency = ids.route_costs(src, dst)
    for k, (a, b) in enumerate(zip(src.tolist(), dst.tolist())):
        want = [ids.id(e) for e in plain.links(a, b)]
        assert [i for i in rows[k].tolist() if i >= 0] == want, (a, b)
        if a != b:
            assert (bandwidth[k], latency[k]) == (plain.bandwidth(a, b), plain.latency(a, b)), (a, b)
    links, route = ids.route_links(src, dst)
    assert route.tolist() == sorted(route.tolist())  # routes in order


@pytest.mark.parametrize("name", list_topologies())
def test_routes_are_the_routers_on_every_preset(name):
    cluster = load_topology(name, nodes=3 if name == "gb200-nvl72" else 40)  # 3 pods of the 3-tier preset
    router = Router(cluster)
    _check_routes(cluster, router)
    # the tables, not the router, gave the routes across nodes
    assert (router.link_ids().fabric_table() is None) == (cluster.fabric_kind == "none")


@pytest.mark.quick
def test_routes_on_a_degraded_fabric_and_after_a_failed_link():
    """A spine link at 1% of its speed (below a NIC's) makes its leaf's and pod's middles unequal:
    the router's own choice there (the widest), the tables elsewhere; a failed link makes the router
    search the graph: its routes."""
    cluster = load_topology("h100-3tier", nodes=40)
    slow = perturb_links(cluster, (("leaf0", "pod0/spine1", 0.01), ("pod1/spine1", "core1", 0.01)), ())
    router = Router(slow)
    table = router.link_ids().fabric_table()
    assert not table["even_up"][0] and not table["even_down"][0] and table["even_up"][1:].all()
    assert table["even_to_core"].tolist() == [True, False, True] == table["even_from_core"].tolist()
    _check_routes(slow, router, count=3000, seed=6)
    cut = perturb_links(load_topology("h100-ib", nodes=40), (), (("leaf0", "spine3"),))
    _check_routes(cut, Router(cut, structural=False), seed=7)


@pytest.mark.quick
def test_the_busiest_link_of_many_flows_is_the_phases():
    """Flows with different bytes that share links: the loads add in flow order, as the phase's."""
    cluster = load_topology("h100-rail", nodes=24)
    router = Router(cluster)
    src, dst = _pairs(cluster, 3000, 9)
    rng = np.random.default_rng(3)
    nbytes = rng.uniform(0.1, 3.0, len(src)) / 7
    phase = Phase(tuple((router.links(a, b), w) for a, b, w in zip(src.tolist(), dst.tolist(), nbytes.tolist())))
    assert hops_time(src, dst, nbytes, Router(cluster)) == phase_time(phase, cluster)
    same = src == dst
    assert hops_time(src[same], dst[same], nbytes[same], router) == 0.0  # no link crossed


def _uniform_clusters():
    """Uniform clusters: presets at a few sizes (partly filled leaves, pods, rail groups)."""
    out = [load_topology(name) for name in list_topologies()]
    out += [load_topology("h100-ib-2to1", nodes=7), load_topology("h100-3tier", nodes=37),
            load_topology("h100-rail", nodes=13), load_topology("gb200-nvl72", nodes=3)]
    return out


@pytest.mark.quick
@pytest.mark.parametrize("cluster", _uniform_clusters(), ids=lambda c: f"{c.name}-{c.num_nodes}")
def test_renamed_tables_equal_the_tables_read_per_gpu(cluster):
    """On a uniform cluster the GPUs' tables and the nodes' kinds come from one node, renamed:
    the same as read GPU by GPU and node by node on the same graph marked not uniform, in every
    order GPUs are learned in (NIC numbers included)."""
    from dataclasses import replace

    from simtrain.topology.routing.link_ids import member_links

    assert cluster.uniform
    plain = replace(cluster, uniform=False)
    rng = np.random.default_rng(3)
    for order in (np.arange(cluster.num_gpus), rng.permutation(cluster.num_gpus)):
        fast, slow = Router(cluster).link_ids(), Router(plain).link_ids()
        for part in np.array_split(order, 3):
            got, want = member_links(fast, part), member_links(slow, part)
            for a, b in zip(got, want):
                assert np.array_equal(a, b)
    fast_r, slow_r = Router(cluster), Router(plain)
    for node in range(cluster.num_nodes):
        assert fast_r.node_routes.kind(node) == slow_r.node_routes.kind(node)
    src, dst = _pairs(cluster, 400, 9)
    for a, b in zip(fast_r.link_ids().route_costs(src[src != dst], dst[src != dst]),
                    slow_r.link_ids().route_costs(src[src != dst], dst[src != dst])):
        assert np.array_equal(a, b)


@pytest.mark.quick
def test_a_perturbed_cluster_is_not_uniform():
    cluster = load_topology("h100-ib", nodes=4)
    slow = perturb_links(cluster, (("node1/nic0", "leaf0", 0.5),), ())
    failed = perturb_links(cluster, (), (("gpu0", "node0/nvswitch"),))
    assert cluster.uniform and not slow.uniform and not failed.uniform
    r = Router(slow)
    assert r.node_routes.kind(1) == r.node_routes.kind(0)  # NIC -> leaf is no part of a kind
    r = Router(failed)
    assert r.node_routes.kind(0) != r.node_routes.kind(1)
