"""The flow model's look-ahead (``FlowModel.next_event_s``): the first completion, bit for bit,
with the state left as it was."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simtrain.network.solver import FlowModel
from simtrain.topology.cluster import load_topology
from simtrain.topology.routing.router import Router

from .test_flowcore import _transfers

pytestmark = pytest.mark.quick


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10 ** 6))
def test_next_event_is_the_first_completion_if_nothing_starts_before(seed):
    """The look-ahead leaves the state as it was and gives, bit for bit, the finish time the model
    reaches when it runs on without new transfers (or, where a recomputation on the way is not
    yet memoised, an internal event before it: advancing there and asking again gets there)."""
    cluster = load_topology("h100-ib")
    router = Router(cluster)
    rng = random.Random(seed)
    model = FlowModel(cluster)
    for start, tid, specs, latency in _transfers(rng, router, list(range(0, 64, 3)), rng.randint(1, 12)):
        model.advance(start)
        model.add(start, tid, specs, latency)
    model.advance(model.now)  # collect what completed at once
    while model.active_transfers:
        before = (model.flows.rem.copy(), model.flows.rate.copy(), model.now)
        active = set(model.transfers.index)
        t = model.next_event_s()
        assert np.array_equal(model.flows.rem, before[0]) and np.array_equal(model.flows.rate, before[1])
        assert model.now == before[2] and t is not None
        first = min(model.finish_s.get(tid, np.inf) for tid in active)
        done = model.advance(t)
        if done:
            assert t == min(model.finish_s[tid] for tid in done) and first == np.inf
    assert model.next_event_s() is None
