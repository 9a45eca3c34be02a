"""The attention block: hand-computed FLOPs of projections and core, fused against eager, MLA's
value width, selective recompute, context-parallel steps and the eager core's activations."""

from __future__ import annotations

import pytest

from helpers import tiny_model
from simtrain.costs.attention import (attention_activation_bytes, attention_cost, attention_parts, core_kernels,
                                      cp_kv_bytes, cp_step_core)
from simtrain.costs.kernels import Attention, Gemm
from simtrain.costs.shape import Shape
from simtrain.specs.model import load_model

pytestmark = pytest.mark.quick

N = 1024
SH = Shape(tokens=N, seq=N, tp=1, sp=False)
EAGER = Shape(tokens=N, seq=N, tp=1, sp=False, attention="eager")


def test_hand_flops_of_the_fused_block():
    m = tiny_model(layers=2)  # h = 1024, 8 heads of 128
    gemm = 2 * N * 4 * 1024**2  # QKV (3 h^2) and the output projection (h^2)
    core = 2 * N * N * 1024  # causal: 2 s h per token
    assert attention_cost(m, SH, "F").flops == gemm + core
    assert attention_cost(m, SH, "I").flops == gemm + 2.5 * core  # the fused backward's five products
    assert attention_cost(m, SH, "W").flops == gemm
    assert attention_cost(m, SH, "B").flops == attention_cost(m, SH, "I").flops + gemm
    assert attention_cost(m, SH, "I", selective=True).flops == gemm + 3.5 * core  # the recomputed forward


def test_eager_core_runs_the_full_square_and_keeps_its_scores():
    m = tiny_model(layers=2)
    square = 2 * 2 * N * N * 1024  # QK^T and PV over every pair, no causal saving
    fwd = core_kernels(m, EAGER, "F")
    assert sum(k.flops for k in fwd) == square
    assert sum(k.flops for k in core_kernels(m, EAGER, "I")) == 2 * square
    assert [k.name for k in fwd if not isinstance(k, Gemm)] == ["attn.softmax", "attn.context.copy"]
    assert sum(k.bytes for k in fwd if k.name == "attn.softmax") == 2 * 2 * 8 * N * N
    gpt = load_model("gpt3-175b")  # with dropout: softmax output, mask, dropout output
    sh = Shape(tokens=2048, seq=2048, tp=8, sp=True, attention="eager")
    assert attention_activation_bytes(gpt, sh, selective=False) == 5 * 96 * 2048**2 / 8
    assert attention_activation_bytes(gpt, sh, selective=True) == 0  # rebuilt by selective recompute
    assert attention_activation_bytes(gpt, Shape(tokens=2048, seq=2048, tp=8, sp=True), False) == 0


def test_mla_values_are_v_head_dim_wide():
    ds = load_model("deepseek-v3")  # 128 heads, q/k 192 wide, v 128 wide
    sh = Shape(tokens=4096, seq=4096, tp=8, sp=True)
    (core,) = core_kernels(ds, sh, "F")
    assert isinstance(core, Attention) and (core.d_qk, core.d_v, core.batch) == (192, 128, 16)
    assert core.flops == 2 * 16 * 4096**2 * (192 + 128) / 2
    assert cp_kv_bytes(ds, sh) == 2 * 4096 * 128 * (192 + 128) / 8


def test_mla_down_projections_run_on_the_ranks_sequence_share():
    """MLA's down projections are not split over TP: with sequence parallelism each rank runs
    them over its s / t tokens, without it over all s; the up projections over all s, split."""
    ds = load_model("deepseek-v3")
    for sp, rows in ((True, 4096 // 2), (False, 4096)):
        sh = Shape(tokens=4096, seq=4096, tp=2, sp=sp)
        gemms = {k.name: k for k in attention_cost(ds, sh, "B").kernels if isinstance(k, Gemm)}
        assert gemms["attn.q_down.dgrad"].m == gemms["attn.kv_down.dgrad"].m == rows
        assert gemms["attn.q_down.wgrad"].k == gemms["attn.kv_down.wgrad"].k == rows  # the tokens are the K
        assert gemms["attn.q_up.dgrad"].m == 4096 and gemms["attn.q_up.dgrad"].k == 128 * 192 // 2
    f = {k.name: k for k in attention_cost(ds, Shape(tokens=4096, seq=4096, tp=2, sp=True), "F").kernels}
    assert (f["attn.q_down"].m, f["attn.q_down"].n, f["attn.q_down"].k) == (2048, 1536, 7168)


def test_parts_split_the_block_around_its_core():
    m = load_model("llama3-8b")
    sh = Shape(tokens=4096, seq=8192, tp=2, sp=True, mbs=1)  # cp = 2
    for kind in "FIB":
        head, core, tail = attention_parts(m, sh, kind)
        assert (head + core + tail).flops == attention_cost(m, sh, kind).flops
    head, _, tail = attention_parts(m, sh, "F")
    assert [k.name for k in head.kernels if isinstance(k, Gemm)] == ["attn.qkv"]
    assert [k.name for k in tail.kernels if isinstance(k, Gemm)] == ["attn.proj"]
    step = cp_step_core(m, sh, "F")  # one ring step: local queries against one K/V block
    assert 2 * step.flops == pytest.approx(attention_parts(m, sh, "F")[1].flops)  # cp = 2 steps
