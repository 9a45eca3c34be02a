"""calibrate(): a layout's kernels timed by any timer into a table a run reads back."""

from __future__ import annotations

import pytest

from simtrain import calibrate
from simtrain.costs.calibration import read_calibration
from simtrain.errors import SpecError

pytestmark = pytest.mark.quick

SETTINGS = dict(model="llama3-8b", topology="h100-ib", gpus=8, tp=2, seq=2048, gbs=8)


def test_every_kernel_is_timed_once_and_written(tmp_path):
    timed = []
    count, comment = calibrate(SETTINGS, tmp_path / "cal.csv", lambda kernel: timed.append(kernel) or 1e-3)
    assert count == len(timed) == len(set(timed)) == len(read_calibration(tmp_path / "cal.csv").entries)
    assert "timed on a stand-in timer" in comment


def test_an_unwritable_table_is_one_line(tmp_path):
    with pytest.raises(SpecError, match="--out .*: cannot write"):
        calibrate(SETTINGS, tmp_path / "missing" / "cal.csv", lambda kernel: 1e-3)
