"""The kernels an operation runs: GEMMs, attention cores and memory-bound elementwise kernels.

An :class:`OpCost` is the list of kernels one operation of the program (an attention block, an MLP
block, the LM head, the optimizer step) launches on one rank for one micro-batch and pass. Its
FLOPs (multiply-add = 2) and HBM bytes are the sums over its kernels; its time is the sum of the
kernels' times (:class:`simtrain.costs.timing.KernelTimer`): kernels on one stream run one after
another, so a memory-bound kernel adds its time instead of hiding under a GEMM.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Union

from simtrain.units import BYTES_BF16

#: Bytes per operand element of a GEMM by its input precision.
OPERAND_BYTES = {"bf16": BYTES_BF16, "fp8": 1}
DTYPES = tuple(OPERAND_BYTES)


@dataclass(frozen=True)
class Gemm:
    """``batch`` independent products C[m, n] = A[m, k] B[k, n] (a batched or grouped GEMM).

    ``out_bytes`` is the HBM traffic per output element: 2 for a bf16 output, 8 for a weight
    gradient accumulated into an fp32 buffer (read and written back, Megatron-LM's
    ``gradient_accumulation_fusion``).
    """

    name: str  # what it computes: qkv, proj, fc1, fc2, logits, scores, context, expert, ...
    m: int
    n: int
    k: int
    batch: int = 1
    dtype: str = "bf16"  # operand precision: bf16 or fp8
    out_bytes: int = BYTES_BF16
    streams: int = 0  # 0: one batched kernel; n: ``batch`` separate GEMMs, n at a time on n streams

    kind = "gemm"

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch

    @property
    def bytes(self) -> float:
        """Each operand read once and the output written once (the least traffic a GEMM has)."""
        operand = OPERAND_BYTES[self.dtype]
        return self.batch * ((self.m * self.k + self.k * self.n) * operand + self.m * self.n * self.out_bytes)


@dataclass(frozen=True)
class Attention:
    """A fused (flash) attention kernel over ``batch`` = sequences x heads on this rank.

    Forward: the two products S = Q K^T and O = P V, ``2 sq skv (d_qk + d_v)`` FLOPs per head,
    half of that under a causal mask. Backward: five products (S recomputed, dV = P^T dO,
    dP = dO V^T, dQ = dS K, dK = dS^T Q), ``2 sq skv (3 d_qk + 2 d_v)``: 2.5 times the forward
    when ``d_qk = d_v`` (Dao 2023, FlashAttention-2, section 3.1 and algorithm 2).
    """

    name: str
    batch: int  # sequences x attention heads on this rank
    sq: int  # query tokens per sequence
    skv: int  # key/value tokens per sequence
    d_qk: int  # query/key features per head
    d_v: int  # value features per head
    causal: bool
    backward: bool

    kind = "attention"

    @property
    def flops(self) -> float:
        width = 3 * self.d_qk + 2 * self.d_v if self.backward else self.d_qk + self.d_v
        return 2.0 * self.batch * self.sq * self.skv * width * (0.5 if self.causal else 1.0)

    @property
    def bytes(self) -> float:
        """Q, K, V and O once (forward); backward also reads dO and writes dQ, dK, dV (bf16)."""
        q, o = self.sq * self.d_qk, self.sq * self.d_v
        kv = self.skv * (self.d_qk + self.d_v)
        per_head = q + kv + o if not self.backward else 2 * (q + kv) + 2 * o
        return float(BYTES_BF16 * self.batch * per_head)


@dataclass(frozen=True)
class Elementwise:
    """A memory-bound kernel (norm, activation, rotary, residual add, dropout, softmax, loss,
    cast, optimizer): its time is its HBM traffic at the achievable bandwidth plus ``launches``
    kernel launches."""

    name: str
    nbytes: float  # HBM bytes read and written
    launches: int = 1

    kind = "elementwise"

    @property
    def flops(self) -> float:
        return 0.0

    @property
    def bytes(self) -> float:
        return self.nbytes


Kernel = Union[Gemm, Attention, Elementwise]


@dataclass(frozen=True)
class OpCost:
    """The kernels of one operation on one rank, in launch order."""

    kernels: tuple[Kernel, ...] = ()

    @cached_property
    def flops(self) -> float:
        """Floating-point operations (hardware FLOPs: recomputed work included)."""
        return sum(k.flops for k in self.kernels)

    @cached_property
    def bytes(self) -> float:
        """HBM bytes read and written."""
        return sum(k.bytes for k in self.kernels)

    @cached_property
    def _hash(self) -> int:
        return hash(self.kernels)

    def __hash__(self) -> int:  # computed once: costs key the timing caches
        return self._hash

    def __add__(self, other: "OpCost") -> "OpCost":
        return OpCost(self.kernels + other.kernels)

    def of_kind(self, kind: str) -> "OpCost":
        """The kernels of one kind (gemm, attention or elementwise)."""
        return OpCost(tuple(k for k in self.kernels if k.kind == kind))


def cost(*kernels: Kernel | None) -> OpCost:
    """An :class:`OpCost` of the given kernels; ``None`` entries (absent kernels) are dropped."""
    return OpCost(tuple(k for k in kernels if k is not None))


ZERO = OpCost()
