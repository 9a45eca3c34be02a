"""Channels: one per NIC the group uses, each entering and leaving a node on one rail, every NIC
carrying its share; heads; PXN relays on rail-optimized fabrics."""

from __future__ import annotations

import copy

import pytest

from helpers import TOPOLOGY
from simtrain.errors import SpecError
from simtrain.network.channels import (channel_count, heads, node_blocks, nic_index, pxn_relay, rail_members,
                                       ring_hops)
from simtrain.topology.cluster import build_topology, load_topology
from simtrain.topology.routing.router import Router


def _nic_shares(hops, router):
    """Share of the per-rank volume each NIC sends and receives over the network."""
    out: dict[str, float] = {}
    into: dict[str, float] = {}
    cluster = router.cluster
    for a, b, share in hops:
        if cluster.node_of(a) != cluster.node_of(b):
            out[router.nic_of(a)] = out.get(router.nic_of(a), 0.0) + share
            into[router.nic_of(b)] = into.get(router.nic_of(b), 0.0) + share
    return out, into


@pytest.mark.quick
def test_a_ring_across_nodes_uses_every_nic_once_each_way():
    c = load_topology("h100-ib", nodes=4)
    r = Router(c)
    gpus = tuple(range(32))
    assert channel_count(node_blocks(gpus, c), r) == 8
    hops = ring_hops(gpus, r)
    out, into = _nic_shares(hops, r)
    assert len(out) == len(into) == 32
    assert all(v == pytest.approx(1 / 8) for v in [*out.values(), *into.values()])
    # inside a node each GPU sends to its successor on 7 of the 8 channels
    intra = [s for a, b, s in hops if c.node_of(a) == c.node_of(b)]
    assert len(intra) == 32 and all(s == pytest.approx(7 / 8) for s in intra)


@pytest.mark.quick
def test_channels_stay_on_their_rail_except_the_closing_hop():
    c = load_topology("h100-ib", nodes=3)
    r = Router(c)
    hops = ring_hops(tuple(range(24)), r)
    cross = [(a, b) for a, b, _ in hops if c.node_of(a) != c.node_of(b)]
    forward = [(a, b) for a, b in cross if c.node_of(b) == c.node_of(a) + 1]
    assert len(forward) == 16 and all(nic_index(r, a) == nic_index(r, b) for a, b in forward)


@pytest.mark.quick
def test_channels_follow_the_nics_a_group_uses():
    c = load_topology("h100-ib", nodes=2)
    r = Router(c)
    stride2 = tuple(range(0, 16, 2))  # 4 GPUs per node, each with its own NIC: 4 channels
    assert channel_count(node_blocks(stride2, c), r) == 4
    out, into = _nic_shares(ring_hops(stride2, r), r)
    assert sorted(out.values()) == pytest.approx([1 / 4] * 8)
    one_per_node = tuple(range(0, 16, 8))
    assert channel_count(node_blocks(one_per_node, c), r) == 1
    assert channel_count(node_blocks(tuple(range(8)), c), r) == 1  # inside a node: one ring
    data = copy.deepcopy(TOPOLOGY)
    data["node"]["nics"] = 4  # two GPUs per NIC
    shared = build_topology(data, "four-nics.toml", nodes=2)
    rs = Router(shared)
    assert channel_count(node_blocks(tuple(range(16)), shared), rs) == 4
    out, _ = _nic_shares(ring_hops(tuple(range(16)), rs), rs)
    assert sorted(out.values()) == pytest.approx([1 / 4] * 8)


@pytest.mark.quick
def test_heads_are_the_same_positions_on_every_node():
    assert heads([8, 9, 10, 11, 12, 13, 14, 15], 4) == [8, 10, 12, 14]
    assert heads([0, 2, 4, 6], 4) == [0, 2, 4, 6]


@pytest.mark.quick
def test_pxn_relays_cross_rail_sends_on_rail_fabrics_only():
    rail = load_topology("h100-rail", nodes=2)
    r = Router(rail)
    group = tuple(range(16))
    rails = rail_members(group, r)
    assert pxn_relay(3, 8 + 5, rails, r) == 5  # GPU 5 of node 0 is on rail 5
    assert pxn_relay(3, 8 + 3, rails, r) is None  # same rail
    assert pxn_relay(3, 5, rails, r) is None  # same node
    assert pxn_relay(3, 8 + 5, rail_members((3, 8 + 5), r), r) is None  # no member on rail 5 of node 0
    fat = load_topology("h100-ib", nodes=2)
    assert pxn_relay(3, 8 + 5, rail_members(group, Router(fat)), Router(fat)) is None


# ---- arrays against one hop at a time -------------------------------------------------------------

def _blocks_one_by_one(gpus, cluster):
    blocks: dict[int, list[int]] = {}
    for g in gpus:
        blocks.setdefault(cluster.node_of(g), []).append(g)
    return list(blocks.values())


def _ring_hops_one_by_one(gpus, router):
    """Every channel's ring hop by hop, hops with one source and destination merged in first-seen
    order, their shares added in hop order."""
    n, blocks = len(gpus), _blocks_one_by_one(gpus, router.cluster)
    if len(blocks) == 1:
        return [(gpus[i], gpus[(i + 1) % n], 1.0) for i in range(n)]
    channels = max(1, min(len({router.nic_of(g) for g in b} - {None}) for b in blocks))
    merged: dict[tuple[int, int], float] = {}
    for c in range(channels):
        ring = []
        for i, block in enumerate(blocks):
            start = (c * len(block) // channels - i) % len(block)
            ring += block[start:] + block[:start]
        for i in range(n):
            key = (ring[i], ring[(i + 1) % n])
            merged[key] = merged.get(key, 0.0) + 1 / channels
    return [(a, b, s) for (a, b), s in merged.items()]


def _two_nic_cluster(nodes):
    """Nodes of 8 GPUs on 2 NICs (4 GPUs share one): channels follow the NICs a group uses."""
    return build_topology({
        "gpu": "h100-sxm", "nodes": nodes,
        "node": {"gpus": 8, "nvlink_GBps": 450, "nics": 2, "nic_gbps": 400, "pcie_GBps": 64},
        "fabric": {"kind": "fat-tree", "tiers": 2, "nodes_per_leaf": 4, "spines": 4}}, "two-nic")


@pytest.mark.parametrize("make", [lambda: load_topology("h100-ib", nodes=300), lambda: _two_nic_cluster(300)])
def test_blocks_channels_and_ring_hops_of_large_groups_are_the_hop_by_hop_ones(make):
    """Groups of 256 members or more on 256 nodes or more take the array paths: in order, shuffled,
    with uneven nodes, and the whole cluster."""
    import random

    cluster = make()
    router = Router(cluster)
    rng = random.Random(11)
    n = cluster.num_gpus
    world = list(range(n))
    shuffled = world[:]
    rng.shuffle(shuffled)
    groups = [world, shuffled, sorted(rng.sample(world, 1500)), world[3::8], [g for g in world if g % 8 in (1, 6)],
              [g for g in shuffled if g % 5]]
    for gpus in groups:
        assert node_blocks(gpus, cluster) == _blocks_one_by_one(gpus, cluster)
        blocks = _blocks_one_by_one(gpus, cluster)
        assert channel_count(blocks, router) == max(1, min(len({router.nic_of(g) for g in b} - {None})
                                                           for b in blocks))
        assert ring_hops(gpus, router) == _ring_hops_one_by_one(gpus, router)
    assert node_blocks(tuple(range(20)), cluster) == _blocks_one_by_one(range(20), cluster)
    with pytest.raises(SpecError, match="gpu 2400000"):
        node_blocks(world + [2_400_000], cluster)
