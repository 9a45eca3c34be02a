"""The closed form's bandwidth rule: NVLink within a node, the NIC share beyond, the group spans of
a rank order, and the members a group has per node."""

from __future__ import annotations

import pytest

from simtrain.analytic.bandwidth import group_bandwidth, group_spans, per_node
from simtrain.specs.parallel import ParallelSpec

pytestmark = pytest.mark.quick


def test_span_within_a_node_uses_nvlink(seed64):
    # seed-h100: 450 GB/s NVLink per direction, 8 NICs of 400 Gb/s for 8 GPUs: 50 GB/s each
    assert group_bandwidth(seed64, 1) == group_bandwidth(seed64, 8) == 450e9
    assert group_bandwidth(seed64, 9) == 50e9


def test_spans_follow_the_rank_order():
    par = ParallelSpec(tp=2, cp=2, pp=2, dp=4, order="tp-cp-ep-dp-pp")
    # strides: tp 1, cp 2, dp 4, pp 16
    assert group_spans(par) == {"tp": 2, "cp": 4, "pp": 32, "dpcp": 16}
    par = ParallelSpec(tp=2, cp=2, pp=2, dp=4, order="tp-pp-cp-ep-dp")
    # strides: tp 1, pp 2, cp 4, dp 8
    assert group_spans(par) == {"tp": 2, "cp": 8, "pp": 4, "dpcp": 32}


def test_members_per_node(seed64):
    assert per_node(8, 4, seed64) == 4  # the whole group in one node
    assert per_node(64, 8, seed64) == 1  # stride 8: one member per node
    assert per_node(32, 8, seed64) == 2  # stride 4: two members per 8-GPU node
