"""Layer blocks: the CP ring on the timeline, MoE experts and all-to-all following the routing skew,
the MoE presets, recompute placed just before its backward."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import SEED_70B, simulate_settings
from simtrain.workload.moe_routing import Routing, load_factors


def test_cp_ring_exposed_with_short_chunks_hidden_with_long():
    # TP=8 fills a node, so the CP ring crosses nodes at 50 GB/s
    short = simulate_settings(model="llama3-8b", topology="h100-ib", gpus=64, tp=8, cp=8, pp=1, seq=8192, gbs=1)
    long = simulate_settings(model="llama3-8b", topology="h100-ib", gpus=64, tp=8, cp=8, pp=1, seq=131072, gbs=1,
                             recompute="full")
    s, l_ = short.report, long.report
    assert s["exposed_comm_s"]["cp"] > 0.3 * (s["exposed_comm_s"]["cp"] + s["overlapped_comm_s"]["cp"])
    assert l_["exposed_comm_s"]["cp"] < 0.05 * (l_["exposed_comm_s"]["cp"] + l_["overlapped_comm_s"]["cp"])
    tl = short.timeline
    assert len(tl.spans(tl.mask(stream="cp"))) > 0  # the ring is on the timeline


def test_moe_layer_time_follows_the_busiest_expert():
    base = dict(model="mixtral-8x7b", topology="h100-ib", gpus=64, tp=1, pp=4, ep=8, seq=4096, gbs=64)
    uniform = simulate_settings(**base)
    skewed = simulate_settings(**base, routing_skew=1.0, routing_seed=3)
    factors = load_factors(8, 8, 32, Routing(skew=1.0, seed=3))

    def expert(res, layer):
        tl = res.timeline
        names = [tl.names.index(n) for n in ("moe.experts.F",) if n in tl.names]
        m = np.isin(tl["name"], names) & (tl["layer"] == layer) & (tl["mb"] == 0)
        return float((tl["end_s"] - tl["start_s"])[m][0]), float(tl["flops"][m][0])

    for layer in (0, 5):  # the busiest rank's grouped GEMMs run factor times the mean tokens
        (t_skew, f_skew), (t_uni, f_uni) = expert(skewed, layer), expert(uniform, layer)
        assert f_skew / f_uni == pytest.approx(factors[layer], rel=1e-3)  # whole tokens per expert
        assert t_skew / t_uni == pytest.approx(factors[layer], rel=0.1)  # waves and launches aside

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
    res = simulate_settings(model=model, topology="h100-ib", gpus=64, tp=1, pp=4, ep=8, seq=2048, gbs=64,
                            balance_stages=True)
    assert res.report["step_time_s"] > 0
    assert res.report["overlapped_comm_s"]["ep"] + res.report["exposed_comm_s"]["ep"] > 0


def test_deepseek_v3_pp16_ep64_on_a_rail_cluster():
    res = simulate_settings(model="deepseek-v3", topology="h800-rail", gpus=1024, tp=1, pp=16, ep=64, seq=4096,
                            gbs=1024, balance_stages=True)
    tl = res.timeline
    assert len(tl.spans(tl.mask(stream="ep"))) > 0
    assert res.report["exposed_comm_s"]["ep"] > 0


def test_recompute_runs_just_before_its_backward():
    res = simulate_settings(**{**SEED_70B, "tp": 8, "pp": 2, "gbs": 8, "recompute": "2"})
    tl = res.timeline
    comp = tl.spans(tl.mask(rank=0, stream="compute"))
    for i, span in enumerate(comp):
        if span.kind == "R" and span.name == "mlp.R":
            nxt = next(s for s in comp[i + 1:] if s.kind != "R")
            assert nxt.kind == "B" and nxt.layer == span.layer and nxt.mb == span.mb
