"""zb-auto: never slower than ZB-H1, within its memory limit, one clear error for bad parameters."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simtrain.errors import ScheduleError
from simtrain.schedules import generate, replay, validate


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 8), extra=st.integers(0, 24), seed=st.integers(0, 2**31 - 1),
       comm=st.sampled_from([0.0, 0.05, 0.3]))
def test_zb_auto_never_worse_than_zb_h1(p, extra, seed, comm):
    rng = random.Random(seed)
    m = p + extra
    costs = tuple([rng.uniform(0.2, 3.0) for _ in range(p)] for _ in range(3))
    s = generate("zb-auto", p, m, costs=costs, comm=comm)
    validate(s)
    auto = replay(s, costs, comm)
    h1 = replay(generate("zb-h1", p, m), costs, comm)
    assert auto.makespan <= h1.makespan + 1e-9
    assert max(auto.peak_inflight_chunks) <= p


@settings(max_examples=20, deadline=None)
@given(p=st.integers(1, 6), m=st.integers(1, 20), limit=st.integers(1, 12), seed=st.integers(0, 999))
def test_zb_auto_respects_memory_limit(p, m, limit, seed):
    rng = random.Random(seed)
    costs = (rng.uniform(0.5, 2), rng.uniform(0.5, 2), rng.uniform(0.1, 2))
    s = generate("zb-auto", p, m, costs=costs, mem_limit=limit)
    validate(s)
    assert max(replay(s, costs).peak_inflight_chunks) <= limit


@pytest.mark.quick
def test_zb_auto_bad_params():
    with pytest.raises(ScheduleError, match="mem_limit"):
        generate("zb-auto", 4, 8, mem_limit=0)
    with pytest.raises(ScheduleError, match="3 values for 4 stages"):
        generate("zb-auto", 4, 8, costs=([1, 1, 1], 1, 1))
