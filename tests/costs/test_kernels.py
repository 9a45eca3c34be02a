"""Kernels: FLOPs and bytes of a GEMM and of a fused attention forward and backward; costs add up."""

from __future__ import annotations

import pytest

from simtrain.costs.kernels import Attention, Elementwise, Gemm, OpCost, cost

pytestmark = pytest.mark.quick


def test_gemm_flops_and_least_traffic():
    g = Gemm("x", m=128, n=64, k=32, batch=3)
    assert g.flops == 2 * 128 * 64 * 32 * 3
    assert g.bytes == 3 * ((128 * 32 + 32 * 64) * 2 + 128 * 64 * 2)
    fp32_accumulate = Gemm("w", m=128, n=64, k=32, out_bytes=8)
    assert fp32_accumulate.bytes == (128 * 32 + 32 * 64) * 2 + 128 * 64 * 8
    assert Gemm("f8", 128, 64, 32, dtype="fp8").bytes == (128 * 32 + 32 * 64) + 128 * 64 * 2


def test_flash_backward_is_five_products_to_the_forward_two():
    fwd = Attention("a", batch=4, sq=1024, skv=1024, d_qk=128, d_v=128, causal=True, backward=False)
    bwd = Attention("a", batch=4, sq=1024, skv=1024, d_qk=128, d_v=128, causal=True, backward=True)
    assert fwd.flops == 2 * 4 * 1024 * 1024 * 256 / 2  # QK^T and PV, half under the causal mask
    assert bwd.flops / fwd.flops == pytest.approx(2.5)
    mla_f = Attention("a", 1, 512, 512, d_qk=192, d_v=128, causal=False, backward=False)
    mla_b = Attention("a", 1, 512, 512, d_qk=192, d_v=128, causal=False, backward=True)
    assert mla_f.flops == 2 * 512 * 512 * (192 + 128)  # the value product is 128 wide, not 192
    assert mla_b.flops / mla_f.flops == pytest.approx((3 * 192 + 2 * 128) / (192 + 128))


def test_opcost_sums_its_kernels():
    c = cost(Gemm("g", 8, 8, 8), None, Elementwise("e", 100.0, launches=2))
    assert c.flops == 2 * 8**3 and c.bytes == Gemm("g", 8, 8, 8).bytes + 100.0
    assert (c + c).flops == 2 * c.flops and len((c + c).kernels) == 4
    assert c.of_kind("elementwise").kernels == (Elementwise("e", 100.0, launches=2),)
    assert hash(c) == hash(OpCost(c.kernels)) and c == OpCost(c.kernels)
