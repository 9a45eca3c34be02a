"""5D parallelism and memory: the seed's ledger, schedule-dependent memory, CP ring attention,
MoE routing skew, ZeRO-3 prefetch, recompute, stage balancing, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import assert_user_error
from simtrain import api
from simtrain.analytic.model import estimate
from simtrain.workload.moe_routing import Routing, load_factors, rank_loads
from simtrain.units import GiB

SEED = dict(model="llama3-70b", topology="seed-h100", gpus=64, seq=8192, recompute="auto")


def run(**settings):
    return api.simulate(api.resolve(settings))


@pytest.mark.parametrize("tp, cp, pp", [(4, 2, 2), (4, 2, 4), (8, 1, 4), (4, 2, 8)])
def test_memory_matches_the_seed_ledger(tp, cp, pp):
    """Stage 0's simulated peak equals the notes' ledger within 2% once the ledger's even spread
    of the embedding and LM head over stages (N / (tp pp)) is replaced by the embedding that
    stage 0 actually holds."""
    dp = 64 // (tp * cp * pp)
    sc = api.resolve({**SEED, "tp": tp, "cp": cp, "pp": pp, "gbs": dp * 2 * pp})
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
        res = run(**{**SEED, "tp": 8, "pp": p, "gbs": 2 * m, "recompute": "none"}, schedule=schedule, **extra)
        act[schedule] = activation_gib(res.report, res.static_bytes[0])
    assert act["gpipe"] / act["1f1b"] == pytest.approx(m / p, rel=0.01)
    assert act["zb-h2"] / act["zb-h1"] == pytest.approx((2 * p - 1) / p, rel=0.01)
    assert act["interleaved-1f1b"] / act["1f1b"] == pytest.approx((p + (p - 1) / 2) / p, rel=0.01)


def test_cp_cuts_activation_memory_at_128k():
    base = dict(model="llama3-8b", topology="h100-ib", gpus=32, tp=8, pp=1, seq=131072, gbs=4,
                recompute="none")
    one = run(**base, cp=1)
    four = run(**base, cp=4)
    a1 = activation_gib(one.report, one.static_bytes[0])
    a4 = activation_gib(four.report, four.static_bytes[0])
    assert a1 / a4 == pytest.approx(4.0, rel=0.05)
    assert not one.report["fits_in_memory"]  # it still completes and says so
    assert four.report["overlapped_comm_s"]["cp"] > 0


def test_cp_ring_exposed_with_short_chunks_hidden_with_long():
    # TP=8 fills a node, so the CP ring crosses nodes at 50 GB/s
    short = run(model="llama3-8b", topology="h100-ib", gpus=64, tp=8, cp=8, seq=8192, gbs=1)
    long = run(model="llama3-8b", topology="h100-ib", gpus=64, tp=8, cp=8, seq=131072, gbs=1,
               recompute="full")
    s, l_ = short.report, long.report
    assert s["exposed_comm_s"]["cp"] > 0.5 * (s["exposed_comm_s"]["cp"] + s["overlapped_comm_s"]["cp"])
    assert l_["exposed_comm_s"]["cp"] < 0.05 * (l_["exposed_comm_s"]["cp"] + l_["overlapped_comm_s"]["cp"])
    tl = short.timeline
    assert len(tl.spans(tl.mask(stream="cp"))) > 0  # the ring is on the timeline


def test_routing_loads_hand_computed():
    probs = np.array([0.4, 0.1, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05])
    assert rank_loads(probs, 4).tolist() == pytest.approx([0.5, 0.2, 0.2, 0.1])
    assert load_factors(8, 4, 3, Routing(skew=0.0)) == [1.0, 1.0, 1.0]
    f = load_factors(8, 8, 1, Routing(skew=1.0, seed=0))[0]
    assert f == pytest.approx(8 / sum(1 / k for k in range(1, 9)))  # one expert per rank: the top one


def test_moe_costs_hand_computed():
    from simtrain.costs import Shape, moe_costs
    from simtrain.specs.model import load_model

    m = load_model("mixtral-8x7b")  # top 2 of 8 experts, no shared experts
    sh = Shape(tokens=4096, seq=4096, tp=2, sp=True)
    f = moe_costs(m, sh, "F", expert_tp=1, load_factor=1.5)
    tokens = 4096 / 2  # sequence parallelism keeps the tokens split over the TP ranks
    assert f.all_to_all_bytes == pytest.approx(2 * tokens * 2 * m.hidden * 1.5)
    assert f.experts.flops == pytest.approx(2 * tokens * 2 * 1.5 * m.expert_params())
    assert f.router.flops == pytest.approx(2 * tokens * m.hidden * 8)
    assert f.shared is None
    i, b = moe_costs(m, sh, "I", 1, 1.5), moe_costs(m, sh, "B", 1, 1.5)
    assert b.experts.flops == pytest.approx(2 * i.experts.flops) and b.experts.bytes == i.experts.bytes
    gathered = moe_costs(m, sh, "F", expert_tp=2)  # expert TP gathers the tokens first
    assert gathered.all_to_all_bytes == pytest.approx(2 * 4096 * 2 * m.hidden)
    assert gathered.experts.flops == pytest.approx(2 * 4096 * 2 * m.expert_params() / 2)


def test_moe_layer_time_follows_the_busiest_expert():
    base = dict(model="mixtral-8x7b", topology="h100-ib", gpus=64, tp=1, pp=4, ep=8, seq=4096, gbs=64)
    uniform = run(**base)
    skewed = run(**base, routing_skew=1.0, routing_seed=3)
    factors = load_factors(8, 8, 32, Routing(skew=1.0, seed=3))

    def expert_time(res, layer):
        tl = res.timeline
        names = [tl.names.index(n) for n in ("moe.experts.F",) if n in tl.names]
        m = np.isin(tl["name"], names) & (tl["layer"] == layer) & (tl["mb"] == 0)
        return float((tl["end_s"] - tl["start_s"])[m][0])

    for layer in (0, 5):
        ratio = expert_time(skewed, layer) / expert_time(uniform, layer)
        assert ratio == pytest.approx(factors[layer], rel=1e-6)

    def dispatch_bytes(res, layer):
        tl = res.timeline
        m = (tl["name"] == tl.names.index("ep.dispatch")) & (tl["layer"] == layer) & (tl["mb"] == 0)
        return float(tl["bytes"][m][0])

    for layer in (0, 5):  # the busiest rank receives factor times the mean all-to-all volume
        assert dispatch_bytes(skewed, layer) / dispatch_bytes(uniform, layer) == pytest.approx(factors[layer])
    assert skewed.report["step_time_s"] > uniform.report["step_time_s"]
    assert len(uniform.timeline.spans(uniform.timeline.mask(stream="ep"))) > 0


@pytest.mark.parametrize("model", ["mixtral-8x7b", "mixtral-8x22b", "qwen3-235b-a22b", "deepseek-v3"])
def test_moe_presets_run(model):
    res = run(model=model, topology="h100-ib", gpus=64, tp=1, pp=4, ep=8, seq=2048, gbs=64,
              balance_stages=True)
    assert res.report["step_time_s"] > 0
    assert res.report["overlapped_comm_s"]["ep"] + res.report["exposed_comm_s"]["ep"] > 0


def test_deepseek_v3_pp16_ep64_on_a_rail_cluster():
    res = run(model="deepseek-v3", topology="h800-rail", gpus=1024, tp=1, pp=16, ep=64, seq=4096, gbs=1024,
              balance_stages=True)
    tl = res.timeline
    assert len(tl.spans(tl.mask(stream="ep"))) > 0
    assert res.report["exposed_comm_s"]["ep"] > 0


def test_zero3_gathers_hidden_on_fast_network_exposed_on_slow():
    fast_topo = {"gpu": "h100-sxm", "nodes": 1, "node": {"gpus": 8, "nvlink_GBps": 450}}
    slow_topo = {"gpu": "h100-sxm", "nodes": 8, "node": {"gpus": 1, "nic_gbps": 25},
                 "fabric": {"kind": "fat-tree", "nodes_per_leaf": 8, "spines": 1}}
    share = {}
    for name, topo in (("fast", fast_topo), ("slow", slow_topo)):
        from simtrain.topology.cluster import build_topology

        cluster = build_topology(topo, name)
        sc = api.resolve(dict(model="llama3-8b", topology="h100-ib", gpus=8, seq=8192, gbs=16, zero=3))
        sc = api.with_settings(sc, cluster=cluster)
        rep = api.simulate(sc).report
        total = rep["exposed_comm_s"]["dp"] + rep["overlapped_comm_s"]["dp"]
        share[name] = rep["exposed_comm_s"]["dp"] / total
    assert share["fast"] < 0.25
    assert share["slow"] > 0.6


def test_recompute_counts_in_hfu_not_mfu():
    none = run(**{**SEED, "tp": 8, "pp": 4, "gbs": 16, "recompute": "none"})
    full = run(**{**SEED, "tp": 8, "pp": 4, "gbs": 16, "recompute": "full"})
    assert none.report["hfu"] == pytest.approx(none.report["mfu"], rel=0.01)
    assert full.report["hfu"] > full.report["mfu"] * 1.2
    assert full.report["breakdown_s"]["recompute"] > 0
    assert full.report["peak_memory_gib"][0] < none.report["peak_memory_gib"][0]
    sel = run(**{**SEED, "tp": 8, "pp": 4, "gbs": 16, "recompute": "selective"})
    hw = lambda r: r.report["hardware_flops_per_step"]  # noqa: E731
    assert hw(none) < hw(sel) < hw(full)
    assert sel.report["mfu"] < none.report["mfu"]  # same model FLOPs, longer step


def test_recompute_runs_just_before_its_backward():
    res = run(**{**SEED, "tp": 8, "pp": 2, "gbs": 8, "recompute": "2"})
    tl = res.timeline
    comp = tl.spans(tl.mask(rank=0, stream="compute"))
    for i, span in enumerate(comp):
        if span.kind == "R" and span.name == "mlp.R":
            nxt = next(s for s in comp[i + 1:] if s.kind != "R")
            assert nxt.kind == "B" and nxt.layer == span.layer and nxt.mb == span.mb


def test_balancing_reduces_imbalance_on_126_layers():
    base = dict(model="llama3-405b", topology="h100-ib", gpus=128, tp=8, pp=16, seq=4096, gbs=32)
    naive = run(**base, first_stage_layers=6, last_stage_layers=8)  # fewer layers next to the embedding
    balanced = run(**base, balance_stages=True)
    assert balanced.report["stage_imbalance"] < naive.report["stage_imbalance"]
    assert balanced.report["breakdown_s"]["imbalance"] < naive.report["breakdown_s"]["imbalance"]


def test_uneven_chunk_layers():
    from simtrain.workload.stages import chunk_layers
    from simtrain.specs.model import load_model

    m = load_model("llama3-405b")
    split = chunk_layers(m, 16, 7, 7)
    assert [len(r) for r in split] == [7] + [8] * 14 + [7]
    assert split[-1].stop == 126


def test_bad_5d_inputs():
    assert_user_error("run", "--model", "mixtral-8x7b", "--gpus", 64, "--ep", 3,
                      contains=("ep=3",))
    assert_user_error("run", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", 64, "--tp", 8,
                      "--cp", 8, "--seq", 2048, contains=("cp=8", "tokens per CP rank"))
    assert_user_error("run", "--zero", 4, contains=("ZeRO stage",))
    assert_user_error("run", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", 16, "--pp", 3,
                      "--tp", 1, "--dp", 1, contains=("does not match",))
    assert_user_error("run", "--pp", 16, "--gpus", 64, "--tp", 4, "--first-stage-layers", 70,
                      contains=("first_stage_layers=70",))


def test_a_run_that_does_not_fit_says_where_and_by_how_much(tmp_path):
    from helpers import cli

    code, out, err = cli("run", "--model", "llama3-70b", "--topology", "seed-h100", "--gpus", 64, "--tp", 8,
                         "--pp", 4, "--seq", 8192, "--gbs", 64, "--schedule", "gpipe", "--no-plot", "--out",
                         tmp_path)
    assert code == 0, err
    assert "DOES NOT FIT" in out and "stage 0 exceeds the capacity by" in out


@pytest.mark.parametrize("extra", [
    dict(recompute="3"), dict(recompute="full", schedule="zb-h1"), dict(recompute="5", schedule="zb-v"),
    dict(schedule="interleaved-1f1b", vpp=2, recompute="2"), dict(schedule="dualpipev", gbs=64),
    dict(schedule="gpipe"), dict(schedule="zb-h2", recompute="selective"),
])
def test_memory_plan_is_the_simulated_peak(extra):
    from simtrain.workload.memory import memory_plan

    sc = api.resolve({**SEED, "tp": 8, "pp": 4, "gbs": 32, "recompute": "none", **extra})
    par = sc.parallel
    n = par.recompute_layers(10**9)
    plan = memory_plan(sc.model, par, sc.gpu, api.build_schedule(sc), n)
    simulated = api.simulate(sc).report["peak_memory_gib"]
    assert [p / GiB for p in plan] == pytest.approx(simulated, rel=1e-12)


def test_auto_recompute_is_the_fewest_layers_that_fit():
    settings = dict(model="llama3-8b", topology="h100-ib", gpus=32, tp=8, seq=131072, gbs=4)
    sc = api.resolve({**settings, "recompute": "auto"})
    n = int(sc.parallel.recompute)
    assert n > 0
    assert api.simulate(sc).report["fits_in_memory"]
    fewer = api.simulate(api.resolve({**settings, "recompute": str(n - 1)})).report
    assert not fewer["fits_in_memory"]
    assert sc.settings["recompute"] == "auto" and sc.settings["recompute_layers"] == n


def test_auto_recompute_that_cannot_fit_is_an_error():
    assert_user_error("run", "--model", "llama3-70b", "--topology", "seed-h100", "--gpus", 64, "--tp", 8,
                      "--seq", 131072, "--gbs", 8, "--recompute", "auto",
                      contains=("--recompute auto", "even recomputing all 80 layers"))
