"""Embedding, LM head with its fp32 cross-entropy, and the optimizer step."""

from __future__ import annotations

import pytest

from helpers import tiny_model
from simtrain.costs.ends import embedding_cost, lm_head_cost, logits_bytes, optimizer_cost
from simtrain.costs.shape import Shape

pytestmark = pytest.mark.quick

SH = Shape(tokens=1024, seq=1024, tp=2, sp=True)


def test_lm_head_and_loss():
    m = tiny_model(layers=2)  # h = 1024, V = 32000
    f = lm_head_cost(m, SH, "F")
    assert f.flops == 2 * 1024 * 1024 * 16000  # the vocabulary split over TP
    loss = next(k for k in f.kernels if k.name == "loss")
    assert loss.bytes == 38 * 1024 * 16000  # upcast, max, shift, exp, sum, normalise in fp32
    assert next(k for k in lm_head_cost(m, SH, "I").kernels if k.name == "loss.bwd").bytes == 14 * 1024 * 16000
    assert lm_head_cost(m, SH, "B").flops == 2 * f.flops
    assert logits_bytes(m, SH) == 4 * 1024 * 16000


def test_embedding_and_optimizer():
    m = tiny_model(layers=2)
    assert embedding_cost(m, SH, "F").flops == 0 and embedding_cost(m, SH, "I").kernels == ()
    assert embedding_cost(m, SH, "W").bytes == (2 + 8) * 1024 * 1024  # into the fp32 gradient buffer
    assert optimizer_cost(1e9, 4).bytes == 38 * 1e9 / 4  # fp32 gradients: 2 x 4 + 30
    assert optimizer_cost(1e9, 1, grad_bytes=2).bytes == 34 * 1e9


def test_multi_token_prediction_heads():
    """Each MTP module adds its eh_proj (2h -> h / t) and one more head with its loss; its
    logits stay allocated as the main head's do."""
    from dataclasses import replace

    m = tiny_model(layers=2)
    mtp = replace(m, mtp_layers=1)
    head = lm_head_cost(m, SH, "F").flops
    eh_proj = 2 * 1024 * (2 * 1024) * (1024 // 2)
    assert lm_head_cost(mtp, SH, "F").flops == 2 * head + eh_proj
    assert lm_head_cost(mtp, SH, "B").flops == 2 * lm_head_cost(mtp, SH, "F").flops
    assert logits_bytes(mtp, SH) == 2 * logits_bytes(m, SH)
    assert sum(k.name == "mtp0.loss" for k in lm_head_cost(mtp, SH, "F").kernels) == 1
