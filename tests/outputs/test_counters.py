"""Counter tracks: the event dicts of a track, and a run's tracks (memory per rank, utilisation per
link) as write_trace formats them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simtrain.outputs.counters import CounterTrack, counter_events
from simtrain.outputs.trace import LINK_PID_BASE, rank_pid, run_counters
from simtrain.units import GiB


@pytest.mark.quick
def test_counter_events():
    evs = counter_events("memory", rank_pid(3), [(0.0, 1.0), (2e-3, 5.0)])
    assert evs == [
        {"ph": "C", "name": "memory", "pid": 4, "ts": 0.0, "args": {"value": 1.0}},
        {"ph": "C", "name": "memory", "pid": 4, "ts": 2e-3 * 1e6, "args": {"value": 5.0}},
    ]


@pytest.mark.quick
def test_a_runs_counters_are_memory_per_rank_then_a_track_per_link():
    memory = {1: (np.array([0.0, 1e-3]), np.array([0.0, 2.0 * GiB])), 0: (np.array([0.0]), np.array([GiB]))}
    links = {"b->c": (np.array([0.0, 1e-3]), np.array([0.5, 0.0])), "a->b": (np.zeros(0), np.zeros(0))}
    tracks = run_counters(memory, links)
    assert [(t.name, t.pid) for t in tracks if isinstance(t, CounterTrack)] == [
        ("memory", rank_pid(0)), ("memory", rank_pid(1)), ("link a->b", LINK_PID_BASE), ("link b->c", LINK_PID_BASE + 1)]
    assert tracks[1].values.tolist() == [0.0, 2.0]  # GiB
    names = [t["args"]["name"] for t in tracks if isinstance(t, dict)]
    assert names == ["link a->b", "link b->c"]
    events = tracks[-1].events()
    assert json.dumps(events) == json.dumps(counter_events("link b->c", LINK_PID_BASE + 1, [(0.0, 0.5), (1e-3, 0.0)],
                                                           key="utilisation"))
