"""Memory-bound kernels around the GEMMs: bytes per element, sequence parallelism, dropout masks."""

from __future__ import annotations

import pytest

from helpers import tiny_model
from simtrain.costs.elementwise import activation, bias_grads, mla_layout, norm, residual, rotary
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


def test_unfused_rope_moves_its_products_and_concatenations():
    """``--no-rope-fusion``: Megatron-LM's ``_apply_rotary_pos_emb_bshd`` reads and writes the
    rotated part 12 times over (t * cos, the negated half and its concatenation, * sin, the sum, the
    concatenation with the rest) in six kernels and six small ones over the frequencies; MLA
    de-interleaves the rope features first, 2 more. The fused kernel reads and writes it once."""
    from dataclasses import replace

    llama, dsv3 = load_model("llama3-8b"), load_model("deepseek-v3")
    unfused = replace(SH, rope_fusion=False)
    part = 2 * 1024 * (4096 + 1024) / 4
    for kind in ("F", "I"):
        (rope,) = rotary(llama, unfused, kind)
        assert rope.bytes == 12 * part and rope.launches == 12
        assert rotary(llama, SH, kind)[0].bytes == 2 * part
        mla, fused = rotary(dsv3, unfused, kind)[0], rotary(dsv3, SH, kind)[0]
        assert mla.bytes == 7 * fused.bytes and mla.launches == 13
    assert rotary(llama, unfused, "W") == ()


def test_mla_lays_out_its_query_key_and_value_after_the_rope():
    """DeepSeek-V3 at TP 2 (64 heads per rank; nope 128, rope 64, v 128): the query's concatenation
    reads and writes 64 x 192 per token, the key's reads 64 x 128 + 64 and writes 64 x 192, the
    value's copy reads and writes 64 x 128; bf16, forward and backward alike."""
    ds = load_model("deepseek-v3")
    shape = Shape(tokens=4096, seq=4096, tp=2, sp=True)
    per_token = 2 * 64 * 192 + (64 * 128 + 64) + 64 * 192 + 2 * 64 * 128
    for kind, name in (("F", "attn.mla_layout"), ("I", "attn.mla_layout.bwd")):
        rope, layout = rotary(ds, shape, kind)
        assert rope.bytes == 2 * 2 * 4096 * (64 * 64 + 64)  # the rope parts alone
        assert (layout.name, layout.bytes, layout.launches) == (name, 2 * 4096 * per_token, 3)
    assert rotary(ds, shape, "W") == () and mla_layout(load_model("llama3-8b"), shape, "F") == ()
