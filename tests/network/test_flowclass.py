"""Classes of alike flows (:mod:`simtrain.network.flowclass`): a model that runs each class once
reads, bit for bit, as one that runs every flow on its own; the classes and the paths' lists
always hold exactly the live flows, each class's numbers those of its flows."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simtrain.network.flow_layout import (
    C_COUNT, C_HEAD, C_LIST, C_NEXT, C_RATE, C_REM, C_SIZE, CLS, N_CLS, N_LIVE, P_NEXT, PIDX, RATE, REM, SIZE)
from simtrain.network.solver import FlowModel
from simtrain.topology.cluster import load_topology
from simtrain.topology.routing.router import Router

from .test_flowahead import _state
from .test_flowcore import _transfers

pytestmark = pytest.mark.quick


def _check_classes(model: FlowModel) -> None:
    """Every live flow in one live class and on its path's list, nothing else there; a class's
    size, bytes left and rate those of each of its flows."""
    sf, si, ist = model.flows.sf, model.flows.si, model.ist
    assert ist[N_LIVE] == int(model.flows.active.sum())  # counted as flows end, before any compaction
    live = set(model.flows.live().tolist())
    assert live == set(np.flatnonzero(model.flows.active).tolist())
    members: set[int] = set()
    for c in si[C_LIST, :ist[N_CLS]].tolist():
        flows = []
        s = int(si[C_HEAD, c])
        while s >= 0:
            flows.append(s)
            s = int(si[C_NEXT, s])
        assert flows and len(flows) == si[C_COUNT, c]
        for s in flows:
            assert si[CLS, s] == c
            assert (sf[SIZE, s], sf[REM, s], sf[RATE, s]) == (sf[C_SIZE, c], sf[C_REM, c], sf[C_RATE, c])
        members.update(flows)
    assert members == live and len(members) == ist[N_LIVE]
    on_paths: set[int] = set()
    for p, head in enumerate(model.paths.phead[:len(model.paths.arrays)].tolist()):
        s = head - 1
        while s >= 0:
            assert si[PIDX, s] == p and s not in on_paths
            on_paths.add(s)
            s = int(si[P_NEXT, s])
    assert on_paths == live


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10 ** 6), st.booleans())
def test_running_a_class_once_is_running_each_of_its_flows(seed, look_ahead):
    """The same transfers (many of one size, started together) on a model with classes and on one
    with a class per flow, the engine's way (asking for the next event, sent back by starts):
    the same completions at every step, link statistics, history and counts, bit for bit."""
    cluster = load_topology("h100-ib")
    router = Router(cluster)
    rng = random.Random(seed)
    transfers = _transfers(rng, router, list(range(0, 64, rng.choice([1, 3]))), rng.randint(1, 20))
    grouped, single = FlowModel(cluster, record=True), FlowModel(cluster, record=True, group=False)
    for start, tid, specs, latency in transfers:
        while look_ahead:
            t = grouped.next_event_s()
            assert single.next_event_s() == t
            if t is None or t > start:
                break
            assert grouped.advance(t) == single.advance(t)
            _check_classes(grouped)
        for model in (grouped, single):
            model.advance(start)
            model.add(start, tid, specs, latency)
        _check_classes(grouped)
    while (t := grouped.next_event_s()) is not None:
        assert single.next_event_s() == t
        assert grouped.advance(t) == single.advance(t)
        _check_classes(grouped)
    single.advance(single.now)
    assert _state(grouped) == _state(single)
    assert grouped.active_flows == 0 == grouped.ist[N_CLS]


def test_an_all_to_all_runs_as_few_classes():
    """64 GPUs' all-to-all (4,032 flows of one size): a handful of classes, not one per flow."""
    cluster = load_topology("h100-ib")
    router = Router(cluster)
    model = FlowModel(cluster)
    flows = [(router.links(a, b), 1e6) for a in range(64) for b in range(64) if a != b]
    model.add(0.0, 0, flows)
    model.next_event_s()
    model.settle_ahead()
    _check_classes(model)
    assert model.ist[N_LIVE] == 4032 and 1 <= model.ist[N_CLS] <= 8
    alone = FlowModel(cluster, group=False)
    alone.add(0.0, 0, flows)
    alone.advance(1.0)
    model.advance(1.0)
    assert model.finish_s == alone.finish_s and np.array_equal(model.usage.ef, alone.usage.ef)


def test_ending_flows_by_hand_keeps_the_classes():
    cluster = load_topology("h100-ib")
    router = Router(cluster)
    model = FlowModel(cluster)
    model.add(0.0, 0, [(router.links(0, b), 1e6) for b in range(8, 40)])
    model.next_event_s()
    model.settle_ahead()
    model.flows.end(model.flows.live()[::3].copy())
    _check_classes(model)
