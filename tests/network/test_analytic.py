"""The analytic network: its all-reduce and p2p times are the uncontended ring and p2p times."""

from __future__ import annotations

import pytest

from simtrain.network.algorithms import uncontended_time
from simtrain.network.analytic import AnalyticNetwork
from simtrain.network.planner import Planner
from simtrain.topology.cluster import load_topology
from simtrain.topology.routes import Router


def test_analytic_ring_and_p2p_are_the_analytic_network():
    c = load_topology("h100-ib")
    r, net = Router(c), AnalyticNetwork(c, Router(c))
    for gpus in (tuple(range(8)), tuple(range(0, 64, 8)), tuple(range(64))):
        assert uncontended_time("all_reduce", "ring", gpus, 1e8, r, c) == \
            pytest.approx(net.collective_time("all_reduce", gpus, 1e8), rel=1e-12)
    assert Planner(c, r).p2p_time(0, 9, 1e8) == pytest.approx(net.p2p_time(0, 9, 1e8), rel=1e-12)
