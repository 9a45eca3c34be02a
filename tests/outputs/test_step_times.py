"""The step-time chart: written for a run of several steps, with the slow steps it was given."""

import pytest

from simtrain.results.metrics import step_time_stats
from simtrain.outputs.step_times import draw_step_times


def test_the_chart_is_a_png(tmp_path):
    times = [0.2, 0.1, 0.11, 0.1, 0.3, 0.1]
    stats = step_time_stats(times, {"4": 3})
    assert stats["steps"] == 5 and stats["max_s"] == 0.3 and stats["p50_s"] == 0.1
    path = tmp_path / "steps.png"
    draw_step_times(times, stats, str(path), title="six steps")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.quick
def test_one_step_is_its_own_distribution():
    stats = step_time_stats([0.25], {})
    assert stats["steps"] == 1 and stats["mean_s"] == stats["p99_s"] == 0.25
