"""GPU specifications and presets.

Peak numbers are NVIDIA's datasheet values for dense (non-sparse) math. HBM capacities are in GiB
everywhere: the total memory ``nvidia-smi`` reports (A100-SXM4-80GB 81920 MiB, H100 SXM
81559 MiB, H200 SXM 143771 MiB, B200 183359 MiB), which is what a training job can address.
``arch`` names the architecture whose measured kernel efficiencies the cost model uses
(:mod:`simtrain.specs.arch`); ``sm_count`` is the number of streaming multiprocessors whose waves
quantise a GEMM's tiles. ``comm_sms`` is the number of SMs a communication kernel holds while it
runs beside compute: 20 of the 132 SMs of an H800 in DeepSeek-V3's training, which partitions
20 SMs into 10 communication channels (DeepSeek-V3 technical report, arXiv 2412.19437, section
3.2.2); NCCL's kernels likewise run one thread block, so one SM, per channel. Compute that shares
the GPU with them has ``sm_count - comm_sms`` SMs left, so it slows by the factor
:attr:`GpuSpec.comm_interference` (a compute-bound argument: HBM contention is not counted).
``efficiency`` is unset for the presets of real GPUs (every GEMM then
runs at the efficiency its shape gets); a number makes every GEMM and attention core run at that
flat fraction of peak, as the course notes' ``parallel_plan.py`` (0.6, the ``seed-h100`` preset)
and ``--efficiency`` do.

Power. ``tdp_w`` is the board power at full load from NVIDIA's datasheets (A100 SXM4 400 W,
H100 SXM5 and H800 SXM 700 W, H200 SXM 700 W, HGX B200 1000 W per GPU): a GPU that computes runs
at it, the convention of Llama 2's carbon accounting (Touvron et al. 2023, section 2.2.1: "peak
power capacity per GPU device"). ``idle_w`` is what a GPU draws while it holds a training job's
memory but runs no kernel: it stays in performance state P0 at full clocks, well above a cold
idle. Measured with ``nvidia-smi`` at P0, 0% utilisation and the memory held: H100 80GB HBM3
140-145 W of 700 (wilicc/gpu-burn issue 114), B200 192-196 W of 1000 (NVIDIA/TensorRT-LLM
issue 10278); both are 20% of the board power, so :data:`IDLE_FRACTION` of ``tdp_w`` stands in
where no measurement is cited (A100) and is the default of a GPU table that gives ``tdp_w``
alone. H800 and H200 carry the H100's figure (the same GH100 die and board power).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import cast

from simtrain.errors import SpecError, unknown_name
from simtrain.specs.arch import ARCHS, get_arch
from simtrain.specs.strict import Table
from simtrain.units import GB, MiB, TFLOPS, GiB

#: A GPU's draw at P0 with no kernel running, as a fraction of its board power: 140 of 700 W
#: (H100, wilicc/gpu-burn issue 114) and 192 of 1000 W (B200, NVIDIA/TensorRT-LLM issue 10278).
IDLE_FRACTION = 0.2


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model: peak math, memory and NVLink, its architecture and SM count.

    >>> gpu = get_gpu("h100-sxm")
    >>> round(gpu.effective_flops / TFLOPS, 1), round(gpu.usable_memory_bytes / GiB, 2)
    (651.5, 79.65)
    """

    name: str
    peak_bf16_flops: float  # dense BF16 tensor-core peak, FLOP/s
    peak_fp8_flops: float | None  # dense FP8 peak, FLOP/s; None where the GPU has no FP8
    hbm_bytes: float  # HBM capacity, bytes
    hbm_bandwidth_Bps: float  # HBM bandwidth, bytes/s
    nvlink_Bps: float  # NVLink bandwidth per GPU and direction, bytes/s
    arch: str = "hopper"  # architecture: its kernel efficiencies (simtrain.specs.arch)
    sm_count: int = 132  # streaming multiprocessors
    comm_sms: int = 20  # SMs a communication kernel holds beside compute (DeepSeek-V3, 3.2.2)
    efficiency: float | None = None  # flat fraction of peak for every GEMM; None = by shape
    memory_reserved_fraction: float = 0.0  # capacity kept back for fragmentation and buffers
    tdp_w: float | None = None  # board power at full load, W (datasheet); None: unknown
    idle_w: float | None = None  # draw at P0 with no kernel running, W; None: IDLE_FRACTION x tdp_w

    def __post_init__(self) -> None:
        for field in ("peak_bf16_flops", "hbm_bytes", "hbm_bandwidth_Bps", "nvlink_Bps", "sm_count"):
            if not getattr(self, field) > 0:
                raise SpecError(f"gpu {self.name}: {field} = {getattr(self, field)!r}: must be > 0")
        get_arch(self.arch)
        if not 0 <= self.comm_sms < self.sm_count:
            raise SpecError(f"gpu {self.name}: comm_sms = {self.comm_sms!r}: must be in [0, sm_count)")
        if self.efficiency is not None and not 0 < self.efficiency <= 1:
            raise SpecError(f"gpu {self.name}: efficiency = {self.efficiency!r}: must be in (0, 1]")
        if not 0 <= self.memory_reserved_fraction < 1:
            raise SpecError(f"gpu {self.name}: memory_reserved_fraction = "
                            f"{self.memory_reserved_fraction!r}: must be in [0, 1)")
        if self.tdp_w is not None and not 0 < self.tdp_w < float("inf"):
            raise SpecError(f"gpu {self.name}: tdp_w = {self.tdp_w!r}: must be a finite number > 0")
        if self.idle_w is not None and not (self.tdp_w is not None and 0 <= self.idle_w <= self.tdp_w):
            raise SpecError(f"gpu {self.name}: idle_w = {self.idle_w!r}: must be in [0, tdp_w = {self.tdp_w!r}]")

    @property
    def idle_power_w(self) -> float | None:
        """Draw with no kernel running: ``idle_w``, or :data:`IDLE_FRACTION` of ``tdp_w``."""
        if self.tdp_w is None:
            return None
        return self.idle_w if self.idle_w is not None else IDLE_FRACTION * self.tdp_w

    @property
    def usable_memory_bytes(self) -> float:
        """Capacity available to the training job."""
        return self.hbm_bytes * (1 - self.memory_reserved_fraction)

    @property
    def comm_interference(self) -> float:
        """How much longer compute takes while communication runs beside it: the SMs it loses,
        ``comm_sms / (sm_count - comm_sms)`` (0.179 on an H100).

        >>> round(get_gpu("h100-sxm").comm_interference, 3)
        0.179
        """
        return self.comm_sms / (self.sm_count - self.comm_sms)

    @property
    def effective_flops(self) -> float:
        """Sustained BF16 FLOP/s of a large GEMM: the flat efficiency, or the architecture's
        measured best at the clock it sustains in a training step (the closed-form model's
        ``P e``)."""
        if self.efficiency is not None:
            return self.peak_bf16_flops * self.efficiency
        arch = get_arch(self.arch)
        return self.peak_bf16_flops * arch.mamf["bf16"][0] * arch.sustained_clock

    def with_efficiency(self, efficiency: float) -> "GpuSpec":
        return replace(self, efficiency=efficiency)


GPU_PRESETS: dict[str, GpuSpec] = {
    # A100 SXM4 80GB datasheet: 312 TFLOPS BF16, 2,039 GB/s, NVLink 3 600 GB/s (both directions);
    # 108 SMs (NVIDIA A100 Tensor Core GPU Architecture whitepaper).
    # Power: 400 W max TDP (A100 datasheet); idle IDLE_FRACTION of it (no measurement cited).
    "a100-80g": GpuSpec("a100-80g", 312 * TFLOPS, None, 81920 * MiB, 2039 * GB, 300 * GB,
                        arch="ampere", sm_count=108, tdp_w=400.0),
    # H100 SXM5 datasheet: 989 TFLOPS BF16, 1,979 FP8, 3.35 TB/s, NVLink 4 900 GB/s; 132 SMs.
    # Power: up to 700 W (datasheet); 140 W at P0 with no kernel (wilicc/gpu-burn issue 114).
    "h100-sxm": GpuSpec("h100-sxm", 989.4 * TFLOPS, 1978.9 * TFLOPS, 81559 * MiB, 3350 * GB, 450 * GB,
                        tdp_w=700.0, idle_w=140.0),
    # H800 SXM: H100 compute with NVLink cut to 400 GB/s (DeepSeek-V3 report, section 3.1).
    "h800": GpuSpec("h800", 989.4 * TFLOPS, 1978.9 * TFLOPS, 81559 * MiB, 3350 * GB, 200 * GB,
                    tdp_w=700.0, idle_w=140.0),
    # H200 SXM datasheet: H100 compute, 141 GB HBM3e at 4.8 TB/s, up to 700 W.
    "h200": GpuSpec("h200", 989.4 * TFLOPS, 1978.9 * TFLOPS, 143771 * MiB, 4800 * GB, 450 * GB,
                    tdp_w=700.0, idle_w=140.0),
    # HGX B200 datasheet (per GPU): 2.25 PFLOPS BF16, 4.5 PFLOPS FP8 dense, 180 GB at 8 TB/s,
    # NVLink 5 1.8 TB/s; 148 SMs; max TDP up to 1000 W; 192 W at P0 with no kernel
    # (NVIDIA/TensorRT-LLM issue 10278).
    "b200": GpuSpec("b200", 2250 * TFLOPS, 4500 * TFLOPS, 183359 * MiB, 8000 * GB, 900 * GB,
                    arch="blackwell", sm_count=148, tdp_w=1000.0, idle_w=192.0),
    # The course notes' parallel_plan.py constants: PEAK 989e12, EFF 0.6, 80e9 bytes with 10%
    # reserved, NVLINK 450e9 (their MEM is 80e9 bytes, not a datasheet capacity); the H100's power.
    "seed-h100": GpuSpec("seed-h100", 989 * TFLOPS, None, 80 * GB, 3350 * GB, 450 * GB,
                         efficiency=0.6, memory_reserved_fraction=0.1, tdp_w=700.0, idle_w=140.0),
}


def get_gpu(name: str) -> GpuSpec:
    """A GPU preset by name."""
    try:
        return GPU_PRESETS[name]
    except KeyError:
        raise unknown_name("gpu", name, GPU_PRESETS) from None


def gpu_from_table(table: Table) -> GpuSpec:
    """A GPU from a TOML table; ``base`` names a preset whose fields the table overrides.

    Keys (units in the names): base, name, arch, sm_count, comm_sms, peak_bf16_tflops, peak_fp8_tflops,
    hbm_gib, hbm_bandwidth_GBps, nvlink_GBps, efficiency, memory_reserved_fraction, tdp_w, idle_w
    (power in W; idle_w defaults to IDLE_FRACTION x tdp_w).
    """
    base_name = table.get("base", str, None)
    base = get_gpu(base_name) if base_name else None

    def num(key: str, current: float | None, scale: float) -> float:
        if table.has(key):
            value: float = table.get(key, float, positive=True) * scale
            return value
        table.get(key, float, None)
        if current is None and base is None:
            raise SpecError(f"{table.where}: missing key {key!r} (or give base = a GPU preset)")
        return cast(float, current)  # None only without a base, refused above

    spec = GpuSpec(
        name=table.get("name", str, base.name if base else "custom"),
        peak_bf16_flops=num("peak_bf16_tflops", base.peak_bf16_flops if base else None, TFLOPS),
        peak_fp8_flops=(table.get("peak_fp8_tflops", float, positive=True) * TFLOPS
                        if table.has("peak_fp8_tflops") else (base.peak_fp8_flops if base else None)),
        hbm_bytes=num("hbm_gib", base.hbm_bytes if base else None, GiB),
        hbm_bandwidth_Bps=num("hbm_bandwidth_GBps", base.hbm_bandwidth_Bps if base else None, GB),
        nvlink_Bps=num("nvlink_GBps", base.nvlink_Bps if base else None, GB),
        arch=table.get("arch", str, base.arch if base else "hopper", choices=tuple(ARCHS)),
        sm_count=table.get("sm_count", int, base.sm_count if base else 132, positive=True),
        comm_sms=table.get("comm_sms", int, base.comm_sms if base else 20),
        efficiency=table.get("efficiency", float, base.efficiency if base else None),
        memory_reserved_fraction=table.get("memory_reserved_fraction", float,
                                           base.memory_reserved_fraction if base else 0.0),
        tdp_w=table.get("tdp_w", float, base.tdp_w if base else None, positive=True),
        idle_w=table.get("idle_w", float, None if table.has("tdp_w") or not base else base.idle_w, min_value=0.0),
    )
    table.done()
    return spec
