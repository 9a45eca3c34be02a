"""Vocabularies number values in order of first use; a decoded column reads codes as values."""

from __future__ import annotations

from array import array

import pytest

from simtrain.workload.vocab import Decoded, Vocabulary

pytestmark = pytest.mark.quick


def test_values_are_numbered_in_order_of_first_use_and_keep_their_code():
    v: Vocabulary[str | None] = Vocabulary((None, "p2p"))
    assert [v.code(x) for x in ("b", None, "a", "b", "p2p")] == [2, 0, 3, 2, 1]
    assert v.values == [None, "p2p", "b", "a"] and len(v) == 4


def test_a_decoded_column_reads_like_the_list_of_its_values():
    v = Vocabulary(("x", "y", "z"))
    values = ["z", "x", "x", "y"]
    column = Decoded(array("i", [v.code(x) for x in values]), v.values)
    assert list(column) == values and column == values and len(column) == 4
    assert column[0] == "z" and column[-1] == "y" and column[1:3] == ["x", "x"]
    assert column.count("x") == 2 and column.index("y") == 3 and "w" not in column
    assert column != ["z", "x"]
    with pytest.raises(TypeError):
        hash(column)
