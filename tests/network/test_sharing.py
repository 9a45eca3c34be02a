"""Recomputations of the flow model's rates: memoised recomputations equal fresh ones over random
flow starts and ends."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simtrain.network.maxmin import MaxMinMemo
from simtrain.network.sharing import Reshares
from simtrain.network.solver import FlowModel
from simtrain.topology.cluster import load_topology
from simtrain.topology.routing.router import Router

pytestmark = pytest.mark.quick


def _run(ops, memo: bool) -> FlowModel:
    cluster = load_topology("h100-ib")
    router = Router(cluster)
    model = FlowModel(cluster, record=True)
    if not memo:
        model.reshares.limit = 0  # no memo: each recomputation from scratch
    t = 0.0
    for tid, (pairs, nbytes, dt) in enumerate(ops):
        model.add(t, tid, tuple((router.links(a, b), nbytes) for a, b in pairs))
        t += dt
        model.advance(t)
        model.next_event_s()
    model.advance(1e3)
    return model


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_memoised_recomputations_equal_fresh_ones(data):
    """Random transfers (some repeated, so their recomputations recur) give bit for bit the same
    finish times, link statistics and rate history with and without the memo."""
    gpus = list(range(0, 32, 3))
    pair = st.tuples(st.sampled_from(gpus), st.sampled_from(gpus)).filter(lambda p: p[0] != p[1])
    transfer = st.tuples(st.lists(pair, min_size=1, max_size=6), st.sampled_from([1e6, 3e6, 1e7]),
                         st.sampled_from([0.0, 1e-5, 2e-4, 1e-3]))
    ops = data.draw(st.lists(transfer, min_size=1, max_size=8))
    ops = ops + ops[: data.draw(st.integers(0, len(ops)))]  # recurring transfers
    a, b = _run(ops, memo=True), _run(ops, memo=False)
    assert a.finish_s == b.finish_s
    assert a.recomputes == b.recomputes
    for name in ("bytes", "busy", "peak"):
        assert np.array_equal(getattr(a.usage, name), getattr(b.usage, name))
    assert len(a.usage.history) == len(b.usage.history)
    for (ta, la, ra), (tb, lb, rb) in zip(a.usage.history, b.usage.history):
        assert ta == tb and np.array_equal(la, lb) and np.array_equal(ra, rb)
    assert b.reshares.hits == 0 and a.reshares.hits + a.reshares.misses == a.recomputes


def test_a_recurring_transfer_is_recomputed_by_lookup():
    pairs = [(0, 9), (9, 0), (1, 17), (17, 2)]
    model = _run([(pairs, 1e7, 1e-2)] * 5, memo=True)
    assert model.reshares.hits >= 4 * model.reshares.misses


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 300), unique=True, max_size=40), st.lists(st.integers(0, 400), max_size=60))
def test_membership_flags_are_numpys_isin(ids, values):
    """The component's flows and the links it leaves busy are picked with a table of flags kept
    between calls, as ``numpy.isin`` picks them (empty sides, values past every id, repeats; the
    second call on the flags the first one left)."""
    reshares = Reshares(MaxMinMemo(np.ones(4)), np.zeros(16, dtype=np.int64))
    ids_a, values_a = np.array(ids, dtype=np.int64), np.array(values, dtype=np.int64)
    for a, b in ((ids_a, values_a), (values_a[:5], ids_a)):
        assert np.array_equal(reshares._member(a, b), np.isin(b, a))
    assert not reshares._flags.any()
