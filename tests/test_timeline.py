"""The timeline: a JSON round trip keeps every column."""

from __future__ import annotations

import json

from helpers import simulate, tiny_model
from simtrain.specs.parallel import ParallelSpec
from simtrain.timeline import Timeline


def test_timeline_json_round_trip():
    model = tiny_model(layers=2)
    _, res, _ = simulate(model, ParallelSpec(pp=2, gbs=4, seq=256))
    data = json.loads(json.dumps(res.timeline.to_json()))
    back = Timeline.from_json(data)
    assert len(back) == len(res.timeline)
    for col, values in res.timeline.cols.items():
        assert (back[col] == values).all()


def _two_ranks() -> Timeline:
    from simtrain.timeline import TimelineBuilder
    from simtrain.workload.program import KIND, STREAM

    b = TimelineBuilder()
    f, opt = b.name_id("F"), b.name_id("optimizer")
    c = STREAM["compute"]
    for rank, shift in ((0, 0.0), (1, 0.5)):
        for step in range(2):
            t = 3.0 * step + shift
            b.add(rank, c, KIND["F"], f, 0, -1, 0, t, t + 2.0, flops=10.0, alloc_bytes=4.0, free_bytes=4.0)
            b.add(rank, c, KIND["opt"], opt, -1, -1, -1, t + 2.0, t + 2.5)
    return b.build()


def test_step_ends_are_the_latest_optimizer_ends():
    assert _two_ranks().step_ends() == [3.0, 6.0]
    model = tiny_model(layers=2)
    _, res, _ = simulate(model, ParallelSpec(pp=2, gbs=4, seq=256))  # no optimizer steps
    assert res.timeline.step_ends() == []


def test_a_window_clips_and_shifts_the_spans_inside_it():
    """The window from 4 to 6 s holds the second step's spans; each F, started before 4 s, keeps
    its part inside and that share of its FLOPs, its release but not its allocation (made before
    the window); times are shifted to start at 0."""
    w = _two_ranks().window(4.0, 6.0)
    spans = sorted(w.spans(), key=lambda s: (s.rank, s.start_s))
    assert [(s.rank, s.kind, s.start_s, s.end_s) for s in spans] == [
        (0, "F", 0.0, 1.0), (0, "opt", 1.0, 1.5), (1, "F", 0.0, 1.5), (1, "opt", 1.5, 2.0)]
    assert [s.flops for s in spans if s.kind == "F"] == [5.0, 7.5]
    assert [(s.alloc_bytes, s.free_bytes) for s in spans if s.kind == "F"] == [(0.0, 4.0), (0.0, 4.0)]
    assert w.end_s == 2.0
