"""Max-min fair rates by progressive filling, checked by hand, and their memo by set of paths."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import path_pools
from simtrain.network.maxmin import MaxMinMemo, max_min_rates

pytestmark = pytest.mark.quick


def test_progressive_filling_by_hand():
    # links A (1 B/s) and B (2 B/s); flow 0 crosses both, flow 1 only A, flow 2 only B.
    # A saturates first at 1/2 per flow (flows 0 and 1 freeze at 0.5); B has 2 - 0.5 = 1.5 left
    # for flow 2.
    rates = max_min_rates(np.array([0, 0, 1, 2]), np.array([0, 1, 0, 1]), np.array([1.0, 2.0]), 3)
    assert rates.tolist() == pytest.approx([0.5, 0.5, 1.5])


def test_memo_is_order_free_and_reports_link_loads():
    capacity = np.array([1.0, 2.0, 8.0])
    memo = MaxMinMemo(capacity)
    pa, pao = path_pools([np.array([0, 1]), np.array([0]), np.array([1]), np.array([2])])
    both, only_a, only_b, twin = range(4)
    rates, used, load = memo.rates(np.array([both, only_a, only_b]), pa, pao)
    assert rates.tolist() == pytest.approx([0.5, 0.5, 1.5])
    assert used.tolist() == [0, 1] and load.tolist() == pytest.approx([1.0, 2.0])
    again, _, _ = memo.rates(np.array([only_b, both, only_a]), pa, pao)  # the same set in another order
    assert again.tolist() == pytest.approx([1.5, 0.5, 0.5])
    assert len(memo._memo) == 1
    # two flows on one path share it: 8 B/s link, 4 each
    rates, used, load = memo.rates(np.array([twin, twin]), pa, pao)
    assert rates.tolist() == [4.0, 4.0] and used.tolist() == [2] and load.tolist() == [8.0]
