"""Sizes: static memory under ZeRO with fp32 or bf16 gradients, activations per layer, transfers."""

from __future__ import annotations

import pytest

from helpers import tiny_model
from simtrain.costs.shape import Shape
from simtrain.costs.sizes import layer_activation_bytes, pp_activation_bytes, static_bytes, tp_collective_bytes

pytestmark = pytest.mark.quick


def test_static_bytes_with_fp32_gradients():
    assert static_bytes(1e9, zero=1, dp_shard=4) == 1e9 * (2 + 4 + 3)  # fp32 grads, Adam sharded
    assert static_bytes(1e9, zero=1, dp_shard=4, grad_bytes=2) == 1e9 * (2 + 2 + 3)
    assert static_bytes(1e9, zero=3, dp_shard=2) == 1e9 * (1 + 2 + 6)
    assert static_bytes(1e9, zero=0, dp_shard=8) == 1e9 * 18


def test_activations_and_transfers():
    m = tiny_model(layers=2)
    sh = Shape(tokens=1024, seq=1024, tp=1, sp=False)
    assert layer_activation_bytes(m, sh, False) == 34 * 1024 * 1024
    assert layer_activation_bytes(m, sh, True) == 2 * 1024 * 1024
    no_sp = Shape(tokens=1024, seq=1024, tp=4, sp=False)
    assert layer_activation_bytes(m, no_sp, False) == 1024 * 1024 * (10 + 24 / 4)
    assert tp_collective_bytes(m, no_sp) == 2 * 1024 * 1024
    assert pp_activation_bytes(m, no_sp) == 2 * 1024 * 1024 / 4  # each TP rank sends its slice


def _tiny_moe():
    from simtrain.specs.model import ModelSpec

    return ModelSpec(name="tiny-moe", hidden=1024, layers=2, heads=8, kv_heads=8, ffn=4096, vocab=32000,
                     gated_mlp=False, num_experts=4, top_k=2, moe_ffn=512, shared_experts=1)


def test_recomputed_modules_drop_their_activations_on_a_dense_layer():
    m = tiny_model(layers=2)  # h 1024, ffn 4h, GeLU: table 2's layer
    sp = Shape(tokens=1024, seq=1024, tp=2, sp=True)
    unit = 1024 * 1024 / 2  # s b h / t
    assert layer_activation_bytes(m, sp, False, ("core_attn",)) == 34 * unit  # flash: the core keeps its inputs
    assert layer_activation_bytes(m, sp, False, True) == 34 * unit
    assert layer_activation_bytes(m, sp, False, ("mlp",)) == (34 - 16) * unit  # GeLU input and output
    assert layer_activation_bytes(m, sp, False, ("layernorm",)) == (34 - 4) * unit  # both norms' outputs
    assert layer_activation_bytes(m, sp, False, ("layernorm", "mlp", "core_attn")) == 14 * unit
    no_sp = Shape(tokens=1024, seq=1024, tp=2, sp=False)  # norms' 4 whole on each rank, the MLP's 16 split
    sbh = 1024 * 1024
    assert layer_activation_bytes(m, no_sp, False, ("mlp",)) == sbh * (10 + 8 / 2)
    assert layer_activation_bytes(m, no_sp, False, ("layernorm",)) == sbh * (6 + 24 / 2)


def test_recomputed_modules_drop_their_share_of_an_moe_layer():
    m = _tiny_moe()
    sh = Shape(tokens=1024, seq=1024, tp=1, sp=False)
    sbh = 1024 * 1024
    # per token: routed rows 2 (top_k) x (input 1024 + activation in 512 + out 512) = 4096, shared 512 + 512:
    # the MLP's 16 s b h split 4096 : 1024, the routed output 1024 of 5120, the shared experts 1024
    assert layer_activation_bytes(m, sh, False, ("moe",), moe_layer=True) == 18 * sbh
    assert layer_activation_bytes(m, sh, False, ("moe_act",), moe_layer=True) == pytest.approx((34 - 3.2) * sbh)
    assert layer_activation_bytes(m, sh, False, ("shared_experts",), moe_layer=True) == \
        pytest.approx((34 - 3.2) * sbh)
    assert layer_activation_bytes(m, sh, False, ("moe_act", "shared_experts", "layernorm"), moe_layer=True) == \
        pytest.approx((34 - 6.4 - 4) * sbh)
    assert layer_activation_bytes(m, sh, False, ("moe", "moe_act"), moe_layer=True) == 18 * sbh  # moe holds it all
    assert layer_activation_bytes(m, sh, False, ("moe_act",), moe_layer=False) == 34 * sbh  # a dense layer


def test_mla_up_projection_drops_q_k_and_v():
    from simtrain.specs.model import ModelSpec

    m = ModelSpec(name="tiny-mla", hidden=1024, layers=2, heads=8, kv_heads=8, ffn=4096, vocab=32000,
                  gated_mlp=False, q_lora_rank=256, kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32,
                  v_head_dim=64)
    sh = Shape(tokens=1024, seq=1024, tp=1, sp=True)
    # per token: latents 256 + 160, Q and K 8 x 96 each, V and the core's output 8 x 64: Q, K, V 2048 of 2976
    want = (34 - 8 * 2048 / 2976) * 1024 * 1024
    assert layer_activation_bytes(m, sh, False, ("mla_up_proj",)) == pytest.approx(want)
