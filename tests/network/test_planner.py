"""The planner: folded groups launch together in one phase, and so do p2p pairs; NVLink SHARP as the
topology says; the price names its protocol and channels; ZeRO-0 never beats ZeRO-1."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from helpers import fat_tree, flow_time
from simtrain.network.planner import Planner
from simtrain.topology.cluster import load_topology


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


def test_nvls_follows_the_topology_unless_told():
    h100, a100 = load_topology("h100-ib"), load_topology("a100-hdr")
    assert Planner(h100).nvls and not Planner(a100).nvls
    assert not Planner(h100, nvls=False).nvls
    node = tuple(range(8))
    assert Planner(h100).algorithm("all_reduce", node, 2**30) == "nvls"
    assert Planner(h100, nvls=False).algorithm("all_reduce", node, 2**30) == "ring"
    assert Planner(a100).algorithm("all_reduce", node, 2**30) == "ring"


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
