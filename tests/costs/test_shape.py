"""Shape of a rank's micro-batch and the three GEMMs of a linear layer, with FP8's casts."""

from __future__ import annotations

import pytest

from simtrain.costs.kernels import Elementwise, Gemm
from simtrain.costs.shape import Shape, linear
from simtrain.specs.parallel import ParallelSpec

pytestmark = pytest.mark.quick


def test_shape_of_a_layout():
    sh = Shape.of(ParallelSpec(tp=4, cp=2, mbs=2, seq=4096, gbs=4))
    assert (sh.tokens, sh.local_seq, sh.sp_tokens) == (4096, 2048, 1024)
    assert (sh.attention, sh.fp8, sh.grad_bytes) == ("flash", False, 4)  # fp32 gradients by default
    assert Shape.of(ParallelSpec(grad_dtype="bf16")).grad_bytes == 2


def test_linear_passes():
    sh = Shape(tokens=512, seq=512, tp=1, sp=False)
    (f,), (i,), (w,) = (linear("fc", sh, 64, 256, k) for k in "FIW")
    assert (f.m, f.n, f.k) == (512, 256, 64)  # Y = X W
    assert (i.m, i.n, i.k) == (512, 64, 256)  # dX = dY W^T
    assert (w.m, w.n, w.k, w.out_bytes) == (64, 256, 512, 8)  # dW = X^T dY into the fp32 buffer
    assert linear("fc", sh, 64, 256, "B") == (i, w)


def test_fp8_linear_casts_its_inputs():
    sh = Shape(tokens=512, seq=512, tp=1, sp=False, fp8=True)
    cast, gemm = linear("fc", sh, 64, 256, "F")
    assert cast == Elementwise("fc.cast", 4 * 512 * 64) and isinstance(gemm, Gemm) and gemm.dtype == "fp8"
    grad_cast, _ = linear("fc", sh, 64, 256, "I")
    assert grad_cast.bytes == 4 * 512 * 256
    assert len(linear("fc", sh, 64, 256, "W")) == 1  # the weight gradient reuses the transposes
