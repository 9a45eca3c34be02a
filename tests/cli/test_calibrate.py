"""``simtrain calibrate``: without PyTorch one line and exit 2; with a stand-in timer a table that
``simtrain run --calibration`` reads back and reports."""

from __future__ import annotations

import sys

import pytest

from helpers import assert_user_error, cli
from simtrain.api.calibrate import calibrate
from simtrain.costs.calibration import read_calibration

pytestmark = pytest.mark.quick

FLAGS = ("--model", "llama3-8b", "--topology", "h100-ib", "--gpus", "8", "--tp", "2", "--seq", "2048")


def test_without_torch_one_line_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert_user_error("calibrate", *FLAGS, "--out", tmp_path / "cal.csv",
                      contains=("pip install 'simtrain[calibrate]'",))
    assert not (tmp_path / "cal.csv").exists()


def test_calibrate_with_a_stand_in_timer_then_run_with_it(tmp_path):
    settings = dict(model="llama3-8b", topology="h100-ib", gpus=8, tp=2, seq=2048, gbs=8)
    path = tmp_path / "cal.csv"
    count, comment = calibrate(settings, path, lambda kernel: 1e-2)  # 10 ms: below every peak
    table = read_calibration(path)
    assert count == len(table.entries) > 10 and "llama3-8b, TP=2" in comment
    code, out, err = cli("run", *FLAGS, "--gbs", 8, "--calibration", path, "--out", tmp_path, "--no-plot")
    assert code == 0, err
    assert f"calibration {path}: " in out and "kernels measured" in out


def test_a_bad_calibration_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("kind,shape,dtype,time_us\ngemm,1x2x3,bf16,1\n")
    assert_user_error("run", *FLAGS, "--calibration", bad, "--out", tmp_path, "--no-plot",
                      contains=(f"{bad}, line 2", "takes 4 positive integers"))
    assert_user_error("run", *FLAGS, "--calibration", tmp_path / "none.csv", contains=("file not found",))


def test_the_command_counts_the_kernels_it_times_for_its_progress_bar(monkeypatch, tmp_path):
    """``calibrate`` can run for minutes on a GPU: its bar counts the kernels timed, and the
    table's comment still names the timer's device."""
    from simtrain.cli.calibrate import CountedTimer
    from simtrain.costs import measure

    class Stub:
        device = "stub-gpu"

        def __init__(self, **_):
            pass

        def __call__(self, kernel):
            return 1e-2

    counts = []
    timer = CountedTimer(Stub(), counts.append)
    assert timer("any kernel") == 1e-2 and timer("another") == 1e-2 and counts == [1, 2]
    assert timer.device == "stub-gpu"
    monkeypatch.setattr(measure, "TorchTimer", Stub)
    code, out, err = cli("calibrate", *FLAGS, "--out", tmp_path / "cal.csv")
    assert code == 0, err
    assert "timed on stub-gpu" in out and read_calibration(tmp_path / "cal.csv").entries
