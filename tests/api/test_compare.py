"""compare(): the closed form and the simulation side by side, one row per category."""

from __future__ import annotations

import pytest

from simtrain import compare, estimate_scenario
from simtrain.errors import SpecError

SMALL = {"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2, "pp": 2, "seq": 2048, "gbs": 16}


def test_both_reports_and_the_table_agree():
    phases = []
    c = compare(estimate_scenario(SMALL), phase=phases.append)
    assert phases == ["simulate"]
    assert c.simulated["step_time_s"] == c.result.report["step_time_s"]
    assert c.analytic["config"] == c.simulated["config"]  # one scenario on both sides
    step = c.rows[0]
    assert step[0] == "step time" and step[3] == f"{c.simulated['step_time_s'] / c.analytic['step_time_s'] - 1:+.1%}"
    categories = [row[0] for row in c.rows[3:]]
    assert "compute" in categories and "bubble" in categories


@pytest.mark.quick
def test_only_a_scenario_is_compared():
    with pytest.raises(SpecError, match="compare"):
        compare(SMALL)
