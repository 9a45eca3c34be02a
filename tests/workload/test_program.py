"""A program: ops added as records become rows whose views read and write through."""

from __future__ import annotations

import pytest

from simtrain.workload.program import FIELDS, KIND, STREAM, Op, OpRef, Program


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
