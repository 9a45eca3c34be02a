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
  every GPU of a node at that limit for hours, a matmul benchmark for seconds. Hopper: 1500 of the
  1830 MHz behind 989 TFLOPS (same page): GH100 boards at their 700 W limit cannot hold 1830 MHz
  under full tensor-core load and hold 1500 MHz (``tile-ai/TileOPs`` issue 1587, H200 SXM
  runners at 700 W: "1500 MHz is a more realistic sustained locked-clock target"; the H100 SXM
  is the same die at the same board power). Blackwell: 1 (no measurement yet).
* ``epilogue_overlap``: whether a tile's store of C overlaps the next tile's main loop. Ampere's
  cuBLAS kernels run one 256x128 tile per SM and store C after the main loop (NVIDIA, *Matrix
  Multiplication Background User's Guide*, section 2.3). Hopper's large tiles (256x128, 128x256)
  are those of the warp-specialised persistent *cooperative* kernels, whose two consumer warp
  groups share one output tile and run its epilogue after its main loop; only the *ping-pong*
  kernels, one smaller tile per warp group, hide one group's epilogue under the other's math
  (CUTLASS ``media/docs/efficient_gemm.md``; PyTorch blog, "Deep Dive on CUTLASS Ping-Pong GEMM
  Kernel", 2024). Blackwell's accumulators live in tensor memory, read by separate epilogue
  warps while the tensor cores start the next tile (CUTLASS's SM100 kernels). Where it does not
  overlap, the store of C at HBM bandwidth adds to the math: the smaller K, the larger its share,
  and a weight gradient accumulated into fp32 (8 bytes read and written per element) pays most.
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
  measurement yet). Checked against cuDNN 9.19 on an H200 (NVIDIA ``cudnn-frontend``'s training
  benchmark, ``tests/validation/cudnn_attention_h200.csv``): at the sustained clock below the
  model takes 0.94-1.11 times the measured time of DeepSeek-V3's 192/128-wide core and 0.95-1.40
  times that of Llama 3.1's 128-wide heads, whose ten-iteration runs hold a boost clock of up to
  1980 MHz (1.32 times the sustained one).
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
* ``tile_k_overhead``: the time each output tile of a GEMM spends outside its main loop and its
  stored epilogue (filling the operand pipeline, the tile scheduler), counted in the K elements
  its main loop covers in that time, so that a GEMM's math over ``k`` reaches
  ``k / (k + tile_k_overhead)`` of its full-wave rate. A GEMM with a short K (a weight
  gradient's K is the tokens of a micro-batch; a row-parallel projection's K is ``h / tp``)
  loses most; at the MAMF shape's K (13,312 on Hopper) :func:`~simtrain.costs.timing.calibrated_peak`
  divides it out, so that the model still reproduces the MAMF measurement there. The time is
  fixed, so an FP8 main loop, twice as fast, covers twice the K in it. No published measurement
  gives it: it is fitted per architecture by ``tests/validation/fit_arch.py`` on the published
  runs whose step is almost all GEMM time. Hopper, on the dense NeMo runs of
  ``tests/validation/published_h100.json``: mean |error| 3.6% at 0, 2.7% at 128, 2.0% at 256,
  1.8% at 384, 2.3% at 512 (2.8%, 2.4%, 2.15%, 2.9% and 3.7% before a rank's chunks were
  gathered in the order it first runs them,
  :meth:`~simtrain.workload.data_parallel.ParamLayout.gather_order`). Ampere, on both A100
  papers (mean of the two papers' mean |error|): 3.4% at 0, 3.05% at 128, 3.4% at 256, 4.1% at
  384. Blackwell takes Hopper's value (no Blackwell run is validated; ``docs/validation.md``,
  "Blackwell is not validated", finds GB200 steps a third too fast).
* ``expert_gemm_host_s``: the host's time to issue one expert's GEMM of a grouped GEMM (with
  its share of the expert path's other launches). Megatron-LM's token dispatchers copy the
  tokens per expert to the host (``tensor.cpu()``, ``NVIDIA/Megatron-LM`` issue 1598; "the
  AlltoAll dispatcher and GroupedGEMM rely on CPU-resident tensors for token-expert
  assignments", pull request 3496) and TransformerEngine's ``GroupedLinear`` issues one GEMM per
  expert from that host list, so the GPU cannot run ahead of the host there: a round of expert
  GEMMs takes at least their issue time. It matters where many local experts get few tokens each
  (EP 8 over 128 experts at TP 4). No published measurement gives it: it is fitted by
  ``tests/validation/fit_arch.py`` on the MoE runs of ``tests/validation/published_h100.json``
  (the Megatron-Core set's mean |error| 12.9% at 0, 12.5% at 20 us, 9.5% at 40, 7.4% at 50,
  5.1% at 60, 2.9% at 70, 4.1% at 80, with Hopper's tile time at 384; the NeMo DeepSeek-V3 run,
  four experts per GPU with 4,096 rows each, does not move)
  and, a property of the host and the framework rather than of the GPU, holds for every
  architecture (no MoE run of the others is published here).
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
    tile_k_overhead: int = 0  # K elements of main-loop time an output tile spends outside the loop
    expert_gemm_host_s: float = 70 * US  # host time to issue one expert's GEMM of a grouped GEMM, s


ARCHS: dict[str, ArchProfile] = {
    "ampere": ArchProfile("ampere", mamf={"bf16": (271.2 / 312, (1024, 10240, 5120))},
                          epilogue_overlap=False, attention_forward=0.73, attention_backward=0.63,
                          sustained_clock=1305 / 1410, tile_k_overhead=128),
    "hopper": ArchProfile("hopper", mamf={"bf16": (794.5 / 989, (2048, 2048, 13312)),
                                          "fp8": (1402.6 / 1979, (1024, 9216, 14336))},
                          epilogue_overlap=False, attention_forward=0.75, attention_backward=0.55,
                          sustained_clock=1500 / 1830, tile_k_overhead=384),
    "blackwell": ArchProfile("blackwell", mamf={"bf16": (1745 / 2250, (1792, 16128, 3072)),
                                                "fp8": (3432.5 / 4500, (15360, 4096, 3072))},
                             epilogue_overlap=True, attention_forward=0.75, attention_backward=0.55,
                             tile_k_overhead=384),
}


def get_arch(name: str) -> ArchProfile:
    """The profile of architecture ``name``."""
    try:
        return ARCHS[name]
    except KeyError:
        raise SpecError(f"gpu architecture {name!r} is not known (known: {', '.join(ARCHS)})") from None
