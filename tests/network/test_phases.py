"""Phases of the collective algorithms: NCCL's double binary tree, flows and volumes per phase."""

from __future__ import annotations

import pytest

from simtrain.network.algorithms import phases
from simtrain.network.phases import Phase, dtree_parents
from simtrain.topology.cluster import load_topology
from simtrain.topology.routes import Router


def test_double_binary_tree_matches_nccl():
    first, second = dtree_parents(8)
    assert first == [-1, 2, 4, 2, 0, 6, 4, 6]  # 0 -> 4 -> {2, 6} -> {1, 3}, {5, 7}
    assert second == [1, 3, 1, 7, 5, 3, 5, -1]  # mirror: 7 -> 3 -> {1, 5} -> {0, 2}, {4, 6}
    first, second = dtree_parents(7)
    assert second[1] == -1 and sum(p < 0 for p in second) == 1  # shifted: root 1


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
