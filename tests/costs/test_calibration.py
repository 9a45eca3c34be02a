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
])
def test_parse_errors_name_the_line(text, message):
    with pytest.raises(SpecError, match=message):
        parse_calibration(text, "cal.csv")


def test_a_run_with_gemms_measured_twice_as_fast(tmp_path):
    """One GPU, no communication: the step is its kernels one after another, so halving every
    GEMM shortens it by half the GEMM time (found with GEMMs measured as nearly free)."""
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
    half = cli_json("run", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", 1, "--seq", 2048,
                    "--gbs", 1, "--tp", 1, "--pp", 1, "--calibration", table(0.5), "--out", tmp_path, "--no-plot")
    free = api.simulate(api.resolve({**settings, "calibration": table(1e-9)})).report
    gemm_time = base["step_time_s"] - free["step_time_s"]
    assert gemm_time > 0.3 * base["step_time_s"]
    assert half["step_time_s"] == pytest.approx(base["step_time_s"] - gemm_time / 2, rel=1e-6)
    assert half["kernel_sources"]["measured"] > 0 and half["config"]["calibration"] == table(0.5)
    assert base["kernel_sources"] == {"measured": 0, "interpolated": 0, "model": base["kernel_sources"]["model"]}
