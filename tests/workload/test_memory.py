"""Memory: the simulated peak against the notes' ledger and the memory plan, schedule-dependent
activations, CP's cut at 128K, the order between schedules."""

from __future__ import annotations

import json

import pytest

from helpers import SEED_70B, cli, simulate_settings
from simtrain import api, costs
from simtrain.costs import Shape
from simtrain.analytic.model import estimate
from simtrain.units import GiB
from simtrain.workload.memory import memory_plan


@pytest.mark.parametrize("tp, cp, pp", [(4, 2, 2), (4, 2, 4), (8, 1, 4), (4, 2, 8)])
def test_memory_matches_the_seed_ledger(tp, cp, pp):
    """Stage 0's simulated peak with the ledger's bf16 gradients equals the notes' ledger within
    2% once the ledger's even spread of the embedding and LM head over stages (N / (tp pp)) is
    replaced by the embedding that stage 0 actually holds."""
    dp = 64 // (tp * cp * pp)
    sc = api.resolve({**SEED_70B, "tp": tp, "cp": cp, "pp": pp, "gbs": dp * 2 * pp, "grad_dtype": "bf16"})
    ledger = estimate(sc.model, sc.cluster, sc.parallel, gpu=sc.gpu)["memory_gib"]
    m = sc.model
    per_param = 4 + 12 / (dp * cp)  # bytes: bf16 weights and grads, ZeRO-1 optimizer state
    embedding_on_stage0 = m.embedding_params() / tp
    spread_share = (m.params_total - m.params_nonembedding) / (tp * pp)
    adjusted = ledger + (embedding_on_stage0 - spread_share) * per_param / GiB
    simulated = api.simulate(sc).report["peak_memory_gib"][0]
    assert simulated == pytest.approx(adjusted, rel=0.02)


def activation_gib(report, static_stage0):
    return report["peak_memory_gib"][0] - static_stage0 / GiB


def test_schedule_memory_ratios():
    """Stage 0 activations: GPipe holds m micro-batches where 1F1B holds p; ZB-H2 2p-1 where
    ZB-H1 holds p; interleaved (v=2) p + (p-1)/v (Narayanan et al. 2021, section 2.2.2)."""
    p, m = 4, 16
    act = {}
    for schedule, extra in (("gpipe", {}), ("1f1b", {}), ("zb-h1", {}), ("zb-h2", {}),
                            ("interleaved-1f1b", {"vpp": 2})):
        res = simulate_settings(**{**SEED_70B, "tp": 8, "pp": p, "gbs": 2 * m, "recompute": "none"},
                                schedule=schedule, **extra)
        act[schedule] = activation_gib(res.report, res.static_bytes[0])
    assert act["gpipe"] / act["1f1b"] == pytest.approx(m / p, rel=0.01)
    assert act["zb-h2"] / act["zb-h1"] == pytest.approx((2 * p - 1) / p, rel=0.01)
    assert act["interleaved-1f1b"] / act["1f1b"] == pytest.approx((p + (p - 1) / 2) / p, rel=0.01)


@pytest.mark.quick
def test_cp_cuts_activation_memory_at_128k():
    base = dict(model="llama3-8b", topology="h100-ib", gpus=32, tp=8, pp=1, seq=131072, gbs=4,
                recompute="none")
    one = simulate_settings(**base, cp=1)
    four = simulate_settings(**base, cp=4)
    a1 = activation_gib(one.report, one.static_bytes[0])
    a4 = activation_gib(four.report, four.static_bytes[0])
    assert a1 / a4 == pytest.approx(4.0, rel=0.05)
    assert not one.report["fits_in_memory"]  # it still completes and says so
    assert four.report["overlapped_comm_s"]["cp"] > 0


@pytest.mark.parametrize("extra", [
    dict(recompute="3"), dict(recompute="full", schedule="zb-h1"), dict(recompute="5", schedule="zb-v"),
    dict(schedule="interleaved-1f1b", vpp=2, recompute="2"),
    dict(schedule="gpipe"), dict(schedule="zb-h2", recompute="selective"),
    dict(zero=2), dict(zero=3, schedule="zb-h1"), dict(zero=2, overlap_grad_reduce=False),
])
def test_memory_plan_is_the_simulated_peak(extra):
    sc = api.resolve({**SEED_70B, "tp": 8, "pp": 4, "gbs": 32, "recompute": "none", **extra})
    par = sc.parallel
    n = par.recompute_layers(10**9)
    plan = memory_plan(sc.model, par, sc.gpu, api.build_schedule(sc), n)
    simulated = api.simulate(sc).report["peak_memory_gib"]
    assert [p / GiB for p in plan] == pytest.approx(simulated, rel=1e-12)


def test_memory_plan_bounds_the_interleaved_pairs_of_dualpipev():
    """Overlapped pairs free the backward half's activations while the forward half allocates:
    the plan (halves one after the other) is above the simulated peak by less than one chunk."""
    sc = api.resolve({**SEED_70B, "tp": 8, "pp": 4, "gbs": 64, "recompute": "none", "schedule": "dualpipev"})
    par = sc.parallel
    sched = api.build_schedule(sc)
    plan = [p / GiB for p in memory_plan(sc.model, par, sc.gpu, sched, 0)]
    simulated = api.simulate(sc).report["peak_memory_gib"]
    chunk_gib = costs.layer_activation_bytes(sc.model, Shape.of(par), full_recompute=False) / GiB \
        * -(-sc.model.layers // sched.num_stages)
    for p, s in zip(plan, simulated):
        assert s <= p + 1e-9 and p - s < chunk_gib
    assert any(p - s > 0.1 * chunk_gib for p, s in zip(plan, simulated))  # the overlap does free early


def test_memory_order_between_schedules(tmp_path):
    """GPipe holds all micro-batches, ZB-H2 more than ZB-H1, interleaved more than 1F1B."""
    peak = {}
    for schedule, extra in (("gpipe", ()), ("1f1b", ()), ("zb-h1", ()), ("zb-h2", ()),
                            ("interleaved-1f1b", ("--vpp", 2))):
        code, out, err = cli("run", "--model", "llama3-70b", "--topology", "seed-h100", "--gpus", 64,
                             "--tp", 8, "--pp", 4, "--gbs", 16, "--seq", 8192, "--schedule", schedule, *extra,
                             "--no-plot", "--json", "--out", tmp_path)
        assert code == 0, err
        peak[schedule] = max(json.loads(out)["peak_memory_gib"])
    assert peak["gpipe"] > peak["1f1b"]
    assert peak["zb-h2"] > peak["zb-h1"]
    assert peak["interleaved-1f1b"] > peak["1f1b"]


def _walked_peak(row, schedule, chunks, recomputed, full, kept, logits):
    """The activations' high-water mark walked layer by layer, allocation by allocation: the
    reference the plan's counted form must equal."""
    last_chunk = len(chunks) - 1
    level = peak = 0.0
    for action in row:
        for a in action.halves():
            chunk_index = schedule.chunk_of_stage(a.stage)
            chunk = chunks[chunk_index]
            rc = [i - chunk.start < recomputed for i in chunk]
            if a.kind == "F":
                for r in rc:
                    level += kept if r else full
                    peak = max(peak, level)
                if chunk_index == last_chunk:
                    level += logits
                    peak = max(peak, level)
                continue
            if a.kind in ("B", "I") and chunk_index == last_chunk:
                level -= logits  # the LM head's backward runs first
            for r in reversed(rc):
                if r and a.kind in ("B", "I"):
                    level += full  # the recompute forward
                    peak = max(peak, level)
                if a.kind in ("B", "W"):
                    level -= kept + full if r else full
    return peak


@pytest.mark.quick
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "zb-h1", "zb-h2", "zb-v", "dualpipe", "dualpipev",
                                      "interleaved-1f1b"])
def test_the_counted_plan_equals_the_walked_plan(schedule):
    """Counting each action's layers gives the layer-by-layer walk's peak, for every recompute
    depth: bit for bit with whole-byte sizes (every partial sum is exact), to rounding otherwise."""
    from simtrain.api import build_schedule
    from simtrain.workload import memory
    from simtrain.workload.options import WorkloadOptions
    from simtrain.workload.stages import split_layers

    sc = api.resolve(dict(model="llama3-8b", topology="h100-ib", gpus=8, tp=2, pp=4, seq=2048, gbs=16,
                          schedule=schedule, vpp=2 if schedule == "interleaved-1f1b" else 1))
    sched = build_schedule(sc, WorkloadOptions())
    chunks = split_layers(sc.model, sc.parallel, sc.gpu, sched.chain_length, WorkloadOptions())
    for recomputed in range(0, max(len(c) for c in chunks) + 2):
        for full, kept, logits in ((1e9, 3e7, 5e8), (123456789.0, 1.0, 0.0), (7.0, 7.0, 7.0), (1e9 + 0.3, 0.7, 0.1)):
            for row in sched.actions:
                args = (row, sched, chunks, recomputed, full, kept, logits)
                if float(full).is_integer():
                    assert memory._rank_peak(*args) == _walked_peak(*args)
                else:
                    assert memory._rank_peak(*args) == pytest.approx(_walked_peak(*args), rel=1e-12)
