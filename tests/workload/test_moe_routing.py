"""MoE routing: hand-computed rank loads and load factors."""

from __future__ import annotations

import numpy as np
import pytest

from simtrain.workload.moe_routing import Routing, load_factors, rank_loads


def test_routing_loads_hand_computed():
    probs = np.array([0.4, 0.1, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05])
    assert rank_loads(probs, 4).tolist() == pytest.approx([0.5, 0.2, 0.2, 0.1])
    assert load_factors(8, 4, 3, Routing(skew=0.0)) == [1.0, 1.0, 1.0]
    f = load_factors(8, 8, 1, Routing(skew=1.0, seed=0))[0]
    assert f == pytest.approx(8 / sum(1 / k for k in range(1, 9)))  # one expert per rank: the top one
