"""MLP and MoE blocks: hand-computed FLOPs, grouped expert GEMMs at the real tokens per expert."""

from __future__ import annotations

import math

import pytest

from helpers import tiny_model
from simtrain.costs.kernels import Gemm
from simtrain.costs.dispatch import a2a_bytes
from simtrain.costs.mlp import mlp_cost, mlp_parts, moe_cost, moe_costs, moe_etp_bytes, moe_routed_rows
from simtrain.costs.shape import Shape
from simtrain.specs.model import load_model

pytestmark = pytest.mark.quick


def test_dense_mlp_hand_flops():
    m = tiny_model(layers=2)  # h = 1024, f = 4096, two matrices
    sh = Shape(tokens=1024, seq=1024, tp=1, sp=False)
    assert mlp_cost(m, sh, "F").flops == 2 * 1024 * 2 * 1024 * 4096
    assert mlp_cost(m, sh, "B").flops == 2 * mlp_cost(m, sh, "F").flops
    gated = load_model("llama3-8b")
    fc1 = next(k for k in mlp_cost(gated, Shape(tokens=512, seq=512, tp=2, sp=True), "F").kernels if k.name == "mlp.fc1")
    assert (fc1.m, fc1.n, fc1.k) == (512, 2 * 14336 // 2, 4096)  # gate and up in one GEMM


@pytest.mark.parametrize("kind", ["F", "I", "W"])
def test_mlp_parts_split_the_block_at_its_linear_layers(kind):
    m = load_model("llama3-8b")
    sh = Shape(tokens=512, seq=512, tp=2, sp=True)
    head, core, tail = mlp_parts(m, sh, kind)
    assert head.kernels + core.kernels + tail.kernels == mlp_cost(m, sh, kind).kernels
    first, second = ("fc1", "fc2") if kind == "F" else ("fc2", "fc1")
    assert any(k.name.startswith(f"mlp.{first}") for k in head.kernels)
    assert not any(k.name.startswith(f"mlp.{second}") for k in head.kernels + core.kernels)
    assert all(k.name.startswith(f"mlp.{second}") for k in tail.kernels if isinstance(k, Gemm))
    assert (core.kernels == ()) == (kind == "W")  # the activation has no weights


def test_moe_costs_hand_computed():
    m = load_model("mixtral-8x7b")  # top 2 of 8 experts, no shared experts
    sh = Shape(tokens=4096, seq=4096, tp=2, sp=True)
    f = moe_costs(m, sh, "F", expert_tp=1, ep=1, load=1.5)
    tokens = 4096 / 2  # sequence parallelism keeps the tokens split over the TP ranks
    assert a2a_bytes(m, sh, m.top_k, 1.5) == pytest.approx(2 * tokens * 2 * m.hidden * 1.5)
    per_expert = math.ceil(tokens * 2 * 1.5 / 8)
    assert f.experts.of_kind("gemm").flops == pytest.approx(2 * per_expert * 8 * m.expert_params())
    assert f.router.of_kind("gemm").flops == pytest.approx(2 * tokens * m.hidden * 8)
    assert f.shared is None
    i, b = moe_costs(m, sh, "I", 1), moe_costs(m, sh, "B", 1)
    assert b.experts.of_kind("gemm").flops == pytest.approx(2 * i.experts.of_kind("gemm").flops)
    # expert TP 2: the dispatch carries the sequence shard (Megatron-LM's MoEAlltoAllTokenDispatcher),
    # the expert-TP all-gather after it joins the 2 ranks' rows: 2 x 2048 x 2 rows, ffn / 2
    etp = moe_costs(m, sh, "F", expert_tp=2)
    assert a2a_bytes(m, sh, m.top_k) == pytest.approx(2 * 2048 * 2 * m.hidden)
    assert moe_routed_rows(m, sh, 2) == 2 * 2048 * 2
    assert moe_etp_bytes(m, sh, 2, 0.5) == pytest.approx(2 * 2048 * 2 * 0.5 * m.hidden * 2)
    up = next(k for k in etp.experts.kernels if k.name == "moe.expert.fc1")
    assert isinstance(up, Gemm) and (up.m, up.n, up.batch) == (2 * 2048 * 2 // 8, 2 * 14336 // 2, 8)
    assert etp.router.of_kind("gemm").flops == f.router.of_kind("gemm").flops  # router on the shard
    # without sequence parallelism the TP ranks already hold the same tokens: nothing to gather
    assert moe_routed_rows(m, Shape(tokens=4096, seq=4096, tp=2, sp=False), 2) == 4096 * 2
    expert_ep = moe_costs(m, sh, "F", expert_tp=1, ep=8)  # one local expert holds all the rank's share
    up = next(k for k in expert_ep.experts.kernels if k.name == "moe.expert.fc1")
    assert isinstance(up, Gemm) and (up.batch, up.m) == (1, math.ceil(tokens * 2 / 1))


@pytest.mark.quick
def test_the_all_to_all_dispatcher_sorts_the_received_chunks_by_local_expert():
    """Megatron-LM's all-to-all dispatcher reads and writes every received row once more each way
    ("Permutation 2", ``sort_chunks_by_idxs``) where an EP rank holds several experts; DeepEP's
    permutation after its dispatch is the only one, and one local expert needs no sort."""
    m = load_model("deepseek-v3")  # 256 experts: 4 per rank at EP 64
    sh = Shape(tokens=4096, seq=4096, tp=2, sp=True)
    rows = 2048 * 8  # the rank's sequence shard, top 8

    def permute_bytes(kind: str, dispatcher: str, ep: int = 64) -> float:
        c = moe_costs(m, sh, kind, expert_tp=1, ep=ep, dispatcher=dispatcher)
        return sum(k.bytes for k in c.experts.kernels if k.name.startswith("moe.permute"))

    for kind in ("F", "I"):
        assert permute_bytes(kind, "deepep") == pytest.approx(2 * 2 * 2 * rows * m.hidden)
        assert permute_bytes(kind, "alltoall") == pytest.approx(2 * permute_bytes(kind, "deepep"))
    assert permute_bytes("W", "alltoall") == 0
    assert permute_bytes("F", "alltoall", ep=256) == permute_bytes("F", "deepep", ep=256)  # one expert a rank
    assert permute_bytes("F", "alltoall", ep=1) == permute_bytes("F", "deepep", ep=1)  # nothing received


def test_shared_experts_run_over_every_token():
    ds = load_model("deepseek-v3")
    sh = Shape(tokens=4096, seq=4096, tp=4, sp=True)
    c = moe_costs(ds, sh, "F", expert_tp=1, ep=8)
    assert c.shared is not None
    assert c.shared.of_kind("gemm").flops == pytest.approx(2 * 4096 * ds.shared_expert_params() / 4)
    assert moe_cost(ds, sh, "F", 1, 8).flops == pytest.approx(c.router.flops + c.experts.flops + c.shared.flops)


def test_recomputing_mlp_adds_exactly_its_forward_kernels_to_pass_i():
    m = tiny_model()  # h 1024, ffn 4096, GeLU, no dropout
    sh = Shape(tokens=1024, seq=1024, tp=2, sp=True)
    plain, again = mlp_cost(m, sh, "I").kernels, mlp_cost(m, sh, "I", ("mlp",)).kernels
    forward = tuple(k for k in mlp_cost(m, sh, "F").kernels if not k.name.startswith(("mlp.norm", "mlp.residual")))
    assert [k.name for k in forward] == ["mlp.fc1", "mlp.act", "mlp.fc2"]
    assert again == forward + plain  # fc1, activation, fc2 again, then the backward as before
    # 2 tokens x weights: fc1 1024 x 2048 and fc2 2048 x 1024 per TP rank
    assert sum(k.flops for k in again) - sum(k.flops for k in plain) == 2 * 1024 * 2 * 1024 * 2048
    assert mlp_cost(m, sh, "F", ("mlp",)) == mlp_cost(m, sh, "F")  # the forward and W pass stay as they are
    assert mlp_cost(m, sh, "W", ("mlp",)) == mlp_cost(m, sh, "W")
    head, core, tail = mlp_parts(m, sh, "I", ("mlp",))
    assert head.kernels[-1].name == "mlp.fc2.dgrad" and [k.name for k in tail.kernels] == ["mlp.fc1.dgrad",
                                                                                         "mlp.norm.bwd"]
    assert mlp_cost(m, sh, "I", ("layernorm",)).kernels[-2:] == mlp_cost(m, sh, "F").kernels[:1] + plain[-1:]


def test_moe_act_and_shared_experts_run_their_forward_again():
    m = load_model("deepseek-v3")
    sh = Shape(tokens=4096, seq=4096, tp=1, sp=False)
    plain = moe_costs(m, sh, "I", 1, 8)
    act = moe_costs(m, sh, "I", 1, 8, recompute=("moe_act",))
    extra = [k for k in act.experts.kernels if k not in plain.experts.kernels]
    assert [k.name for k in extra] == ["mlp.act"] and act.shared == plain.shared and act.router == plain.router
    shared = moe_costs(m, sh, "I", 1, 8, recompute=("shared_experts",))
    assert shared.experts == plain.experts
    assert [k.name for k in shared.shared.kernels[:3]] == ["moe.shared.fc1", "mlp.act", "moe.shared.fc2"]
    whole = moe_costs(m, sh, "I", 1, 8, recompute=("moe",))
    assert [k.name for k in whole.experts.kernels[:3]] == ["moe.router", "moe.topk", "moe.permute"]
    assert whole.shared == shared.shared
