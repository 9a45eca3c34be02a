"""The closed-form model against every number the course notes print (parallel_plan.py and the
exercise's scale_out.py), plus the schedules it covers and the report's invariants."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from simtrain import api
from simtrain.analytic.model import (MIN_CP_CHUNK, analytic_report, cluster_bandwidths, estimate,
                                    group_bandwidth, group_spans)
from simtrain.analytic.search import closed_form_search, format_plan, rank_of
from simtrain.errors import SpecError
from simtrain.metrics import BREAKDOWN
from simtrain.schedules import REGISTRY
from simtrain.specs.model import load_model
from simtrain.specs.parallel import ParallelSpec
from simtrain.topology.cluster import load_topology

# The notes' script uses the published parameter counts N = 70.6e9 and 8.03e9. Our ModelSpec
# counts 70,553,706,496 for Llama 3 70B (8,030,261,248 for 8B): with it two printed MFUs of the
# first search move by 0.1 point (53.7 -> 53.6, 52.2 -> 52.1; the raw values are 53.652% vs
# 53.649% and 52.153% vs 52.149%), everything else still reproduces. The oracle tests therefore
# pass the script's N through ``n_params``; test_modelspec_n checks the rest with our own count.
N_70B, N_8B = 70.6e9, 8.03e9


@pytest.fixture(scope="module")
def seed64():
    return load_topology("seed-h100")


@pytest.fixture(scope="module")
def seed1024():
    return load_topology("seed-h100", nodes=128)


@pytest.fixture(scope="module")
def llama70b():
    return load_model("llama3-70b")


@pytest.fixture(scope="module")
def llama8b():
    return load_model("llama3-8b")


# (tp, cp, pp, dp, MFU as printed, GiB per GPU as printed, "rc/layers" or None, printed shares)
BLOCKS = {
    "70b-64-8k": dict(
        model="70b", gpus=64, seq=8192, gbs=512, fit=24,
        top=[(4, 2, 2, 4, "53.7%", "66", None, dict(compute=89, imbalance=1, tp=8, bubble=1)),
             (4, 2, 4, 2, "52.2%", "50", None, dict(compute=87, imbalance=4, tp=8, bubble=1)),
             (4, 2, 8, 1, "49.6%", "42", None, dict(compute=83, imbalance=8, tp=8, bubble=1))],
        extra=[(5, (8, 1, 1, 8, "49.3%", "66", None, dict(compute=82, tp=18))),
               (9, (8, 1, 4, 2, "47.1%", "42", None,
                    dict(compute=78, imbalance=3, tp=17, bubble=1)))]),
    "70b-64-128k": dict(
        model="70b", gpus=64, seq=131072, gbs=32, fit=23,
        top=[(8, 4, 2, 1, "44.4%", "66", "24/40",
              dict(compute=74, recompute=15, imbalance=1, tp=8, bubble=3)),
             (4, 8, 2, 1, "44.2%", "66", "32/40", dict(compute=74, recompute=19, tp=3, bubble=3)),
             (8, 4, 1, 2, "43.8%", "66", "64/80", dict(compute=73, recompute=19, tp=8))],
        extra=[(6, (8, 1, 1, 8, "41.8%", "65", "80/80", dict(compute=70, recompute=23, tp=7)))]),
    "8b-8-8k": dict(
        model="8b", gpus=8, seq=8192, gbs=64, fit=16,
        top=[(1, 2, 1, 4, "59.9%", "58", None, dict(compute=100)),
             (2, 1, 1, 4, "56.9%", "43", None, dict(compute=95, tp=5)),
             (2, 2, 1, 2, "56.9%", "35", None, dict(compute=95, tp=5))],
        extra=[(4, (1, 1, 1, 8, "55.0%", "66", "9/32", dict(compute=92, recompute=8)))]),
    # exercise 2, scale_out.py
    "70b-1024-gbs512": dict(
        model="70b", gpus=1024, seq=8192, gbs=512, fit=28,
        top=[(8, 1, 1, 128, "47.6%", "55", None, dict(compute=79, tp=17, dp=4)),
             (4, 2, 2, 64, "46.5%", "55", None,
              dict(compute=77, imbalance=1, tp=7, bubble=11, dp=3)),
             (4, 2, 4, 32, "43.7%", "38", None,
              dict(compute=73, imbalance=3, tp=7, bubble=16, dp=2))],
        extra=[]),
    "70b-1024-gbs2048": dict(
        model="70b", gpus=1024, seq=8192, gbs=2048, fit=28,
        top=[(4, 2, 2, 64, "52.0%", "55", None,
              dict(compute=87, imbalance=1, tp=8, bubble=3, dp=1)),
             (4, 2, 4, 32, "50.2%", "38", None, dict(compute=84, imbalance=4, tp=8, bubble=4)),
             (8, 1, 1, 128, "48.9%", "55", None, dict(compute=82, tp=18, dp=1))],
        extra=[]),
}


def _run(block, request, n_params="script"):
    b = BLOCKS[block]
    model = request.getfixturevalue("llama70b" if b["model"] == "70b" else "llama8b")
    cluster = request.getfixturevalue("seed1024" if b["gpus"] > 64 else "seed64")
    if n_params == "script":
        n_params = N_70B if b["model"] == "70b" else N_8B
    return b, closed_form_search(model, cluster, gpus=b["gpus"], seq=b["seq"], gbs=b["gbs"],
                     n_params=n_params)


def _check_line(plan, expected, mfu_override=None):
    tp, cp, pp, dp, mfu, gib, rc, shares = expected
    assert (plan["tp"], plan["cp"], plan["pp"], plan["dp"]) == (tp, cp, pp, dp)
    assert f"{plan['mfu']:.1%}" == (mfu_override or mfu)
    assert f"{plan['memory_gib']:.0f}" == gib
    got_rc = plan["recompute_layers"][0]
    assert (f"{got_rc}/{plan['layers_per_stage']}" if got_rc else None) == rc
    step = plan["step_time_s"]
    for key in BREAKDOWN:
        share = plan["breakdown_s"][key] / step
        if key in shares:  # printed, rounded to whole percent
            assert round(share * 100) == shares[key], (key, share)
            assert f"{share:.0%}" == f"{shares[key]}%"
        else:  # the script omits shares below 0.5%
            assert share < 0.005, (key, share)


@pytest.mark.parametrize("block", list(BLOCKS))
def test_notes_search(block, request):
    b, plans = _run(block, request)
    assert len(plans) == b["fit"]
    for plan, expected in zip(plans[:3], b["top"]):
        _check_line(plan, expected)
    for rank, expected in b["extra"]:
        assert rank_of(plans, *expected[:3]) == rank
        _check_line(plans[rank - 1], expected)


@pytest.mark.parametrize("block", list(BLOCKS))
def test_modelspec_n(block, request):
    """With the ModelSpec's own parameter count only the first two MFUs of the first search
    differ from the print (see the comment on N_70B)."""
    b, plans = _run(block, request, n_params=None)
    assert len(plans) == b["fit"]
    override = {("70b-64-8k", 0): "53.6%", ("70b-64-8k", 1): "52.1%"}
    for i, (plan, expected) in enumerate(zip(plans[:3], b["top"])):
        _check_line(plan, expected, override.get((block, i)))
    for rank, expected in b["extra"]:
        assert rank_of(plans, *expected[:3]) == rank
        _check_line(plans[rank - 1], expected)


def test_notes_prose(request):
    """Claims of the notes' text: CP saves 2.6 MFU points at 128K over TP=8 with all layers
    recomputed; the 8B's best is about 5 points above pure DP; exercise 1's TP communication
    over compute: about 9% at t = 4 and 22% at t = 8 (70B, 8K)."""
    _, long = _run("70b-64-128k", request)
    assert round((long[0]["mfu"] - long[rank_of(long, 8, 1, 1) - 1]["mfu"]) * 100, 1) == 2.6
    _, small = _run("8b-8-8k", request)
    assert round((small[0]["mfu"] - small[rank_of(small, 1, 1, 1) - 1]["mfu"]) * 100) == 5
    _, short = _run("70b-64-8k", request)
    for (tp, cp, pp), ratio in (((4, 2, 2), "9%"), ((8, 1, 1), "22%")):
        plan = short[rank_of(short, tp, cp, pp) - 1]
        assert f"{plan['breakdown_s']['tp'] / plan['breakdown_s']['compute']:.0%}" == ratio


def test_format_plan(request):
    _, plans = _run("70b-64-128k", request)
    assert format_plan(plans[0]) == ("TP=8 CP=4 PP=2 DP=1: MFU 44.4%, 66 GiB/GPU, recompute "
                                     "24/40 layers | compute 74% recompute 15% imbalance 1% "
                                     "tp 8% bubble 3%")


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
    assert group_bandwidth(oversub, 32) == 50e9  # one leaf: 4 nodes
    assert group_bandwidth(oversub, 64) == 25e9  # crosses the 2:1 leaf uplinks
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
    uncovered = r"no closed form for pp=4, 6 micro-batches, vpp=2 \(it needs vpp = 1, or pp divides m"
    with pytest.raises(SpecError, match=uncovered):
        analytic_report(llama70b, seed64, replace(par, gbs=12, vpp=2, schedule="interleaved-1f1b"))


# ---- report invariants --------------------------------------------------------------------------

@pytest.mark.parametrize("block", list(BLOCKS))
def test_breakdown_sums_to_step(block, request):
    _, plans = _run(block, request)
    for p in plans:
        assert set(p["breakdown_s"]) == set(BREAKDOWN)
        assert sum(p["breakdown_s"].values()) == pytest.approx(p["step_time_s"], rel=1e-12)
        assert all(v >= 0 for v in p["breakdown_s"].values())
        assert p["breakdown_s"]["ep"] == 0.0
        comm = ("tp", "cp", "ep", "pp", "dp")
        assert p["exposed_comm_s"] == {k: p["breakdown_s"][k] for k in comm}
        assert p["bubble_ratio"] == pytest.approx(p["breakdown_s"]["bubble"] / p["step_time_s"])
        assert p["hfu"] >= p["mfu"]
        assert (p["hfu"] > p["mfu"]) == (p["recompute_layers"][0] > 0)
        assert p["tflops_per_gpu"] * 1e12 == pytest.approx(p["mfu"] * 989e12)
        assert p["tokens_per_s"] == pytest.approx(p["gbs"] * p["seq"] / p["step_time_s"])
        peaks = p["peak_memory_gib"]
        assert len(peaks) == p["pp"] == len(p["recompute_layers"])
        assert peaks[0] == p["memory_gib"] and peaks == sorted(peaks, reverse=True)
        assert p["fits_in_memory"] and p["memory_gib"] <= 72e9 / 2**30
        assert p["model"] == "analytic"


def test_report_matches_simulator_keys(llama70b, seed64):
    """The closed form fills every key of its report type, the simulator's step metrics among them."""
    from typing import get_type_hints

    from simtrain.analytic.model import AnalyticReport
    from simtrain.metrics import StepMetrics

    est = estimate(llama70b, seed64, ParallelSpec(recompute="auto", tp=8, pp=4, dp=2, gbs=32, seq=8192))
    assert set(get_type_hints(StepMetrics)) < set(est) == set(get_type_hints(AnalyticReport))
    assert est["memory_excess_gib"] == [0.0] * 4


def test_does_not_fit_or_invalid(llama70b, seed64):
    base = dict(gbs=512, seq=8192)
    assert estimate(llama70b, seed64, ParallelSpec(recompute="auto", tp=1, cp=1, pp=1, dp=64, **base)) is None
    with pytest.raises(SpecError, match=r"tp\*cp\*pp=1,.*no recompute count fits in 72\.0 GB"):
        analytic_report(llama70b, seed64, ParallelSpec(recompute="auto", tp=1, cp=1, pp=1, dp=64, **base))
    cases = [
        (ParallelSpec(recompute="auto", tp=16, pp=4, dp=1, **base), "tp=16 exceeds the 8 GPUs"),
        (ParallelSpec(recompute="auto", tp=8, pp=3, dp=1, **base), "does not divide the 80 layers"),
        (ParallelSpec(recompute="auto", tp=8, cp=4, dp=2, **base), "below min_cp_chunk=4096"),
        (ParallelSpec(recompute="auto", tp=8, dp=8, gbs=100, seq=8192), "gbs=100 is not divisible by dp\\*mbs=8"),
        (ParallelSpec(tp=8, dp=8, recompute="0", gbs=32, seq=131072),
         "recompute=0 layers fits in 72.0 GB"),
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
    with pytest.raises(SpecError, match="dense models only"):
        estimate(load_model("mixtral-8x7b"), seed64, ParallelSpec(recompute="auto", tp=8, dp=8, **base))


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
