"""Sizes: static memory under ZeRO with fp32 or bf16 gradients, activations per layer, transfers."""

from __future__ import annotations

from helpers import tiny_model
from simtrain.costs.shape import Shape
from simtrain.costs.sizes import layer_activation_bytes, pp_activation_bytes, static_bytes, tp_collective_bytes


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
