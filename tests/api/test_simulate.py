"""simulate(): one step's timeline and report, consistent with each other."""

from __future__ import annotations

import pytest

from simtrain import SimResult, resolve, simulate
from simtrain.errors import SpecError

pytestmark = pytest.mark.quick


def test_the_report_is_the_timelines():
    result = simulate(resolve({"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2, "pp": 2,
                               "seq": 2048, "gbs": 16}))
    assert isinstance(result, SimResult)
    assert result.report["step_time_s"] == result.timeline.end_s
    assert sum(result.report["breakdown_s"].values()) == pytest.approx(result.report["step_time_s"])
    assert set(result.rank_labels) == set(result.static_bytes)


def test_only_a_scenario_is_simulated():
    with pytest.raises(SpecError, match="simulate"):
        simulate({"model": "llama3-8b"})
