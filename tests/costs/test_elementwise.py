"""Memory-bound kernels around the GEMMs: bytes per element, sequence parallelism, dropout masks."""

from __future__ import annotations

import pytest

from helpers import tiny_model
from simtrain.costs.elementwise import activation, bias_grads, norm, residual, rotary
from simtrain.costs.shape import Shape
from simtrain.specs.model import load_model

pytestmark = pytest.mark.quick

SH = Shape(tokens=1024, seq=1024, tp=4, sp=True)


def test_norm_and_residual_follow_sequence_parallelism():
    m = tiny_model()  # h = 1024, no dropout
    (f,) = norm("attn", m, SH, "F")
    assert f.bytes == 2 * 2 * 1024 * 1024 / 4  # read and write a tokens/t x h slice
    assert norm("attn", m, Shape(tokens=1024, seq=1024, tp=4, sp=False), "F")[0].bytes == 4 * f.bytes
    assert norm("attn", m, SH, "I")[0].bytes == 3 * f.bytes and norm("attn", m, SH, "W") == ()
    (add,) = residual("attn", m, SH, "F")
    assert add.bytes == 3 * 2 * 1024 * 1024 / 4 and residual("attn", m, SH, "I") == ()


def test_dropout_adds_its_masks():
    gpt = load_model("gpt3-175b")  # dropout 0.1
    rows = SH.sp_tokens * gpt.hidden
    assert residual("attn", gpt, SH, "F")[0].bytes == (3 * 2 + 1) * rows
    assert residual("attn", gpt, SH, "I")[0].bytes == (2 * 2 + 1) * rows


def test_activation_rotary_and_bias():
    llama = load_model("llama3-8b")  # SwiGLU, rotary, no biases
    assert activation(llama, SH, 3584, "F")[0].bytes == 3 * 2 * 1024 * 3584
    assert activation(llama, SH, 3584, "I")[0].bytes == 5 * 2 * 1024 * 3584
    assert rotary(llama, SH, "F")[0].bytes == 2 * 2 * 1024 * (4096 + 1024) / 4
    assert rotary(load_model("gpt3-175b"), SH, "F") == ()  # learned positions
    assert bias_grads("mlp", llama, SH, (10, 20)) == ()
    assert bias_grads("mlp", load_model("gpt3-175b"), SH, (10, 20))[0].launches == 2
