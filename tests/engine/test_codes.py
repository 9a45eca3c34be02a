"""Codes of a column's values, numbered in order of first use."""

from __future__ import annotations

import numpy as np
import pytest

from simtrain.engine.codes import first_use_codes


@pytest.mark.quick
def test_first_use_codes_number_values_in_order_of_first_use():
    values = ["b", None, "a", "b", None, "c", "a"]
    codes, distinct = first_use_codes(values, len(values))
    assert distinct == ["b", None, "a", "c"] and codes.dtype == np.int32
    assert [distinct[c] for c in codes] == values
    codes, distinct = first_use_codes([], 0)
    assert len(codes) == 0 and distinct == []
