"""Layer blocks: the CP ring on the timeline, MoE experts and all-to-all following the routing skew,
the MoE presets, recompute placed just before its backward, TP collectives overlapped as Megatron-LM
and TransformerEngine overlap them."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import SEED_70B, simulate_settings
from simtrain import costs
from simtrain.errors import SpecError
from simtrain.specs.model import load_model
from simtrain.workload.moe_routing import Routing, load_factors


@pytest.mark.quick
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
        return float((tl["end_s"] - tl["start_s"])[m].max()), float(tl["flops"][m].max())

    for layer in (0, 5):  # the busiest EP rank's grouped GEMMs run factor times the mean tokens
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


@pytest.mark.quick
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


@pytest.mark.quick
def test_recompute_runs_just_before_its_backward():
    res = simulate_settings(**{**SEED_70B, "tp": 8, "pp": 2, "gbs": 8, "recompute": "2"})
    tl = res.timeline
    comp = tl.spans(tl.mask(rank=0, stream="compute"))
    for i, span in enumerate(comp):
        if span.kind == "R" and span.name == "mlp.R":
            nxt = next(s for s in comp[i + 1:] if s.kind != "R")
            assert nxt.kind == "B" and nxt.layer == span.layer and nxt.mb == span.mb


SMALL_TP = {**SEED_70B, "tp": 8, "pp": 2, "gbs": 8, "recompute": "none"}


def _span(comp, name, layer, mb=0):
    return next(s for s in comp if s.name == name and s.layer == layer and s.mb == mb)


def _tp_beside(tp_spans, span):
    """TP spans that start while ``span`` runs."""
    return [s for s in tp_spans if span.start_s <= s.start_s < span.end_s]


@pytest.mark.quick
def test_backward_regathers_the_input_and_overlaps_both_tp_collectives():
    res = simulate_settings(**SMALL_TP)
    tl = res.timeline
    comp = tl.spans(tl.mask(rank=0, stream="compute"))
    tp = tl.spans(tl.mask(rank=0, stream="tp"))
    for block, column in (("mlp", "fc1"), ("attn", "proj_qkv")):
        dgrad, wgrad = _span(comp, f"{block}.{column}.B", 3), _span(comp, f"{block}.{column}.wgrad.B", 3)
        assert wgrad.start_s >= dgrad.end_s
        # the input's re-gather runs beside the column-parallel input gradient, the input
        # gradient's reduce-scatter beside its weight gradient
        assert [s.name for s in _tp_beside(tp, dgrad)] == ["tp.all_gather"]
        assert [s.name.split("+")[0] for s in _tp_beside(tp, wgrad)] == ["tp.reduce_scatter"]
    # per layer and micro-batch: 4 forward collectives, 4 backward ones and 2 re-gathers
    layers = res.report["layers_per_chunk"][0]
    one = costs.tp_collective_bytes(load_model("llama3-70b"), costs.Shape.of(res.scenario.parallel))
    moved = sum(s.bytes for s in tp if s.mb == 0)
    assert moved == pytest.approx(10 * layers * one)


@pytest.mark.quick
def test_zero_bubble_weight_pass_regathers_beside_the_row_parallel_weight_gradient():
    res = simulate_settings(**SMALL_TP, schedule="zb-h1")
    tl = res.timeline
    comp = tl.spans(tl.mask(rank=0, stream="compute"))
    tp = tl.spans(tl.mask(rank=0, stream="tp"))
    assert not any(s.kind == "I" and "wgrad" in s.name for s in comp)  # I stays input gradient only
    row, column = _span(comp, "mlp.fc2.W", 5), _span(comp, "mlp.fc1.W", 5)
    gather = _tp_beside(tp, row)
    assert [s.name for s in gather] == ["tp.all_gather"] and gather[0].end_s <= column.start_s + 1e-12


def _busy(starts, ends):
    """Length of the union of the intervals."""
    total, reach = 0.0, -np.inf
    for a, b in sorted(zip(starts.tolist(), ends.tolist())):
        total += max(0.0, b - max(a, reach))
        reach = max(reach, b)
    return total


def _exposure_sums_hold(res):
    rep, tl = res.report, res.timeline
    assert sum(rep["breakdown_s"].values()) == pytest.approx(rep["step_time_s"], rel=1e-9)
    ranks = sorted(set(tl.cols["rank"].tolist()))
    for kind in ("tp", "pp", "dp"):
        busy = []
        for r in ranks:
            m = tl.mask(rank=r, kind=kind)
            busy.append(_busy(tl.cols["start_s"][m], tl.cols["end_s"][m]))
        total = rep["exposed_comm_s"][kind] + rep["overlapped_comm_s"][kind]
        assert total == pytest.approx(float(np.mean(busy)), rel=1e-9, abs=1e-12)


def test_tp_comm_overlap_lowers_exposed_tp_time_of_the_default_scenario():
    base = simulate_settings()
    chunked = simulate_settings(tp_comm_overlap=True)
    for res in (base, chunked):
        _exposure_sums_hold(res)
    assert chunked.report["exposed_comm_s"]["tp"] < 0.5 * base.report["exposed_comm_s"]["tp"]
    assert chunked.report["step_time_s"] < base.report["step_time_s"]
    tl = chunked.timeline
    comp = tl.spans(tl.mask(rank=0, stream="compute"))
    tp = tl.spans(tl.mask(rank=0, stream="tp"))
    qkv = _span(comp, "attn.proj_qkv.F", 2)
    beside = _tp_beside(tp, qkv)  # the all-gather's other tp - 1 chunks run beside the QKV GEMM
    assert [s.name for s in beside] == ["tp.all_gather"]
    assert beside[0].bytes == pytest.approx(7 * _span(tp, "tp.all_gather", 0).bytes)


@pytest.mark.quick
def test_tp_comm_overlap_needs_sequence_parallelism():
    with pytest.raises(SpecError, match="sequence parallelism"):
        simulate_settings(**SMALL_TP, sp=False, tp_comm_overlap=True)
