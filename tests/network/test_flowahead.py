"""The flow model's look-ahead (``FlowModel.next_event_s``): the first completion, bit for bit; a
model that looks ahead, and is sent back by transfers that start before, ends in the very state of
one that never looks ahead."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simtrain.network.flow_layout import SF_ROWS
from simtrain.network.solver import FlowModel
from simtrain.topology.cluster import load_topology
from simtrain.topology.routing.router import Router

from .test_flowcore import _transfers

pytestmark = pytest.mark.quick


def _state(model: FlowModel) -> tuple:
    """Everything a run's results read: completions, link statistics and history, counts."""
    usage = model.usage
    history = [(t, a.tolist(), r.tolist()) for t, a, r in usage.history or []]
    live = model.flows.live()
    return (dict(model.finish_s), usage.ef.tobytes(), usage.bytes_delivered, history, model.recomputes, model.now,
            model.flows.rem[live].tobytes(), model.flows.rate[live].tobytes(), sorted(model.transfers.index))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10 ** 6))
def test_next_event_is_the_first_completion_if_nothing_starts_before(seed):
    """The look-ahead gives, bit for bit, the finish time the model reaches when it runs on without
    new transfers (or, where a recomputation on the way is not yet memoised, an internal event
    before it: advancing there and asking again gets there)."""
    cluster = load_topology("h100-ib")
    router = Router(cluster)
    rng = random.Random(seed)
    model = FlowModel(cluster)
    for start, tid, specs, latency in _transfers(rng, router, list(range(0, 64, 3)), rng.randint(1, 12)):
        model.advance(start)
        model.add(start, tid, specs, latency)
    model.advance(model.now)  # collect what completed at once
    while model.active_transfers:
        now = model.now
        t = model.next_event_s()
        assert model.now == now and t is not None and t >= now
        assert model.next_event_s() == t  # asked again: the same answer
        done = model.advance(t)
        if done:
            assert t == min(model.finish_s[tid] for tid in done)
    assert model.next_event_s() is None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10 ** 6), st.booleans())
def test_looking_ahead_changes_nothing_a_run_reads(seed, record):
    """Two models take the same transfers; one asks for the next event before every step and
    moves to it, or to a time before it (where a transfer starts first, or the caller is early),
    the other never asks: the same completions at every step, link statistics, history and
    counts, bit for bit; and both as a third model that runs the compiled loop at every move,
    where the others skip it (a move to the clock's own time with nothing due, or to a completion
    after its latency the look-ahead reached)."""
    cluster = load_topology("h100-ib")
    router = Router(cluster)
    rng = random.Random(seed)
    transfers = _transfers(rng, router, list(range(0, 64, 3)), rng.randint(1, 20))
    ahead, plain, full = (FlowModel(cluster, record=record) for _ in range(3))
    full._still = lambda t: False  # every move runs the compiled loop, even where it has nothing to do
    for start, tid, specs, latency in transfers:
        while True:  # the engine's loop: wake at the next event, or at the next start if it comes first
            t = ahead.next_event_s()
            if t is None or t > start:
                break
            early = t if rng.random() < 0.7 else ahead.now + (t - ahead.now) * rng.random()
            done = ahead.advance(early)  # the same completions, in order
            assert plain.advance(early) == done and full.advance(early) == done
        if rng.random() < 0.5:
            ahead.next_event_s()  # ahead beyond the start: put back by the add
        for model in (ahead, plain, full):
            model.advance(start)
            model.add(start, tid, specs, latency)
    while (t := ahead.next_event_s()) is not None:
        done = ahead.advance(t)
        assert plain.advance(t) == done and full.advance(t) == done
    for model in (plain, full):
        model.advance(model.now)
        assert model.next_event_s() is None
        model.settle_ahead()
    assert _state(ahead) == _state(plain) == _state(full)
    assert ahead.active_flows == 0 and ahead.active_transfers == 0


def test_settle_ahead_puts_the_state_back():
    cluster = load_topology("h100-ib")
    router = Router(cluster)
    model = FlowModel(cluster, record=True)
    for start, tid, specs, latency in _transfers(random.Random(4), router, list(range(0, 64, 3)), 12):
        model.advance(start)
        model.add(start, tid, specs, latency)
    model.advance(model.now)
    for _ in range(100):  # to a call that runs ahead (where a recomputation on the way is new, it does not)
        model.next_event_s()  # settles the rates
        model.settle_ahead()
        before = _state(model), model.flows.sf.tobytes(), model.ist.tobytes(), model.busy.tobytes()
        t = model.next_event_s()
        assert t is not None
        if float(model.fs[0]) == t > model.now:
            break
        model.advance(t)
    else:
        raise AssertionError("the model never ran ahead")
    model.settle_ahead()
    assert _state(model) == before[0]
    assert model.ist.tobytes() == before[2] and model.busy.tobytes() == before[3]
    live = model.flows.live()
    assert np.array_equal(model.flows.sf[:3, live], np.frombuffer(before[1]).reshape(SF_ROWS, -1)[:3, live])
