"""The program's op table: columns, typed arrays, and row views that read and write through."""

from __future__ import annotations

import numpy as np
import pytest

from simtrain.workload.program import FIELDS, KIND, MORE, NONE, STREAM, TYPED, Op, OpRef, OpTable, Program


def _record(**kw) -> Op:
    base = dict(id=0, rank=3, stream=STREAM["tp"], kind=KIND["tp"], name="tp.all_reduce", stage=1, layer=7, mb=2,
                duration_s=0.0, flops=0.0, nbytes=4096.0, comm="all_reduce", group_set=5, key=("tp", 3, 0),
                peer=-1, peer_stage=-1, deps=[], alloc=0.0, free=0.0)
    base.update(kw)
    return Op(**base)


@pytest.mark.quick
def test_a_row_view_has_every_field_of_a_record_and_writes_through():
    prog = Program()
    first = prog.add(_record())
    ref = prog.add(_record(deps=[first.id], mb=3, key=("tp", 3, 1)))
    assert isinstance(ref, OpRef) and ref.id == 1
    record = _record(deps=[0], mb=3, key=("tp", 3, 1))
    assert {f: getattr(ref, f) for f in FIELDS} == {f: getattr(record, f) for f in FIELDS}
    assert ref.label() == record.label() == "rank 3 tp: tp.all_reduce mb3 layer 7 (stage 1)"
    assert all(hasattr(OpRef, f) for f in FIELDS)  # each a descriptor on the class
    ref.name, ref.nbytes = "tp.all_reduce+all_gather", 8192.0
    ref.deps.append(0)  # the column's own list
    assert prog.ops.name[1] == "tp.all_reduce+all_gather" and prog.ops.nbytes[1] == 8192.0
    assert prog.ops.deps_of(1) == [0, 0] and ref.deps == [0, 0]
    assert prog.ops[1].label() == "rank 3 tp: tp.all_reduce+all_gather mb3 layer 7 (stage 1)"
    assert {k: list(v) for k, v in prog.order.items()} == {(3, STREAM["tp"]): [0, 1]}
    assert prog.members == {("tp", 3, 0): 1, ("tp", 3, 1): 1}


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
    assert set(TYPED) | {"name", "comm", "key", "deps"} == set(FIELDS) | {"dep0", "dep1"}
    with pytest.raises(OverflowError):  # out of range is refused, never wrapped
        table.rank.append(2**31)


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

