"""Metrics: the breakdown sums to the step; recompute counts in HFU, not MFU."""

from __future__ import annotations

import pytest

from helpers import SEED_70B, simulate, simulate_settings, tiny_model, two_node_cluster
from simtrain.network.analytic import AnalyticNetwork
from simtrain.specs.parallel import ParallelSpec
from simtrain.topology.routing.router import Router
from simtrain.workload.options import WorkloadOptions


@pytest.mark.quick
def test_breakdown_sums_to_step():
    model = tiny_model(layers=4)
    cluster = two_node_cluster(gpus_per_node=8)
    net = AnalyticNetwork(cluster, Router(cluster))
    par = ParallelSpec(tp=2, dp=4, pp=2, gbs=8, seq=1024)
    _, _, rep = simulate(model, par, opts=WorkloadOptions(), network=net)
    assert sum(rep["breakdown_s"].values()) == pytest.approx(rep["step_time_s"], rel=1e-9)


def test_recompute_counts_in_hfu_not_mfu():
    none = simulate_settings(**{**SEED_70B, "tp": 8, "pp": 4, "gbs": 16, "recompute": "none"})
    full = simulate_settings(**{**SEED_70B, "tp": 8, "pp": 4, "gbs": 16, "recompute": "full"})
    # without recompute the hardware FLOPs exceed the model FLOPs only by the fused attention
    # backward's recomputed scores (2.5 forward cores where the model count has 2)
    assert none.report["mfu"] < none.report["hfu"] < 1.03 * none.report["mfu"]
    assert full.report["hfu"] > full.report["mfu"] * 1.2
    assert full.report["breakdown_s"]["recompute"] > 0
    assert full.report["peak_memory_gib"][0] < none.report["peak_memory_gib"][0]
    sel = simulate_settings(**{**SEED_70B, "tp": 8, "pp": 4, "gbs": 16, "recompute": "selective"})
    hw = lambda r: r.report["hardware_flops_per_step"]  # noqa: E731
    assert hw(none) < hw(sel) < hw(full)
    assert sel.report["mfu"] < none.report["mfu"]  # same model FLOPs, longer step
