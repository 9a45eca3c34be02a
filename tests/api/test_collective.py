"""collective(): one collective on a topology, nccl-tests style, priced as a run prices it."""

from __future__ import annotations

import pytest

from simtrain import collective
from simtrain.errors import SpecError

pytestmark = pytest.mark.quick


def test_bus_bandwidth_follows_nccl_tests_definition():
    """nccl-tests doc/PERFORMANCE.md: algbw = S / t, busbw = algbw * 2 (n - 1) / n for all-reduce."""
    rep = collective("all-reduce", size_bytes=2**30, gpus=8, topology="h100-ib")
    assert rep["algbw_Bps"] == pytest.approx(2**30 / rep["time_s"])
    assert rep["busbw_Bps"] == pytest.approx(rep["algbw_Bps"] * 2 * 7 / 8)
    assert rep["time_s"] == rep["uncontended_time_s"]  # one group: nothing contends


def test_concurrent_groups_are_disjoint_shifted_copies():
    rep = collective("all-gather", size_bytes=2**20, ranks=[0, 8], topology="h100-ib", concurrent_groups=4)
    assert rep["groups"] == [[0, 8], [1, 9], [2, 10], [3, 11]]


def test_a_bad_group_is_one_line():
    with pytest.raises(SpecError, match="give either --gpus N or --ranks"):
        collective("all-reduce", size_bytes=1024, topology="h100-ib")
