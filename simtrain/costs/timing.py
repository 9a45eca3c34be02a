"""Kernel times: a model from each architecture's efficiencies (:mod:`simtrain.specs.arch`), or a
measured calibration.

* GEMM: ``max(math + exposed epilogue, operand traffic) + launch``. The math runs ``2 m n k``
  FLOPs at ``peak x efficiency x wave utilisation x k / (k + tile overhead)`` (tile and wave
  quantisation on the SM count, :func:`wave_utilisation`, so small M and N lose whole waves; each
  output tile's fixed time outside its main loop, :func:`k_utilisation`, so short K loses a
  share); a grouped GEMM of experts runs its per-expert GEMMs a few at a time on separate
  streams (TransformerEngine's), so the waves quantise per round, and a round takes at least the
  host's time to issue its GEMMs; where the architecture stores C
  after the main loop the store adds ``m n out_bytes`` at the achievable HBM bandwidth, so the
  efficiency rises with K; the operands stream once at that bandwidth (roofline). FP8 GEMMs use
  the FP8 peak and its measured efficiency.
* Fused attention: its FLOPs at ``peak x fraction x skv / (skv + half)`` (longer keys, higher
  efficiency), or its Q/K/V/O traffic if that takes longer, plus the launches (two for the
  backward: the ``dO . O`` preprocessing kernel and the main kernel).
* Elementwise: bytes at the bandwidth a framework's memory-bound kernel sustains plus the launches.

Tensor-core work runs at the clock the GPU sustains at its power limit
(:attr:`~simtrain.specs.arch.ArchProfile.sustained_clock`).

A GPU with a flat ``efficiency`` (the course notes' constant, or ``--efficiency``) runs every GEMM
and attention core at that fraction of peak, shape ignored (a grouped GEMM as one kernel).

With a calibration (:class:`~simtrain.costs.calibration.Calibration`, ``--calibration``) a
measured kernel takes its measured time and a kernel between measured shapes the model's time
scaled by the interpolated measured/model ratio; every other kernel falls back to the model.
:attr:`KernelTimer.counts` tallies the distinct kernels priced each way.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

from simtrain.costs.calibration import Calibration
from simtrain.costs.kernels import Attention, Elementwise, Gemm, Kernel, OpCost
from simtrain.errors import SpecError
from simtrain.specs.arch import ArchProfile, get_arch
from simtrain.specs.gpu import GpuSpec


def wave_utilisation(m: int, n: int, batch: int, sms: int, tiles: tuple[tuple[int, int], ...]) -> float:
    """The useful fraction of the tile slots a GEMM's waves occupy, for the best of ``tiles``:
    ``m n batch / (waves sms tm tn)`` with ``waves = ceil(ceil(m/tm) ceil(n/tn) batch / sms)``
    (tile and wave quantisation, NVIDIA's *Matrix Multiplication Background*, section 3)."""
    best = 0.0
    for tm, tn in tiles:
        count = math.ceil(m / tm) * math.ceil(n / tn) * batch
        waves = math.ceil(count / sms)
        best = max(best, m * n * batch / (waves * sms * tm * tn))
    return best


def calibrated_peak(arch: ArchProfile, dtype: str, sms: int, peak_flops: float, hbm_Bps: float) -> float:
    """The math efficiency of full waves that reproduces the MAMF measurement at its best shape:
    measured time minus the exposed epilogue (C stored at the achievable bandwidth, where it does
    not overlap), over the ideal time of the shape's padded waves."""
    try:
        fraction, (m, n, k) = arch.mamf[dtype]
    except KeyError:
        raise SpecError(f"no {dtype} GEMM measurement for {arch.name} GPUs") from None
    flops = 2.0 * m * n * k
    measured = flops / (fraction * peak_flops)
    epilogue = 0.0 if arch.epilogue_overlap else m * n * 2 / (hbm_Bps * arch.hbm_efficiency)
    return min(1.0, flops / ((measured - epilogue) * peak_flops) / wave_utilisation(m, n, 1, sms, arch.tiles)
               / k_utilisation(k, tile_overhead(arch, dtype)))


#: FP8 tensor-core rate over BF16 per clock: 2 on Hopper and Blackwell (datasheets: 1,979 vs
#: 989 TFLOPS dense on H100 SXM, 4,500 vs 2,250 on HGX B200).
FP8_RATE = 2.0


def tile_overhead(arch: ArchProfile, dtype: str) -> float:
    """K elements of main loop an output tile's fixed time is worth in ``dtype``: the
    architecture's bf16 figure, times :data:`FP8_RATE` in FP8 (the time is fixed; a faster main
    loop covers more K in it)."""
    return arch.tile_k_overhead * (FP8_RATE if dtype == "fp8" else 1.0)


def k_utilisation(k: int, overhead: float) -> float:
    """The share of an output tile's time spent in its main loop over ``k``: ``k / (k + overhead)``."""
    return k / (k + overhead)


#: How a kernel's time was found: measured exactly, interpolated between measurements, or the
#: model (a calibration without data for it, or none).
SOURCES = ("measured", "interpolated", "model")


class KernelTimer:
    """Times kernels on one GPU; one per lowering (its counts belong to that run)."""

    def __init__(self, gpu: GpuSpec, calibration: Calibration | None = None):
        self.gpu = gpu
        self.arch: ArchProfile = get_arch(gpu.arch)
        self.calibration = calibration
        self.counts: Counter[str] = Counter()  # SOURCES -> distinct kernels priced that way
        self._memo: dict[Kernel, float] = {}
        self._hbm = gpu.hbm_bandwidth_Bps * self.arch.hbm_efficiency
        self._gemm_eff: dict[str, float] = {}

    def time(self, cost: OpCost) -> float:
        """Seconds the kernels of ``cost`` take, one after another."""
        return sum(self.kernel_time(k) for k in cost.kernels)

    def kernel_time(self, kernel: Kernel) -> float:
        """Seconds one kernel takes (memoised)."""
        t = self._memo.get(kernel)
        if t is None:
            t, source = self._price(kernel)
            self._memo[kernel] = t
            self.counts[source] += 1
        return t

    def model_time(self, kernel: Kernel) -> float:
        """The model's time of ``kernel``, calibration ignored."""
        if isinstance(kernel, Gemm):
            return self._gemm(kernel)
        if isinstance(kernel, Attention):
            return self._attention(kernel)
        return self._elementwise(kernel)

    def _price(self, kernel: Kernel) -> tuple[float, str]:
        model = self.model_time(kernel)
        if self.calibration is None:
            return model, "model"
        found = self.calibration.lookup(kernel, self.model_time)
        if found is None:
            return model, "model"
        return found

    # ---- the model -------------------------------------------------------------------------
    def _datasheet_peak(self, dtype: str) -> float:
        if dtype != "fp8":
            return self.gpu.peak_bf16_flops
        if self.gpu.peak_fp8_flops is None:
            raise SpecError(f"gpu {self.gpu.name} has no FP8 tensor cores")
        return self.gpu.peak_fp8_flops

    def _peak(self, dtype: str) -> float:
        """Tensor-core FLOP/s of ``dtype`` at the clock the GPU sustains (the datasheet's with a
        flat efficiency, which stands for everything)."""
        peak = self._datasheet_peak(dtype)
        return peak if self.gpu.efficiency is not None else peak * self.arch.sustained_clock

    def gemm_efficiency(self, g: Gemm) -> float:
        """Fraction of peak the GEMM's math reaches: the flat efficiency, or the architecture's
        full-wave efficiency times the wave utilisation of its shape."""
        if self.gpu.efficiency is not None:
            return self.gpu.efficiency
        full = self._gemm_eff.get(g.dtype)
        if full is None:
            full = self._gemm_eff[g.dtype] = calibrated_peak(self.arch, g.dtype, self.gpu.sm_count,
                                                             self._datasheet_peak(g.dtype), self.gpu.hbm_bandwidth_Bps)
        return (full * wave_utilisation(g.m, g.n, g.batch, self.gpu.sm_count, self.arch.tiles)
                * k_utilisation(g.k, tile_overhead(self.arch, g.dtype)))

    def _gemm(self, g: Gemm) -> float:
        if g.streams and self.gpu.efficiency is None:  # rounds of ``streams`` concurrent GEMMs, then the rest
            rounds, rest = divmod(g.batch, g.streams)
            t = rounds * self._expert_round(replace(g, batch=g.streams, streams=0))
            return t + (self._expert_round(replace(g, batch=rest, streams=0)) if rest else 0.0)
        math_s = g.flops / (self._peak(g.dtype) * self.gemm_efficiency(g))
        if self.gpu.efficiency is None and not self.arch.epilogue_overlap:
            math_s += g.batch * g.m * g.n * g.out_bytes / self._hbm
        return max(math_s, g.bytes / self._hbm) + self.arch.launch_s

    def _expert_round(self, g: Gemm) -> float:
        """``g.batch`` expert GEMMs side by side on their streams: the GPU's time, or the host's
        time to issue them one by one where that is longer (the host knows each expert's rows
        only after the dispatcher's device-to-host copy, so it cannot run ahead of them)."""
        return max(self._gemm(g), g.batch * self.arch.expert_gemm_host_s)

    def attention_efficiency(self, a: Attention) -> float:
        """Fraction of peak a fused attention kernel reaches (flat, or rising with the keys)."""
        if self.gpu.efficiency is not None:
            return self.gpu.efficiency
        top = self.arch.attention_backward if a.backward else self.arch.attention_forward
        return top * a.skv / (a.skv + self.arch.attention_half_seq)

    def _attention(self, a: Attention) -> float:
        math_s = a.flops / (self._peak("bf16") * self.attention_efficiency(a))
        return max(math_s, a.bytes / self._hbm) + self.arch.launch_s * (2 if a.backward else 1)

    def _elementwise(self, e: Elementwise) -> float:
        bandwidth = self.gpu.hbm_bandwidth_Bps * self.arch.elementwise_efficiency
        return e.nbytes / bandwidth + self.arch.launch_s * e.launches
