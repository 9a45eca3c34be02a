"""GPU architectures: the kernel efficiencies of each generation, from cited measurements.

The kernel model (:mod:`simtrain.costs.timing`) prices a kernel from the GPU's datasheet peaks
(:class:`~simtrain.specs.gpu.GpuSpec`) and the fractions of those peaks below. Each holds for
every model and layout; none is fitted to a run.

* ``mamf``: the Maximum Achievable Matmul FLOPS (MAMF) of Stas Bekman's *Machine Learning
  Engineering* (``stas00/ml-engineering``, ``compute/accelerator/README.md``, table "Maximum
  Achievable Matmul FLOPS comparison table"): BF16 A100 SXM 271.2 of 312 TFLOPS at
  1024x10240x5120, H100 SXM 794.5 of 989 at 2048x2048x13312 ("H200 is the same"), B200 1745 of
  2250 at 1792x16128x3072; FP8 H100 1402.6 of 1979 at 1024x9216x14336, B200 3432.5 of 4500 at
  15360x4096x3072. The math efficiency of full waves is this measurement divided by the model's
  wave utilisation and (Ampere) its exposed epilogue at that shape
  (:func:`simtrain.costs.timing.calibrated_peak`), so that the model reproduces it.
* ``sustained_clock``: the clock a GPU holds at its power limit under dense tensor-core work, as
  a fraction of the clock its datasheet peak assumes. A100: 1305 MHz of the 1410 MHz boost behind
  312 TFLOPS (NVIDIA computes its A100 systems' HPL Rpeak at the clock sustained at the power limit,
  1305 MHz; G. Lockwood, "Peak FLOPS", glennklockwood.com/garden/peak-FLOPS); a training step keeps
  every GPU of a node at that limit for hours, a matmul benchmark for seconds. H100 and B200: 1,
  their datasheet peaks already assume a sustained clock (989 TFLOPS at 1830 MHz, below the H100's
  1980 MHz boost; same page).
* ``epilogue_overlap``: whether a tile's store of C overlaps the next tile's main loop. Ampere's
  cuBLAS kernels run one 256x128 tile per SM and store C after the main loop (NVIDIA, *Matrix
  Multiplication Background User's Guide*, section 2.3); Hopper's and Blackwell's persistent
  warp-specialised kernels overlap the epilogue with the next tile (CUTLASS
  ``media/docs/efficient_gemm.md``, "warp-specialized persistent ping-pong"). Where it does not
  overlap, the store of C at HBM bandwidth adds to the math: the smaller K, the larger its share.
* ``tiles``: the output tiles cuBLAS chooses from for large GEMMs (NVIDIA's guide, section 2.3:
  256x128 and 128x256 are the most efficient, 128x128 next); the tile with the least padded work
  over whole waves of the SM count is taken (tile and wave quantisation, sections 3.1-3.2).
* ``attention_forward`` / ``attention_backward``: the fraction of peak a fused attention kernel
  reaches on long sequences, and ``attention_half_seq``: the key length at which it reaches half
  of that (the efficiency rises as ``skv / (skv + half)``). Ampere: FlashAttention-2 (Dao 2023,
  arXiv:2307.08691, section 4.1: "up to 73% of the theoretical maximum FLOPs/s" forward and "up
  to 63%" backward on A100, causal head dimension 128, figures 4-6, where throughput at 512 keys
  is about 60% of that at 16k). Hopper: FlashAttention-3 (Shah et al. 2024, arXiv:2407.08608:
  BF16 forward "up to 740 TFLOPS (75% utilization)" on H100, backward 1.5-1.75x FlashAttention-2's
  throughput, about 55% of peak, section 4.1). Blackwell: Hopper's fractions (no peer-reviewed
  measurement yet).
* ``hbm_efficiency``: the fraction of datasheet HBM bandwidth a streaming access sustains, for a
  GEMM's or an attention kernel's operands: about 90% (STREAM-style copy and triad: 3.02-3.09
  TB/s of 3.35 on H100 SXM).
* ``elementwise_efficiency``: the fraction a framework's memory-bound kernel (norm, activation,
  softmax, dropout, loss, optimizer) sustains: 0.65. Measured PyTorch kernels on A100 reach
  about half to two thirds of the datasheet bandwidth: GELU 1,073 GB/s, softmax 913 GB/s,
  LayerNorm 930 GB/s (``intel/intel-xpu-backend-for-triton`` issue 2229, A100 reference runs);
  ``torch.nn.LayerNorm`` 715 GB/s (``ecmwf/WeatherGenerator`` issue 1546); the value takes the
  upper end of that range for the larger tensors of a training step, and holds on every
  generation (the same kernels run there).
* ``launch_s``: the gap one kernel launch adds on a busy stream: about 1 us (NVIDIA Developer
  Blog, "Getting Started with CUDA Graphs", 2019: a 2.9 us kernel launched back to back from a
  stream takes 3.8 us per kernel; CUDA Graphs bring it to 3.4 us).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simtrain.errors import SpecError
from simtrain.units import US

LARGE_TILES = ((256, 128), (128, 256), (128, 128))


@dataclass(frozen=True)
class ArchProfile:
    """Kernel efficiencies of one GPU architecture (see the module docstring for each source)."""

    name: str
    mamf: dict[str, tuple[float, tuple[int, int, int]]] = field(hash=False)  # dtype -> (MAMF / peak, M, N, K)
    epilogue_overlap: bool
    attention_forward: float
    attention_backward: float
    sustained_clock: float = 1.0
    tiles: tuple[tuple[int, int], ...] = LARGE_TILES
    attention_half_seq: int = 384
    hbm_efficiency: float = 0.9
    elementwise_efficiency: float = 0.65
    launch_s: float = 1 * US


ARCHS: dict[str, ArchProfile] = {
    "ampere": ArchProfile("ampere", mamf={"bf16": (271.2 / 312, (1024, 10240, 5120))},
                          epilogue_overlap=False, attention_forward=0.73, attention_backward=0.63,
                          sustained_clock=1305 / 1410),
    "hopper": ArchProfile("hopper", mamf={"bf16": (794.5 / 989, (2048, 2048, 13312)),
                                          "fp8": (1402.6 / 1979, (1024, 9216, 14336))},
                          epilogue_overlap=True, attention_forward=0.75, attention_backward=0.55),
    "blackwell": ArchProfile("blackwell", mamf={"bf16": (1745 / 2250, (1792, 16128, 3072)),
                                                "fp8": (3432.5 / 4500, (15360, 4096, 3072))},
                             epilogue_overlap=True, attention_forward=0.75, attention_backward=0.55),
}


def get_arch(name: str) -> ArchProfile:
    """The profile of architecture ``name``."""
    try:
        return ARCHS[name]
    except KeyError:
        raise SpecError(f"gpu architecture {name!r} is not known (known: {', '.join(ARCHS)})") from None
