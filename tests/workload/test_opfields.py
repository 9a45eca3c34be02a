"""The program vocabulary: how an error names an op, and how a table holds each field."""

from __future__ import annotations

import pytest

from simtrain.workload.opfields import CODED, FIELDS, KIND, KINDS, STREAM, STREAMS, TYPED, op_label

pytestmark = pytest.mark.quick


def test_an_op_is_named_by_rank_stream_name_micro_batch_layer_and_stage():
    assert op_label(3, STREAM["tp"], "tp.all_reduce", 2, 7, 1) == "rank 3 tp: tp.all_reduce mb2 layer 7 (stage 1)"
    assert op_label(0, STREAM["dp"], "dp.rs", -1, -1, 0) == "rank 0 dp: dp.rs (stage 0)"


def test_every_field_has_a_column_and_codes_index_their_tables():
    held = {CODED.get(f, f) for f in FIELDS} - {"deps", "key"}
    assert held | {"dep0", "dep1"} == set(TYPED)  # every other field typed; deps in two columns
    assert all(TYPED[c] == "i" for c in CODED.values())
    assert [STREAMS[STREAM[s]] for s in STREAMS] == list(STREAMS) and [KINDS[KIND[k]] for k in KINDS] == list(KINDS)
