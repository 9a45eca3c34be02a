"""JSON text of trace values: each distinct value formatted once, in place, as the encoder spells it."""

from __future__ import annotations

import pytest

from hypothesis import example, given, strategies as st

from simtrain.outputs.trace_text import _each, _each_int, _each_run, _gathered, _ns_texts


@pytest.mark.quick
def test_each_value_formatted_once_in_either_way():
    """Few distinct floats (hashed) and many (sorted), small-range ints (a table) and far-apart
    ones (sorted) all give the text of each value in place; -0.0 stays apart from 0.0."""
    import numpy as np

    few = np.array([0.0, -0.0, 1.5, 0.0, 1e22])
    assert _each(few, repr) == ["0.0", "-0.0", "1.5", "0.0", "1e+22"]
    many = np.arange(2000) / 7.0
    assert _each(many[::-1], repr) == [repr(x) for x in (np.arange(2000) / 7.0)[::-1].tolist()]
    assert _each(np.zeros(0), repr) == []
    assert _each_int(np.array([3, -1, 3, 0]), lambda v: f"<{v}>") == ["<3>", "<-1>", "<3>", "<0>"]
    far = np.array([5, 10**12, -(10**12), 5], dtype=np.int64)
    assert _each_int(far, str) == ["5", "1000000000000", "-1000000000000", "5"]
    runs = np.array([0.0, 0.0, -0.0, 1.5, 1.5, 0.0, 1e-7])
    assert _each_run(runs) == ["0.0", "0.0", "-0.0", "1.5", "1.5", "0.0", "1e-07"]
    assert _each_run(np.zeros(0)) == []


@pytest.mark.quick
@given(st.lists(st.integers(0, 10**17), max_size=40))
@example([9_999_999_999_999_999])  # not a double: numpy would round it before dividing
def test_whole_nanoseconds_are_spelt_as_the_encoder_spells_microseconds(ns):
    """numpy's digits of ``ns / 1000`` are ``float.__repr__``'s, for every size (10**15 us and
    beyond, and negatives, go to ``float.__repr__`` itself, of the quotient Python's division
    gives)."""
    import numpy as np

    values = np.array(ns + [0, 1, 10, 100, 1000, 1010, 10**15 - 1], dtype=np.int64)
    assert _gathered(_ns_texts(values)) == [repr(v / 1000) for v in values.tolist()]
    assert _gathered(_ns_texts(np.array([-5, 7]))) == ["-0.005", "0.007"]
    assert _gathered(_ns_texts(np.zeros(0, dtype=np.int64))) == []
