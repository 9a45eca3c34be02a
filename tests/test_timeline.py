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
