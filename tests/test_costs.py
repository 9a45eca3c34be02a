"""The cost model: hand-computed FLOPs and bytes of attention, MLP, LM head, static memory and MoE."""

from __future__ import annotations

import pytest

from helpers import tiny_model
from simtrain import costs
from simtrain.costs import Shape, moe_costs
from simtrain.specs.model import load_model


def test_cost_model_hand_numbers():
    model = tiny_model(layers=2)  # h=1024, 8 heads, f=4h, plain MLP
    sh = Shape(tokens=1024, seq=1024, tp=1, sp=False)
    attn = costs.attention_cost(model, sh, "F")
    # QKV + output projection: 2 n (4 h^2); causal core: 2 n s h
    assert attn.flops == 2 * 1024 * 4 * 1024**2 + 2 * 1024 * 1024 * 1024
    assert costs.mlp_cost(model, sh, "F", 0).flops == 2 * 1024 * 2 * 1024 * 4096
    assert costs.attention_cost(model, sh, "I").flops == 2 * 1024 * 4 * 1024**2 + 2 * 2 * 1024**3
    assert costs.attention_cost(model, sh, "W").flops == 2 * 1024 * 4 * 1024**2
    assert costs.lm_head_cost(model, sh, "F").flops == 2 * 1024 * 1024 * 32000
    assert costs.layer_activation_bytes(model, sh, False) == 34 * 1024 * 1024
    assert costs.static_bytes(1e9, zero=1, dp_shard=4) == 1e9 * (2 + 2 + 3)
    assert costs.static_bytes(1e9, zero=3, dp_shard=2) == 1e9 * 8


def test_moe_costs_hand_computed():
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
