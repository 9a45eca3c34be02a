"""The planner: folded groups launch together in one phase, and so do p2p pairs."""

from __future__ import annotations

import pytest

from helpers import fat_tree, flow_time
from simtrain.network.planner import Planner


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
