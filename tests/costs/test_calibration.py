"""Calibration tables: the CSV round trip, exact and interpolated lookups, the fallback to the
model, strict parsing, and a run whose GEMMs are measured twice as fast."""

from __future__ import annotations

import pytest

from helpers import cli_json
from simtrain import api
from simtrain.costs import KernelTimer
from simtrain.costs.calibration import Calibration, Entry, measured, parse_calibration, read_calibration
from simtrain.costs.kernels import Attention, Elementwise, Gemm
from simtrain.errors import SpecError
from simtrain.specs.gpu import get_gpu

pytestmark = pytest.mark.quick

TIMER = KernelTimer(get_gpu("h100-sxm"))


def test_round_trip_write_load_lookup(tmp_path):
    kernels = [Gemm("a", 1024, 768, 4096), Attention("c", 32, 2048, 2048, 128, 128, True, True),
               Elementwise("n", 2e6, launches=2)]
    table = measured(kernels, lambda k: 1e-4)
    path = tmp_path / "cal.csv"
    path.write_text(table.to_csv("measured by hand"))
    back = read_calibration(path)
    assert [(e.kind, e.shape, e.dtype) for e in back.entries] == [(e.kind, e.shape, e.dtype) for e in table.entries]
    assert [e.time_s for e in back.entries] == pytest.approx([e.time_s for e in table.entries], rel=1e-12)
    assert back.source == str(path)
    assert path.read_text().startswith("# measured by hand\nkind,shape,dtype,time_us\n")
    timer = KernelTimer(get_gpu("h100-sxm"), back)
    assert timer.kernel_time(kernels[0]) == pytest.approx(1e-4)
    assert timer.kernel_time(kernels[1]) == pytest.approx(1e-4)
    assert timer.kernel_time(kernels[2]) == pytest.approx(2e-4)  # per launch, two launches
    assert timer.kernel_time(Gemm("far", 64, 64, 64)) == TIMER.model_time(Gemm("far", 64, 64, 64))
    assert dict(timer.counts) == {"measured": 3, "model": 1}


def test_interpolation_between_measured_shapes():
    """Between two measured M the model's time is scaled by the measured/model ratio,
    interpolated in log M; outside them, or off the measured N and K, the model stands."""
    lo, hi = Gemm("g", 1024, 4096, 4096), Gemm("g", 4096, 4096, 4096)
    table = Calibration((Entry("gemm", (1, 1024, 4096, 4096), "bf16", 2 * TIMER.model_time(lo)),
                         Entry("gemm", (1, 4096, 4096, 4096), "bf16", 4 * TIMER.model_time(hi))))
    mid = Gemm("g", 2048, 4096, 4096)
    time, source = table.lookup(mid, TIMER.model_time)
    assert source == "interpolated" and time == pytest.approx(3 * TIMER.model_time(mid))
    assert table.lookup(Gemm("g", 8192, 4096, 4096), TIMER.model_time) is None  # no extrapolation
    assert table.lookup(Gemm("g", 2048, 4096, 2048), TIMER.model_time) is None  # K never measured


@pytest.mark.parametrize("text, message", [
    ("", "no measured kernels"),
    ("kind,shape\n", "expected the header"),
    ("kind,shape,dtype,time_us\ngemm,1x2x3,bf16\n", "expected 4 fields"),
    ("kind,shape,dtype,time_us\nconv,1x2x3x4,bf16,1\n", "kind = 'conv'"),
    ("kind,shape,dtype,time_us\ngemm,1x2x3,bf16,1\n", "takes 4 positive integers"),
    ("kind,shape,dtype,time_us\ngemm,1x2x3x4,fp4,1\n", "dtype = 'fp4'"),
    ("kind,shape,dtype,time_us\ngemm,1x2x3x4,bf16,-1\n", "time_us = -1"),
    ("kind,shape,dtype,time_us\ngemm,1xAx3x4,bf16,1\n", "is not a number"),
    ("kind,shape,dtype,time_us\nattention_forward,0x512x512x128x128x1,bf16,10\n",
     r"line 2: shape '0x512x512x128x128x1': attention_forward takes 6 positive integers \(the last, causal, 0 or 1\)"),
    ("kind,shape,dtype,time_us\nattention_backward,8x512x512x128x128x2,bf16,10\n", "causal = 2: must be 0 or 1"),
    ("kind,shape,dtype,time_us\ngemm,1x2x3x4,bf16,1\n# again\ngemm,1x2x3x4,bf16,2\n",
     r"line 4: gemm '1x2x3x4' bf16 is given twice \(lines 2 and 4\)"),
])
def test_parse_errors_name_the_line(text, message):
    with pytest.raises(SpecError, match=message):
        parse_calibration(text, "cal.csv")


def test_a_run_with_gemms_measured_slower(tmp_path):
    """One GPU, no communication: the step is its kernels one after another, so GEMMs measured at
    twice and three times the model's time lengthen it by one and two GEMM times (a table faster
    than the model would pass the GPU's peak, which is refused)."""
    settings = dict(model="llama3-8b", topology="h100-ib", gpus=1, tp=1, pp=1, seq=2048, gbs=1)
    sc = api.resolve(settings)
    from simtrain.costs.measure import layout_kernels

    kernels = layout_kernels(sc.model, sc.parallel)

    def table(scale: float):
        path = tmp_path / f"gemm-{scale}.csv"
        path.write_text(measured(kernels, lambda k: TIMER.model_time(k) * (scale if k.kind == "gemm" else 1))
                        .to_csv(""))
        return str(path)

    base = api.simulate(sc).report
    same = api.simulate(api.resolve({**settings, "calibration": table(1.0)})).report
    double = api.simulate(api.resolve({**settings, "calibration": table(2.0)})).report
    triple = cli_json("run", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", 1, "--seq", 2048,
                      "--gbs", 1, "--tp", 1, "--pp", 1, "--calibration", table(3.0), "--out", tmp_path, "--no-plot")
    assert same["step_time_s"] == pytest.approx(base["step_time_s"], rel=1e-9)
    gemm_time = double["step_time_s"] - base["step_time_s"]
    assert gemm_time > 0.3 * base["step_time_s"]
    assert triple["step_time_s"] == pytest.approx(base["step_time_s"] + 2 * gemm_time, rel=1e-6)
    assert triple["kernel_sources"]["measured"] > 0 and triple["config"]["calibration"] == table(3.0)
    assert base["kernel_sources"] == {"measured": 0, "interpolated": 0, "model": base["kernel_sources"]["model"]}


def test_a_batch_of_zero_heads_is_refused_in_one_line(tmp_path):
    """An attention shape of batch 0 was a division by zero in the interpolation."""
    from helpers import assert_user_error

    path = tmp_path / "cal.csv"
    path.write_text("kind,shape,dtype,time_us\nattention_forward,0x512x512x128x128x1,bf16,10\n"
                    "attention_forward,64x512x512x128x128x1,bf16,10\n")
    assert_user_error("run", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", 8, "--tp", 2, "--pp", 2,
                      "--gbs", 8, "--seq", 512, "--no-plot", "--out", tmp_path / "o", "--calibration", path,
                      contains="line 2: shape '0x512x512x128x128x1': attention_forward takes 6 positive integers")


def test_a_measurement_faster_than_the_datasheet_peak_is_refused(tmp_path):
    """1 ns per kernel gave 124% MFU on an H100: a GEMM or attention core above the dense
    tensor-core peak, an elementwise kernel above the HBM bandwidth is refused naming its line."""
    from helpers import assert_user_error
    from simtrain.costs.calibration import check_peaks

    gpu = get_gpu("h100-sxm")
    sc = api.resolve(dict(model="llama3-8b", topology="h100-ib", gpus=1, tp=1, pp=1, seq=2048, gbs=1))
    from simtrain.costs.measure import layout_kernels

    path = tmp_path / "ns.csv"
    path.write_text(measured(layout_kernels(sc.model, sc.parallel), lambda k: 1e-9).to_csv("1 ns each"))
    line = assert_user_error("run", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", 1, "--seq", 2048,
                             "--gbs", 1, "--tp", 1, "--pp", 1, "--calibration", path, "--no-plot",
                             "--out", tmp_path / "o", contains=(f"{path}, line 3: ", "faster than the dense BF16 "
                                                                "peak of h100-sxm (989.4 TFLOP/s)"))
    assert not (tmp_path / "o" / "report.json").exists() and len(line) < 300
    gemm = Gemm("g", 4096, 4096, 4096)
    at_peak = gemm.flops / gpu.peak_bf16_flops
    check_peaks(parse_calibration(f"kind,shape,dtype,time_us\ngemm,1x4096x4096x4096,bf16,{at_peak / 1e-6!r}\n",
                                  "c.csv"), gpu)  # exactly the peak: accepted
    with pytest.raises(SpecError, match=r"c.csv, line 2: gemm 1x4096x4096x4096 bf16 in 100 us is 1374 TFLOP/s, "
                                        r"faster than the dense BF16 peak of h100-sxm \(989.4 TFLOP/s\); it cannot "
                                        r"take less than 138.9 us"):
        check_peaks(parse_calibration("kind,shape,dtype,time_us\ngemm,1x4096x4096x4096,bf16,100\n", "c.csv"), gpu)
    with pytest.raises(SpecError, match=r"line 2: gemm 1x4096x4096x4096 fp8 in 60 us is 2291 TFLOP/s, faster "
                                        r"than the dense FP8 peak of h100-sxm"):
        check_peaks(parse_calibration("kind,shape,dtype,time_us\ngemm,1x4096x4096x4096,fp8,60\n", "c.csv"), gpu)
    check_peaks(parse_calibration("kind,shape,dtype,time_us\ngemm,1x4096x4096x4096,fp8,100\n", "c.csv"), gpu)
    with pytest.raises(SpecError, match=r"line 2: elementwise 1000000000 bf16 in 100 us is 10 TB/s, faster than the "
                                        r"HBM bandwidth of h100-sxm \(3.35 TB/s\)"):
        check_peaks(parse_calibration("kind,shape,dtype,time_us\nelementwise,1000000000,bf16,100\n", "c.csv"), gpu)
    with pytest.raises(SpecError, match="attention_forward 32x4096x4096x128x128x1 bf16 in 1 us"):
        check_peaks(parse_calibration("kind,shape,dtype,time_us\nattention_forward,32x4096x4096x128x128x1,bf16,1\n",
                                      "c.csv"), gpu)
    with pytest.raises(SpecError, match="calibration, row 1: gemm"):  # a table not read from a file
        check_peaks(Calibration((Entry("gemm", (1, 4096, 4096, 4096), "bf16", 1e-6),)), gpu)
