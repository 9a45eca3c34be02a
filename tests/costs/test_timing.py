"""Kernel times: shape matters (tile and wave quantisation, K), memory-bound kernels add time, the
flat efficiency, FP8, the sustained clock, and the MAMF measurement reproduced."""

from __future__ import annotations

import pytest

from simtrain.costs import KernelTimer, Shape, attention_cost, mlp_cost
from simtrain.costs.kernels import Attention, Elementwise, Gemm, OpCost
from simtrain.costs.timing import calibrated_peak, k_utilisation, tile_overhead, wave_utilisation
from simtrain.errors import SpecError
from simtrain.specs.arch import get_arch
from simtrain.specs.gpu import get_gpu
from simtrain.specs.model import load_model
from simtrain.units import US

pytestmark = pytest.mark.quick

H100, A100 = get_gpu("h100-sxm"), get_gpu("a100-80g")


def efficiency(timer: KernelTimer, g: Gemm) -> float:
    return g.flops / timer.kernel_time(g) / timer.gpu.peak_bf16_flops


def test_tp8_on_a_small_model_loses_gemm_efficiency():
    """Llama 3 8B's QKV GEMM at TP=8 is 768 wide: 96 tiles on 132 SMs fill 73% of one wave, and
    its per-GEMM time is far more than an eighth of TP=1's."""
    m = load_model("llama3-8b")
    timer = KernelTimer(H100)

    def qkv(tp: int) -> Gemm:
        sh = Shape(tokens=4096, seq=4096, tp=tp, sp=True)
        return next(k for k in attention_cost(m, sh, "F").kernels if k.name == "attn.qkv")

    one, eight = qkv(1), qkv(8)
    assert timer.kernel_time(eight) / timer.kernel_time(one) > 1.3 / 8
    assert efficiency(timer, eight) < 0.75 * efficiency(timer, one)
    short_k = Gemm("proj", 4096, 4096, 512)  # TP=8's output projection: K = q / 8
    assert efficiency(KernelTimer(A100), short_k) < 0.85 * efficiency(KernelTimer(A100), Gemm("p", 4096, 4096, 4096))


def test_memory_bound_kernels_add_time():
    """An op's time is the sum of its kernels' times: a norm or an activation does not hide
    under the GEMM next to it, as the max() of a roofline over the whole op would."""
    timer = KernelTimer(H100)
    gemm = Gemm("fc1", 4096, 4096, 4096)
    act = Elementwise("act", 2 * 2 * 4096 * 4096.0)
    both = OpCost((gemm, act))
    assert timer.time(both) == pytest.approx(timer.kernel_time(gemm) + timer.kernel_time(act))
    roofline = max(both.flops / (H100.peak_bf16_flops * 0.8), both.bytes / H100.hbm_bandwidth_Bps)
    assert timer.time(both) > roofline
    m = load_model("llama3-8b")
    sh = Shape(tokens=8192, seq=8192, tp=1, sp=False)
    block = mlp_cost(m, sh, "F")
    elementwise = timer.time(block.of_kind("elementwise"))
    assert elementwise > 0.02 * timer.time(block)
    assert timer.time(block) == pytest.approx(timer.time(block.of_kind("gemm")) + elementwise)
    bandwidth = H100.hbm_bandwidth_Bps * get_arch("hopper").elementwise_efficiency
    assert timer.kernel_time(act) == pytest.approx(act.bytes / bandwidth + 1 * US)


def test_wave_quantisation_by_hand():
    # NVIDIA's guide: 1792 x 1792 in 256 x 128 tiles is 98 tiles, one wave on 108 SMs
    assert wave_utilisation(1792, 1792, 1, 108, ((256, 128),)) == pytest.approx(98 / 108)
    assert wave_utilisation(1792, 1792, 1, 108, ((256, 128), (128, 128))) == pytest.approx(98 / 108)
    assert wave_utilisation(4096, 768, 1, 132, ((128, 256),)) == pytest.approx(4096 * 768 / (132 * 128 * 256))


def test_the_model_reproduces_the_mamf_measurement():
    """At the MAMF shape the model gives the measured time, less the store of C where it follows
    the main loop, with the math at the clock a training step sustains (A100 1305/1410, H100
    1500/1830) and the store at HBM speed."""
    for gpu, sms in ((H100, 132), (A100, 108)):
        arch = get_arch(gpu.arch)
        assert not arch.epilogue_overlap
        fraction, (m, n, k) = arch.mamf["bf16"]
        assert 0 < calibrated_peak(arch, "bf16", sms, gpu.peak_bf16_flops, gpu.hbm_bandwidth_Bps) <= 1
        g = Gemm("mamf", m, n, k)
        measured = g.flops / (fraction * gpu.peak_bf16_flops)
        epilogue = m * n * 2 / (gpu.hbm_bandwidth_Bps * arch.hbm_efficiency)
        expected = (measured - epilogue) / arch.sustained_clock + epilogue
        assert KernelTimer(gpu).kernel_time(g) - arch.launch_s == pytest.approx(expected, rel=1e-9)
    assert get_arch("hopper").sustained_clock == pytest.approx(1500 / 1830)


def test_flat_efficiency_ignores_the_shape():
    flat = KernelTimer(H100.with_efficiency(0.5))
    for g in (Gemm("a", 4096, 768, 4096), Gemm("b", 8192, 8192, 8192)):
        assert flat.kernel_time(g) == pytest.approx(g.flops / (0.5 * H100.peak_bf16_flops) + 1 * US)
    core = Attention("c", 16, 2048, 2048, 128, 128, True, False)
    assert flat.kernel_time(core) == pytest.approx(core.flops / (0.5 * H100.peak_bf16_flops) + 1 * US)


def test_fused_attention_efficiency_rises_with_the_keys():
    timer = KernelTimer(H100)
    short = Attention("c", 64, 512, 512, 128, 128, True, False)
    long = Attention("c", 4, 8192, 8192, 128, 128, True, False)
    assert timer.attention_efficiency(short) < timer.attention_efficiency(long) < get_arch("hopper").attention_forward
    assert timer.attention_efficiency(Attention("c", 4, 8192, 8192, 128, 128, True, True)) < \
        timer.attention_efficiency(long)


def test_fp8_gemms_on_hopper_only():
    g8, g16 = Gemm("fc", 8192, 8192, 8192, dtype="fp8"), Gemm("fc", 8192, 8192, 8192)
    timer = KernelTimer(H100)
    assert timer.kernel_time(g8) < 0.7 * timer.kernel_time(g16)
    with pytest.raises(SpecError, match="no FP8 tensor cores"):
        KernelTimer(A100).kernel_time(g8)


def test_fp8_runs_shorten_a_hopper_step_and_are_refused_on_ampere():
    from helpers import simulate_settings

    base = dict(model="llama3-8b", topology="h100-ib", gpus=8, tp=8, pp=1, seq=8192, gbs=8)
    bf16, fp8 = simulate_settings(**base), simulate_settings(**base, fp8=True)
    assert fp8.report["step_time_s"] < 0.95 * bf16.report["step_time_s"]
    with pytest.raises(SpecError, match="--fp8: gpu a100-80g has no FP8 tensor cores"):
        simulate_settings(**{**base, "topology": "a100-hdr"}, fp8=True)


def test_a_short_k_loses_the_tiles_fixed_time():
    """Each output tile spends ``tile_k_overhead`` K elements' worth of time outside its main
    loop: on Hopper (384) a GEMM's math over K = 384 runs at half the rate of a very long K at the
    same M and N; FP8 loses twice the K (its main loop is twice as fast). The store of C adds to
    that: a weight gradient accumulated in fp32 (8 bytes per element) over a short K pays most."""
    hopper = get_arch("hopper")
    assert hopper.tile_k_overhead == 384 and tile_overhead(hopper, "fp8") == 768
    assert k_utilisation(384, tile_overhead(hopper, "bf16")) == pytest.approx(0.5)
    timer = KernelTimer(H100)
    short, long = Gemm("w", 8192, 8192, 384), Gemm("f", 8192, 8192, 384 * 64)
    assert timer.gemm_efficiency(short) / timer.gemm_efficiency(long) == pytest.approx(0.5 / (64 / 65), rel=1e-12)
    fp8 = Gemm("w", 8192, 8192, 768, dtype="fp8")
    assert timer.gemm_efficiency(fp8) / timer.gemm_efficiency(Gemm("f", 8192, 8192, 768 * 64, dtype="fp8")) == \
        pytest.approx(0.5 / (64 / 65), rel=1e-12)
    wgrad = Gemm("w", 8192, 8192, 2048, out_bytes=8)
    store = 8192 * 8192 * 8 / (H100.hbm_bandwidth_Bps * hopper.hbm_efficiency)
    assert timer.kernel_time(wgrad) - timer.kernel_time(Gemm("w", 8192, 8192, 2048)) == \
        pytest.approx(store - 8192 * 8192 * 2 / (H100.hbm_bandwidth_Bps * hopper.hbm_efficiency), rel=1e-9)


def test_expert_gemms_run_four_at_a_time_and_wait_for_the_host():
    """A grouped GEMM of 6 experts runs as a round of 4 concurrent GEMMs and a round of 2
    (TransformerEngine's four streams); a round takes at least the host's time to issue its
    GEMMs, so tiny experts cost the host's time per GEMM, not the GPU's."""
    hopper = get_arch("hopper")
    timer = KernelTimer(H100)
    grouped = Gemm("moe.expert.fc1", 1024, 3072, 4096, batch=6, streams=4)
    four, two = Gemm("x", 1024, 3072, 4096, batch=4), Gemm("x", 1024, 3072, 4096, batch=2)
    assert timer.kernel_time(grouped) == pytest.approx(
        max(timer.kernel_time(four), 4 * hopper.expert_gemm_host_s)
        + max(timer.kernel_time(two), 2 * hopper.expert_gemm_host_s))
    tiny = Gemm("moe.expert.fc1", 16, 256, 256, batch=8, streams=4)
    assert timer.kernel_time(tiny) == pytest.approx(8 * hopper.expert_gemm_host_s)
    flat = KernelTimer(H100.with_efficiency(0.5))  # the flat efficiency stands for everything: one kernel
    assert flat.kernel_time(tiny) == pytest.approx(flat.kernel_time(Gemm("x", 16, 256, 256, batch=8)))
