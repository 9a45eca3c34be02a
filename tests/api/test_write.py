"""write_outputs(): the files of one simulated step, written as one set."""

from __future__ import annotations

import json

import pytest

from simtrain import resolve, simulate, write_outputs
from simtrain.errors import SpecError

pytestmark = pytest.mark.quick


def test_the_report_file_is_the_results_report(tmp_path):
    result = simulate(resolve({"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2, "pp": 2,
                               "seq": 2048, "gbs": 16}))
    paths = write_outputs(result, tmp_path, plot=False)
    assert sorted(paths) == ["report", "trace"]
    assert json.loads((tmp_path / "report.json").read_text())["step_time_s"] == result.report["step_time_s"]


def test_only_a_result_is_written(tmp_path):
    with pytest.raises(SpecError, match="write_outputs"):
        write_outputs({"step_time_s": 1.0}, tmp_path)
