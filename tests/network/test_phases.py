"""Phases of the collective algorithms: volumes per flow, PXN relays, hierarchical's three phases, a
phase's uncontended time on achievable bandwidth, the group's shape for NCCL's tuning model."""

from __future__ import annotations

import pytest

from simtrain.network.phases import (Phase, direct_phases, group_shape, hierarchical_phases, phase_time, ring_phases,
                                     ring_volume)
from simtrain.topology.cluster import load_topology
from simtrain.topology.routing.router import Router

pytestmark = pytest.mark.quick

S = 8e6


def test_ring_volumes_in_a_node_and_across_nodes():
    c = load_topology("h100-ib")
    r = Router(c)
    (ring,) = ring_phases("all_reduce", tuple(range(8)), S, r)
    assert len(ring.flows) == 8 and ring.flows[0][1] == pytest.approx(2 * 7 / 8 * S)
    assert ring.latency_s == 0.0  # NCCL's latency is added by the tuner (algorithms.price)
    assert ring_volume("all_gather", 4, S) == pytest.approx(3 / 4 * S)
    (across,) = ring_phases("reduce_scatter", tuple(range(16)), S, r)
    nic_out = [b for links, b in across.flows if ("gpu7", "node0/nic7") in links]
    assert nic_out == [pytest.approx(15 / 16 * S / 8)]  # one channel of eight leaves through each NIC
    assert ring_phases("all_reduce", (3,), S, r) == []


def test_direct_sends_and_pxn():
    c = load_topology("h100-ib")
    r = Router(c)
    (a2a,) = direct_phases("all_to_all", tuple(range(4)), S, r)
    assert len(a2a.flows) == 12 and a2a.nbytes == pytest.approx(3 * S)
    (p2p,) = direct_phases("p2p", (0, 9), S, r)
    assert p2p.flows == ((r.links(0, 9), S),) and p2p.latency_s == r.latency(0, 9)
    (shift,) = direct_phases("ring_shift", (0, 8, 16), S, r)
    assert [b for _, b in shift.flows] == [S] * 3
    assert direct_phases("p2p", (2, 2), S, r) == []
    rail = load_topology("h100-rail", nodes=2)
    rr = Router(rail)
    (relayed,) = direct_phases("all_to_all", tuple(range(16)), S, rr)
    paths = {(p[0][0], p[-1][1]): p for p, _ in relayed.flows}
    # GPU 3 -> GPU 13 (rail 5): over NVLink to GPU 5, then rail 5's leaf: no spine
    path = paths[("gpu3", "gpu13")]
    assert ("gpu3", "node0/nvswitch") in path and ("node0/nvswitch", "gpu5") in path
    assert not any("spine" in u or "spine" in v for u, v in path)


def test_hierarchical_three_phases():
    c = load_topology("h100-ib")
    r = Router(c)
    hier = hierarchical_phases("all_reduce", tuple(range(16)), S, r)
    assert [len(p.flows) for p in hier] == [16, 16, 16]
    assert hier[1].flows[0][1] == pytest.approx(2 * 1 / 2 * S / 8)
    assert all(p.latency_s > 0 for p in hier)


def test_phase_time_uses_achievable_bandwidth():
    c = load_topology("h100-ib")
    r = Router(c)
    phase = Phase(((r.links(0, 1), 1e9),), 1e-6)
    assert phase_time(phase, c) == pytest.approx(1e9 / (450e9 * 0.822) + 1e-6)
    assert phase.scaled(2.0, 0.0).flows[0][1] == 2e9


def test_group_shape():
    c = load_topology("h100-ib")
    r = Router(c)
    shape = group_shape(tuple(range(0, 32, 2)), r, 4)
    assert (shape.ranks, shape.nodes, shape.nvlink, shape.channels) == (16, 4, True, 4)
    # gpu0 -> gpu8, same leaf: 2 cables x 0.05 us + the leaf's 0.13 us
    assert shape.net_latency_s == pytest.approx(0.23e-6)
    assert group_shape(tuple(range(8)), r).net_latency_s == 0.0
