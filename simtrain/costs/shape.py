"""The slice of work one rank does for one micro-batch, and the linear-layer kernels over it.

A linear layer ``Y[m, n] = X[m, k] W[k, n]`` over the rank's ``m`` tokens runs one GEMM per pass
(Megatron-LM's ``megatron/core/tensor_parallel/layers.py``): forward ``X W``; input gradient (pass
I) ``dX = dY W^T``, an ``m x k x n`` GEMM; weight gradient (pass W) ``dW = X^T dY``, a
``k x n x m`` GEMM accumulated into the gradient buffer (``gradient_accumulation_fusion``: the
fp32 buffer read and written, 8 bytes per weight, or 4 with bf16 gradients). With FP8
(TransformerEngine, ``transformer_engine/pytorch/module/linear.py``) the GEMMs take FP8
operands; the forward casts X to FP8 and keeps its transpose for the weight gradient, the
backward does the same with dY: read 2 bytes, write 1 + 1 per element, the per-tensor amax fused
into the cast. Weights are cast once per step (cached across micro-batches), not counted here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simtrain.costs.kernels import Elementwise, Gemm, Kernel
from simtrain.specs.parallel import ParallelSpec
from simtrain.units import BYTES_BF16, BYTES_FP32

ACT_BYTES = BYTES_BF16  # bf16 activations
GRAD_BYTES = {"fp32": BYTES_FP32, "bf16": BYTES_BF16}  # bytes per gradient element by --grad-dtype
FP8_CAST_BYTES = 4  # per element cast to FP8 with its transpose: read 2, write 1 + 1
#: Streams a grouped GEMM of experts runs its per-expert GEMMs on (TransformerEngine's
#: ``GroupedLinear``: one cuBLAS GEMM per expert over ``num_streams = 4`` compute streams,
#: ``transformer_engine/common/include/transformer_engine/multi_streams.h``).
GROUPED_GEMM_STREAMS = 4


@dataclass(frozen=True)
class Shape:
    """The slice of work one rank does for one micro-batch, and how it runs."""

    tokens: int  # tokens per micro-batch on this rank: mbs * seq / cp
    seq: int  # full sequence length (keys a causal query attends to: about seq / 2)
    tp: int  # tensor-parallel degree dividing weights and heads
    sp: bool  # sequence parallelism (activations outside the GEMMs split over tp)
    mbs: int = 1  # sequences per micro-batch
    attention: str = "flash"  # flash (fused kernel) or eager (scores, softmax, dropout, context)
    rope_fusion: bool = True  # rotary embedding in one fused kernel, or as PyTorch ops
    fp8: bool = False  # linear-layer GEMMs in FP8
    grad_bytes: int = BYTES_FP32  # bytes per gradient element (fp32 or bf16 accumulation)

    @classmethod
    def of(cls, par: ParallelSpec) -> "Shape":
        return cls(tokens=par.mbs * par.seq // par.cp, seq=par.seq, tp=par.tp, sp=par.sequence_parallel,
                   mbs=par.mbs, attention=par.attention, rope_fusion=par.rope_fusion, fp8=par.fp8,
                   grad_bytes=GRAD_BYTES[par.grad_dtype])

    @property
    def local_seq(self) -> int:
        """Query tokens of one sequence on this rank (seq / cp)."""
        return self.tokens // self.mbs

    @property
    def sp_rows(self) -> int:
        """:attr:`sp_tokens` as the rows of a GEMM over them (at least one)."""
        return max(1, math.ceil(self.sp_tokens))

    @property
    def sp_tokens(self) -> float:
        """Tokens whose full-width activations this rank holds outside the GEMMs: tokens / tp
        with sequence parallelism, all of them without."""
        return self.tokens / self.tp if self.sp else self.tokens

    @property
    def gemm_dtype(self) -> str:
        return "fp8" if self.fp8 else "bf16"


def linear(name: str, shape: Shape, k_in: int, n_out: int, kind: str, tokens: int | None = None,
           batch: int = 1) -> tuple[Kernel, ...]:
    """The kernels of one linear layer in pass ``kind`` (F, I, W, or B = I + W) over ``tokens``
    (default: the shape's), ``batch`` copies side by side (a grouped GEMM of experts)."""
    m = shape.tokens if tokens is None else tokens
    dtype = shape.gemm_dtype
    streams = GROUPED_GEMM_STREAMS if batch > 1 else 0
    if kind == "F":
        cast = (Elementwise(f"{name}.cast", FP8_CAST_BYTES * m * k_in * batch),) if shape.fp8 else ()
        return cast + (Gemm(name, m, n_out, k_in, batch=batch, dtype=dtype, streams=streams),)
    if kind == "I":
        cast = (Elementwise(f"{name}.grad_cast", FP8_CAST_BYTES * m * n_out * batch),) if shape.fp8 else ()
        return cast + (Gemm(f"{name}.dgrad", m, k_in, n_out, batch=batch, dtype=dtype, streams=streams),)
    if kind == "W":
        return (Gemm(f"{name}.wgrad", k_in, n_out, m, batch=batch, dtype=dtype, out_bytes=2 * shape.grad_bytes,
                     streams=streams),)
    if kind == "B":
        return linear(name, shape, k_in, n_out, "I", tokens, batch) + linear(name, shape, k_in, n_out, "W", tokens, batch)
    raise ValueError(kind)
