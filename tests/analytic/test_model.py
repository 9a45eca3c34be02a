"""The closed-form model: the specs drive the notes' constants, the bandwidth rule, the schedules it
covers and refuses, its report's keys, configurations that do not fit, fixed recompute."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from helpers import N_70B
from simtrain import api
from simtrain.analytic.model import (MIN_CP_CHUNK, analytic_report, cluster_bandwidths, estimate,
                                    group_bandwidth, group_spans)
from simtrain.errors import SpecError
from simtrain.schedules import REGISTRY
from simtrain.specs.model import load_model
from simtrain.specs.parallel import ParallelSpec
from simtrain.topology.cluster import load_topology

pytestmark = pytest.mark.quick


# ---- the specs drive the script's constants ------------------------------------------------------


def test_seed_presets_give_script_constants(seed64):
    gpu = seed64.gpu
    assert gpu.peak_bf16_flops == 989e12 and gpu.efficiency == 0.6
    assert gpu.usable_memory_bytes == 80e9 * 0.9
    assert seed64.gpus_per_node == 8
    assert cluster_bandwidths(seed64) == (450e9, 50e9)
    assert MIN_CP_CHUNK == 4096
    # the graph gives the same numbers when a cluster carries no spec
    assert cluster_bandwidths(replace(seed64, spec=None)) == (450e9, 50e9)


def test_bandwidth_rule(seed64):
    assert group_bandwidth(seed64, 8) == 450e9
    assert group_bandwidth(seed64, 16) == 50e9
    assert group_bandwidth(seed64, 64) == 50e9  # non-blocking fabric
    oversub = load_topology("h100-ib-2to1")
    assert group_bandwidth(oversub, 32) == 48e9  # one leaf: 4 nodes; 48 of a NIC's 50 GB/s achievable
    assert group_bandwidth(oversub, 64) == 24e9  # crosses the 2:1 leaf uplinks
    par = ParallelSpec(recompute="auto", tp=4, cp=2, pp=2, dp=4)
    assert group_spans(par) == {"tp": 4, "cp": 8, "pp": 64, "dpcp": 32}
    swapped = replace(par, order="cp-tp-ep-dp-pp")
    assert group_spans(swapped) == {"tp": 8, "cp": 2, "pp": 64, "dpcp": 32}


# ---- schedules -----------------------------------------------------------------------------------


def test_schedules_in_estimate(llama70b, seed64):
    par = ParallelSpec(recompute="auto", tp=8, cp=1, pp=4, dp=2, gbs=512, seq=8192)
    base = estimate(llama70b, seed64, par, n_params=N_70B)
    assert base["breakdown_s"]["bubble"] == pytest.approx(3 * base["microbatch_time_s"])
    for name in ("zb-h1", "zb-h2", "zb-v", "dualpipe", "dualpipev"):
        est = estimate(llama70b, seed64, par, schedule=name, n_params=N_70B)
        assert est["schedule"] == name
        assert est["breakdown_s"]["bubble"] == REGISTRY[name].bubble(4, 256, est["microbatch_time_s"])
        assert est["breakdown_s"]["bubble"] < base["breakdown_s"]["bubble"]
    inter = estimate(llama70b, seed64, replace(par, vpp=2, schedule="interleaved-1f1b"),
                     n_params=N_70B)
    assert inter["breakdown_s"]["bubble"] == pytest.approx(1.5 * inter["microbatch_time_s"])
    assert inter["breakdown_s"]["pp"] == pytest.approx(2 * base["breakdown_s"]["pp"])
    # DualPipe holds two stages' parameters (DeepSeek-V3 table 2): more memory than DualPipeV
    dual = estimate(llama70b, seed64, par, schedule="dualpipe", n_params=N_70B)
    dualv = estimate(llama70b, seed64, par, schedule="dualpipev", n_params=N_70B)
    assert dual["memory_gib"] > dualv["memory_gib"]
    assert dual["recompute_layers"][0] == 1 and dualv["recompute_layers"][0] == 0
    # GPipe keeps all 256 micro-batches in flight: no recompute count fits
    assert estimate(llama70b, seed64, par, schedule="gpipe") is None


def test_schedules_without_closed_form_are_refused(llama70b, seed64):
    """zb-auto and schedule files have no closed form: one clear error, never another schedule's."""
    par = ParallelSpec(recompute="auto", tp=8, cp=1, pp=4, dp=2, gbs=512, seq=8192)
    for name in ("zb-auto", "zb-h1-4x8", "schedules/mine.csv"):
        refused = (f"schedule '{re.escape(name)}': the closed-form model has bubble formulas for "
                   f"gpipe, 1f1b, .* only")
        with pytest.raises(SpecError, match=refused):
            estimate(llama70b, seed64, par, schedule=name)
        with pytest.raises(SpecError, match=refused):
            analytic_report(llama70b, seed64, replace(par, schedule=name))
    # the ledger's recompute rule (simtrain analytic / compare with --recompute auto) needs it too
    settings = {"model": "llama3-70b", "topology": "seed-h100", "gpus": 64, "tp": 8, "pp": 4, "gbs": 32,
                "schedule": "zb-auto", "recompute": "auto"}
    with pytest.raises(SpecError, match="schedule 'zb-auto'"):
        api.resolve(settings, recompute_rule="ledger")
    assert api.resolve(settings).parallel.schedule == "zb-auto"  # the simulation's rule works
    # a schedule with a closed form that does not cover the layout: the configuration is refused
    uncovered = r"no closed form for pp=4, 6 micro-batches, vpp=2 \(it needs vpp >= 2 and pp divides m"
    with pytest.raises(SpecError, match=uncovered):
        analytic_report(llama70b, seed64, replace(par, gbs=12, vpp=2, schedule="interleaved-1f1b"))


# ---- the report --------------------------------------------------------------------------------


def test_report_matches_simulator_keys(llama70b, seed64):
    """The closed form fills every key of its report type, the simulator's step metrics among them."""
    from typing import get_type_hints

    from simtrain.analytic.model import AnalyticReport
    from simtrain.results.metrics import StepMetrics

    est = estimate(llama70b, seed64, ParallelSpec(recompute="auto", tp=8, pp=4, dp=2, gbs=32, seq=8192))
    assert set(get_type_hints(StepMetrics)) < set(est) == set(get_type_hints(AnalyticReport))
    assert est["memory_excess_gib"] == [0.0] * 4


def test_does_not_fit_or_invalid(llama70b, seed64):
    base = dict(gbs=512, seq=8192)
    assert estimate(llama70b, seed64, ParallelSpec(recompute="auto", tp=1, cp=1, pp=1, dp=64, **base)) is None
    with pytest.raises(SpecError, match=r"tp\*cp\*pp=1,.*no recompute count fits: .* more than the 72\.0 GB usable"):
        analytic_report(llama70b, seed64, ParallelSpec(recompute="auto", tp=1, cp=1, pp=1, dp=64, **base))
    cases = [
        (ParallelSpec(recompute="auto", tp=16, pp=4, dp=1, **base), "tp=16 exceeds the 8 GPUs"),
        (ParallelSpec(recompute="auto", tp=8, pp=3, dp=1, **base), "does not divide the 80 layers"),
        (ParallelSpec(recompute="auto", tp=8, cp=4, dp=2, **base), "below min_cp_chunk=4096"),
        (ParallelSpec(recompute="auto", tp=8, dp=8, gbs=100, seq=8192), "gbs=100 is not divisible by dp\\*mbs=8"),
        (ParallelSpec(tp=8, dp=8, recompute="0", gbs=32, seq=131072),
         r"recompute=0 does not fit: stage 0 needs .* more than the 72\.0 GB usable"),
    ]
    for par, message in cases:
        assert estimate(llama70b, seed64, par) is None
        with pytest.raises(SpecError, match=message):
            analytic_report(llama70b, seed64, par)
    # a smaller CP chunk admits CP=4 at 8K
    assert estimate(llama70b, seed64, ParallelSpec(recompute="auto", tp=8, cp=4, dp=2, **base),
                    min_cp_chunk=2048) is not None
    with pytest.raises(SpecError, match="needs 1024 GPUs"):
        analytic_report(llama70b, seed64, ParallelSpec(recompute="auto", tp=8, dp=128, **base))
    with pytest.raises(SpecError, match="expert parallelism needs an MoE model"):
        analytic_report(llama70b, seed64, ParallelSpec(recompute="auto", tp=8, dp=8, ep=2, **base))
    mixtral = load_model("mixtral-8x7b")
    with pytest.raises(SpecError, match=r"ep=3 must divide the 8 experts"):
        analytic_report(mixtral, seed64, ParallelSpec(recompute="auto", tp=1, pp=4, dp=16, ep=3, **base))
    with pytest.raises(SpecError, match=r"etp\*ep\*pp=256 the 64 GPUs"):
        analytic_report(mixtral, seed64, ParallelSpec(recompute="auto", tp=8, pp=4, dp=2, ep=8, **base))


def test_fixed_recompute_and_node_count(llama70b, seed64, seed1024):
    par = ParallelSpec(recompute="auto", tp=8, cp=4, pp=2, dp=1, gbs=32, seq=131072)
    auto = estimate(llama70b, seed64, par, n_params=N_70B)
    assert auto["recompute_layers"] == [24, 24]
    full = estimate(llama70b, seed64, replace(par, recompute="full"), n_params=N_70B)
    assert full["recompute_layers"] == [40, 40]
    assert full["memory_gib"] < auto["memory_gib"] and full["mfu"] < auto["mfu"]
    assert analytic_report(llama70b, seed64, par, n_params=N_70B) == auto
    # only per-GPU bandwidths and GPUs per node enter: the node count does not matter
    big = ParallelSpec(recompute="auto", tp=4, cp=2, pp=2, dp=64, gbs=512, seq=8192)
    assert estimate(llama70b, seed64, big) == estimate(llama70b, seed1024, big)
