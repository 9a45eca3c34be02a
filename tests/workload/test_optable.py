"""The op table: columns, typed arrays, names and comms as codes, dependencies in two columns and
a list."""

from __future__ import annotations

import numpy as np
import pytest

from simtrain.workload.optable import OpTable
from simtrain.workload.opfields import COMM_NONE, COMM_P2P, FIELDS, MORE, NONE, TYPED


@pytest.mark.quick
def test_the_table_indexes_slices_and_iterates_like_a_list():
    table = OpTable()
    for mb in range(4):
        table.append(0, 0, 0, "f", 0, -1, mb, 1.5, 0.0, 0.0, None, -1, None, -1, -1, [], 0.0, 0.0)
    assert len(table) == 4 and [op.mb for op in table] == [0, 1, 2, 3]
    assert [op.id for op in table[1:3]] == [1, 2] and table[-1].id == 3
    with pytest.raises(IndexError):
        table[4]


@pytest.mark.quick
def test_numbers_are_typed_columns_numpy_reads_without_a_copy():
    table = OpTable()
    table.append(2**31 - 1, 1, 2, "x", -1, -1, -1, 0.1, 3e18, 7.0, None, -1, None, -1, -1, [], 1.0, 2.0)
    for name, code in TYPED.items():
        assert getattr(table, name).typecode == code
    assert table.column("duration_s")[0] == 0.1 and table.column("rank")[0] == 2**31 - 1
    assert table.column("rank").dtype == np.int32 and table.column("kind").dtype == np.int8
    assert set(TYPED) | {"name", "comm", "key", "deps"} == set(FIELDS) | {"dep0", "dep1", "name_code", "comm_code"}
    with pytest.raises(OverflowError):  # out of range is refused, never wrapped
        table.rank.append(2**31)


@pytest.mark.quick
def test_names_and_comms_are_codes_read_back_as_their_values():
    table = OpTable()
    rows = [("f.attn", None), ("tp.ag", "all_gather"), ("send", "p2p"), ("f.attn", None), ("tp.ag", "all_gather")]
    for name, comm in rows:
        table.append(0, 0, 0, name, 0, -1, 0, 1.0, 0.0, 0.0, comm, -1, None, -1, -1, [], 0.0, 0.0)
    assert list(table.name) == [n for n, _ in rows] and list(table.comm) == [c for _, c in rows]
    assert table.name[1:3] == ["tp.ag", "send"] and table.comm[-1] == "all_gather" and len(table.name) == 5
    assert table.column("name_code").tolist() == [0, 1, 2, 0, 1]  # each distinct name held once
    assert table.column("comm_code").tolist() == [COMM_NONE, 2, COMM_P2P, COMM_NONE, 2]
    ref = table[1]
    ref.name, ref.comm = ref.name + "+rs", "all_gather+reduce_scatter"  # as a block merges two collectives
    assert (table[1].name, table[1].comm) == ("tp.ag+rs", "all_gather+reduce_scatter")
    assert table.name[4] == "tp.ag" and table.comm == [c for _, c in rows[:1]] + ["all_gather+reduce_scatter"] + \
        [c for _, c in rows[2:]]


@pytest.mark.quick
@pytest.mark.parametrize("deps", [[], [4], [4, 2], [4, 2, 9], [1, 2, 3, 4, 5]])
def test_dependencies_keep_their_order_in_two_columns_and_a_list_beyond(deps):
    table = OpTable()
    for _ in range(12):
        table.append(0, 0, 0, "f", 0, -1, 0, 1.0, 0.0, 0.0, None, -1, None, -1, -1, [], 0.0, 0.0)
    table.set_deps(11, deps)
    assert table.deps_of(11) == deps
    assert (table.dep0[11] == MORE) == (len(deps) > 2) and (table.dep1[11] == NONE) == (len(deps) != 2)
    table.add_dep(11, 7)
    table[11].deps.extend([8])
    assert table.deps_of(11) == deps + [7, 8] == table[11].deps
    with pytest.raises(TypeError):
        table[11].deps.remove(7)

