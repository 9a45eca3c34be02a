"""Rank order: dimensions listed innermost first, permutations only."""

from __future__ import annotations

import pytest

from simtrain.errors import SpecError
from simtrain.specs.order import DEFAULT_ORDER, parse_order

pytestmark = pytest.mark.quick


def test_rank_order_is_innermost_first():
    assert parse_order("pp-dp-ep-cp-tp") == ("pp", "dp", "ep", "cp", "tp")
    assert parse_order(DEFAULT_ORDER)[0] == "tp"  # TP groups hold consecutive ranks by default
    with pytest.raises(SpecError, match="permutation of tp-cp-ep-dp-pp"):
        parse_order("tp-tp-ep-dp-pp")
