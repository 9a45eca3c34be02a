"""NCCL's tuning model: latencies by algorithm, protocol and link kind, protocol factors, the tree's
per-channel caps, which protocols a group may use."""

from __future__ import annotations

import pytest

from simtrain.network.nccl_protocols import GroupShape, bandwidth_factor, latency_s, protocols, tree_cap_Bps

pytestmark = pytest.mark.quick

US = 1e-6
NODE = GroupShape(ranks=8, nodes=1)
TWO_NODES = GroupShape(ranks=16, nodes=2, net_latency_s=0.5 * US, channels=8)


def test_ring_latency_is_base_plus_one_step_latency_per_step():
    # NCCL tuning.cc: baseLat Ring/Simple 8.4 us, hwLat NVLink Ring/Simple 3.4 us, 2(n-1) steps
    assert latency_s("ring", "all_reduce", "Simple", NODE) == pytest.approx((8.4 + 14 * 3.4) * US)
    assert latency_s("ring", "all_gather", "LL", NODE) == pytest.approx((6.6 + 7 * 0.6) * US)
    pci = GroupShape(ranks=8, nodes=1, nvlink=False)
    assert latency_s("ring", "all_reduce", "Simple", pci) == pytest.approx((8.4 + 14 * 5.7) * US)


def test_ring_across_nodes_pays_network_steps():
    # 30 steps, 2 x 2 nodes of them over the network at 14 us + the fabric twice (Simple's flush);
    # the others at least the network's post overhead (3 x 1 us for Simple)
    inter = 14 + 2 * 0.5
    expected = 8.4 + 26 * 3.4 + 4 * inter
    assert latency_s("ring", "all_reduce", "Simple", TWO_NODES) == pytest.approx(expected * US)
    # reduce-scatter: 15 steps, nodes - 1 = 1 over the network
    assert latency_s("ring", "reduce_scatter", "Simple", TWO_NODES) == pytest.approx((8.4 + 14 * 3.4 + inter) * US)
    # LL: 1.8x the intra-node latency across nodes, network latency 2.7 + the fabric once
    ll = 6.6 + 26 * max(0.6 * 1.8, 1.0) + 4 * (2.7 + 0.5)
    assert latency_s("ring", "all_reduce", "LL", TWO_NODES) == pytest.approx(ll * US)


def test_tree_and_nvls_latencies():
    sixteen = GroupShape(ranks=128, nodes=16, net_latency_s=0.0)
    # Tree/LL128: 14 + 2 ((ppn-1) 1.25 + log2(16) 8.5)
    assert latency_s("tree", "all_reduce", "LL128", sixteen) == pytest.approx((14 + 2 * (7 * 1.25 + 4 * 8.5)) * US)
    assert latency_s("nvls", "all_reduce", "Simple", NODE) == pytest.approx(23 * US)
    # NVLS tree: intra 23 + 2 log2(nodes) x (14 + fabric twice)
    assert latency_s("nvls_tree", "all_reduce", "Simple", TWO_NODES) == pytest.approx((23 + 2 * 15) * US)


def test_protocol_factors():
    assert bandwidth_factor("ring", "all_reduce", "Simple", NODE, 1e9) == 1.0
    assert bandwidth_factor("ring", "all_reduce", "LL", NODE, 1e3) == 1 / 4
    assert bandwidth_factor("ring", "all_gather", "LL", NODE, 1e3) == 1 / 3  # one node, not all-reduce
    assert bandwidth_factor("ring", "all_gather", "LL", TWO_NODES, 1e3) == 1 / 4
    assert bandwidth_factor("ring", "all_reduce", "LL128", NODE, 1e6) == 0.92
    one_per_node = GroupShape(ranks=8, nodes=8)
    assert bandwidth_factor("ring", "all_reduce", "LL128", one_per_node, 1e6) == 0.7
    # tree: 0.92 x protocol x NCCL's medium-size correction (Simple at 64 KiB: log2(1024) = 10 -> 0.6)
    assert bandwidth_factor("tree", "all_reduce", "Simple", TWO_NODES, 2**16) == pytest.approx(0.92 * 0.6)
    assert bandwidth_factor("tree", "all_reduce", "Simple", TWO_NODES, 2**31) == pytest.approx(0.92)
    assert bandwidth_factor("nvls", "all_reduce", "Simple", NODE, 1e9) == 1.0


def test_protocols_available():
    assert protocols("ring", NODE) == ("LL", "LL128", "Simple")
    assert protocols("ring", GroupShape(ranks=8, nodes=1, nvlink=False)) == ("LL", "Simple")
    assert protocols("nvls", NODE) == protocols("nvls_tree", TWO_NODES) == ("Simple",)
    assert TWO_NODES.ppn == 8


def test_tree_cap_per_channel_by_generation_and_nodes():
    # perChMaxTreeBws: Ampere 23.6 GB/s per channel on 2 nodes, 17.8 beyond; algbw = bus / 2
    a100 = GroupShape(ranks=16, nodes=2, channels=4, arch="ampere")
    assert tree_cap_Bps("Simple", a100) == pytest.approx(0.5 * 4 * 23.6e9)
    assert tree_cap_Bps("Simple", GroupShape(ranks=24, nodes=3, channels=4, arch="ampere")) == \
        pytest.approx(0.5 * 4 * 17.8e9)
    assert tree_cap_Bps("LL128", GroupShape(ranks=16, nodes=2, channels=8)) == pytest.approx(0.5 * 8 * 36.7e9)
    assert tree_cap_Bps("LL", TWO_NODES) == pytest.approx(0.5 * 39.0e9)  # llMaxBws, in total


@pytest.mark.quick
def test_every_architecture_has_a_row_and_a_missing_one_is_one_line():
    from simtrain.errors import SpecError
    from simtrain.network.nccl_protocols import NCCL_ARCHS
    from simtrain.specs.arch import ARCHS

    assert set(ARCHS) <= set(NCCL_ARCHS)
    with pytest.raises(SpecError, match=r"^gpu architecture 'rubin' has no row in NCCL's tuning tables .*NCCL_ARCHS"):
        tree_cap_Bps("Simple", GroupShape(ranks=16, nodes=2, channels=8, arch="rubin"))


@pytest.mark.quick
def test_every_algorithm_names_a_family_with_a_record_and_a_missing_one_is_one_line():
    from simtrain.errors import SpecError
    from simtrain.network.algorithms import REGISTRY
    from simtrain.network.nccl_protocols import FAMILIES, family_of

    assert {a.family for a in REGISTRY.values()} - {None} == set(FAMILIES)
    for record in FAMILIES.values():
        assert set(record.step_us) == {"nvlink", "pci", "net"}
    with pytest.raises(SpecError, match=r"^unknown NCCL tuning family 'collnet' \(known: nvls, nvls_tree, ring, tree\)"):
        family_of("collnet")
