"""MoE routing: hand-computed rank loads, per-EP-rank loads and load factors."""

from __future__ import annotations

import numpy as np
import pytest

from simtrain.workload.moe_routing import Routing, ep_loads, load_factors, rank_loads

pytestmark = pytest.mark.quick


def test_routing_loads_hand_computed():
    probs = np.array([0.4, 0.1, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05])
    assert rank_loads(probs, 4).tolist() == pytest.approx([0.5, 0.2, 0.2, 0.1])
    assert load_factors(8, 4, 3, Routing(skew=0.0)) == [1.0, 1.0, 1.0]
    f = load_factors(8, 8, 1, Routing(skew=1.0, seed=0))[0]
    assert f == pytest.approx(8 / sum(1 / k for k in range(1, 9)))  # one expert per rank: the top one


def test_ep_loads_per_rank_hand_computed():
    assert ep_loads(8, 4, 2, Routing(skew=0.0)) == [(1.0,) * 4] * 2
    (loads,) = ep_loads(8, 8, 1, Routing(skew=1.0, seed=0))
    harmonic = sum(1 / k for k in range(1, 9))
    # one expert per rank: rank loads are the Zipf shares 1 / (k H) over the mean 1 / 8, permuted
    assert sorted(loads, reverse=True) == pytest.approx([8 / (k * harmonic) for k in range(1, 9)])
    assert max(loads) == load_factors(8, 8, 1, Routing(skew=1.0, seed=0))[0]
    # two experts per rank: each EP rank's load is the sum of its pair, the loads average 1
    (pairs,) = ep_loads(8, 4, 1, Routing(skew=1.0, seed=0))
    assert sum(pairs) / 4 == pytest.approx(1.0) and len(pairs) == 4
