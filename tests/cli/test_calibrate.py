"""``simtrain calibrate``: without PyTorch one line and exit 2; with a stand-in timer a table that
``simtrain run --calibration`` reads back and reports."""

from __future__ import annotations

import sys

import pytest

from helpers import assert_user_error, cli
from simtrain.cli.calibrate import calibrate
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
