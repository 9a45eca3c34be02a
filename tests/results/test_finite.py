"""Finite numbers in every result: the walker finds the first non-finite number and names its key."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simtrain.errors import SimulationError
from simtrain.results.finite import check_finite, check_timeline, first_non_finite
from simtrain.engine.timeline import TimelineBuilder

pytestmark = pytest.mark.quick


def test_first_non_finite_names_the_path():
    report = {"step_time_s": 1.5, "breakdown_s": {"compute": 1.0, "tp": math.nan},
              "peak_memory_gib": [1.0, 2.0, math.inf], "name": "nan", "fits": True, "none": None}
    path, value = first_non_finite(report)
    assert path == "breakdown_s.tp" and math.isnan(value)
    assert first_non_finite({"peak": [1.0, -math.inf]}) == ("peak[1]", -math.inf)
    assert first_non_finite({"a": (1, 2.0, "inf"), "b": [[0.0]]}) is None


def test_numpy_values_and_arrays():
    assert first_non_finite({"x": np.float64(np.inf)}) == ("x", math.inf)
    grid = np.zeros((2, 3))
    grid[1, 2] = np.nan
    path, value = first_non_finite({"grid": grid})
    assert path == "grid[1, 2]" and math.isnan(value)
    assert first_non_finite({"ints": np.arange(4)}) is None


def test_check_finite_raises_one_line_naming_the_key():
    check_finite({"a": 1.0, "b": [2, 3]}, "report")
    with pytest.raises(SimulationError) as info:
        check_finite({"step_time_s": math.inf}, "report")
    msg = str(info.value)
    assert msg.startswith("report: step_time_s = inf is not a finite number;")
    assert "\n" not in msg


def test_check_timeline():
    b = TimelineBuilder()
    b.add(0, 0, 0, b.name_id("F"), 0, 0, 0, 0.0, 1.0)
    check_timeline(b.build())
    b.add(0, 0, 0, b.name_id("F"), 0, 0, 1, 1.0, math.inf)
    with pytest.raises(SimulationError, match="a span's end_s = inf is not a finite number"):
        check_timeline(b.build())


def test_times_beyond_the_bound_are_refused():
    b = TimelineBuilder()
    b.add(0, 0, 0, b.name_id("F"), 0, 0, 0, 0.0, 1e15)
    check_timeline(b.build())  # exactly the bound
    b.add(0, 0, 0, b.name_id("F"), 0, 0, 1, 1e15, 2e15)
    with pytest.raises(SimulationError, match=r"a span's end_s = 2e\+15 s is beyond 1e\+15 s"):
        check_timeline(b.build())


def test_long_sequences_of_numbers_are_judged_at_once_and_the_first_bad_one_named():
    """A link's samples (thousands of (time, value) pairs) are checked by numpy; a value that is
    not finite, or anything numpy cannot read as numbers, is still found and named by the walk."""
    samples = [(float(i), 0.5) for i in range(200)]
    assert first_non_finite({"link": samples}) is None
    bad = list(samples)
    bad[150] = (150.0, math.inf)
    assert first_non_finite({"link": bad}) == ("link[150][1]", math.inf)
    mixed = [1.0] * 100 + [{"x": math.nan}]
    path, value = first_non_finite({"a": mixed})
    assert path == "a[100].x" and math.isnan(value)
    assert first_non_finite({"a": [1.0] * 100 + [None, "nan", 10 ** 400]}) is None  # as the walk judges them
