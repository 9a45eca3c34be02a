"""Trees and NVLink SHARP: NCCL's double binary tree, what each link carries in the tree, NVLS and
NVLS-tree all-reduces."""

from __future__ import annotations

import pytest

from simtrain.network.phases import phase_load
from simtrain.network.trees import dtree_parents, nvls_factor, nvls_phases, nvls_tree_phases, tree_phases
from simtrain.topology.cluster import load_topology
from simtrain.topology.routing.router import Router

S = 2**30


@pytest.mark.quick
def test_double_binary_tree_matches_nccl():
    first, second = dtree_parents(8)
    assert first == [-1, 2, 4, 2, 0, 6, 4, 6]  # 0 -> 4 -> {2, 6} -> {1, 3}, {5, 7}
    assert second == [1, 3, 1, 7, 5, 3, 5, -1]  # mirror: 7 -> 3 -> {1, 5} -> {0, 2}, {4, 6}
    first, second = dtree_parents(7)
    assert second[1] == -1 and sum(p < 0 for p in second) == 1  # shifted: root 1


@pytest.mark.quick
def test_tree_chains_inside_nodes_and_trees_across():
    c = load_topology("h100-ib", nodes=4)
    r = Router(c)
    (phase,) = tree_phases("all_reduce", tuple(range(32)), S, r)
    load = phase_load(phase)
    # trees over 4 nodes: A = [-1, 2, 0, 2], B = [1, 3, 1, -1]. Node 1 is a leaf of A (sends
    # S/(2C) up) and interior in B (S/(2C) up, S/(2C) down to each of nodes 0 and 2): 4 x S/16
    assert dtree_parents(4) == ([-1, 2, 0, 2], [1, 3, 1, -1])
    assert load[("node1/nic0", "leaf0")] == pytest.approx(4 * S / 16)
    assert load[("leaf0", "node1/nic0")] == pytest.approx(4 * S / 16)
    # a GPU's NVLink carries its chain traffic: reduce toward the head and broadcast away, S/C per
    # channel in which it has a neighbour that way (7 of 8 channels each way)
    assert load[("gpu1", "node0/nvswitch")] == pytest.approx(2 * 7 / 8 * S)
    one_per_node = tree_phases("all_reduce", tuple(range(0, 32, 8)), S, r)[0]
    assert all(b == pytest.approx(S / 2) for _, b in one_per_node.flows)  # no chain; both trees S/2


@pytest.mark.quick
def test_nvls_moves_n_plus_1_over_n_at_the_nvls_rate():
    c = load_topology("h100-ib", nodes=1)
    r = Router(c)
    assert nvls_factor(r) == pytest.approx(0.822 / 0.683)
    (phase,) = nvls_phases("all_reduce", tuple(range(8)), S, r)
    load = phase_load(phase)
    assert load[("gpu0", "node0/nvswitch")] == pytest.approx(9 / 8 * S * nvls_factor(r))
    assert load[("node0/nvswitch", "gpu7")] == pytest.approx(9 / 8 * S * nvls_factor(r))
    assert nvls_phases("all_reduce", (3,), S, r) == []


@pytest.mark.quick
def test_nvls_tree_reduces_in_the_switch_and_crosses_nodes_per_channel():
    c = load_topology("h100-ib", nodes=2)
    r = Router(c)
    (phase,) = nvls_tree_phases("all_reduce", tuple(range(16)), S, r)
    load = phase_load(phase)
    assert load[("gpu3", "node0/nvswitch")] == pytest.approx(9 / 8 * S * nvls_factor(r))
    # two nodes: each channel's head sends S/C once per tree, S/(2C) each
    assert load[("node0/nic3", "leaf0")] == pytest.approx(S / 8)
    assert load[("leaf0", "node1/nic3")] == pytest.approx(S / 8)


def _tree_hops_one_by_one(gpus, router):
    """Per channel: each node's chain from its head hop by hop, then both trees over the heads."""
    blocks: dict[int, list[int]] = {}
    for g in gpus:
        blocks.setdefault(router.cluster.node_of(g), []).append(g)
    blocks = list(blocks.values())
    channels = max(1, min(len({router.nic_of(g) for g in b} - {None}) for b in blocks)) if len(blocks) > 1 else 1
    hops = []
    for c in range(channels):
        for block in blocks:
            start = c * len(block) // channels
            chain = block[start:] + block[:start]
            for a, b in zip(chain, chain[1:]):
                hops += [(b, a, 1 / channels), (a, b, 1 / channels)]
        node_heads = [b[c * len(b) // channels] for b in blocks]
        for parents in dtree_parents(len(node_heads)):
            for child, parent in enumerate(parents):
                if parent >= 0:
                    a, b = node_heads[child], node_heads[parent]
                    hops += [(a, b, 1 / channels / 2), (b, a, 1 / channels / 2)]
    return hops


def test_tree_hops_are_the_hop_by_hop_ones_and_priced_as_the_phase():
    """Even and uneven nodes, 300 nodes (the array paths) and 5; the busiest link priced from the
    hops is the built phase's, bit for bit."""
    import random

    from simtrain.network.algorithms import hop_cost, unit_cost, unit_phases
    from simtrain.network.trees import tree_hops

    rng = random.Random(4)
    for nodes in (5, 300):
        cluster = load_topology("h100-rail", nodes=nodes)
        router = Router(cluster)
        world = list(range(cluster.num_gpus))
        for gpus in (world, sorted(rng.sample(world, len(world) // 3)), world[2::8] + world[5::8]):
            src, dst, share = tree_hops(gpus, router)
            assert list(zip(src.tolist(), dst.tolist(), share.tolist())) == _tree_hops_one_by_one(gpus, router)
            for algo in ("tree", "ring"):
                op = "all_reduce"
                assert hop_cost(op, algo, gpus, router) == unit_cost(unit_phases(op, algo, gpus, router), cluster)
