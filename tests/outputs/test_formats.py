"""The output-format registry: which files a run writes, in which order, under which names."""

from __future__ import annotations

import pytest

from simtrain import api
from simtrain.outputs.formats import FORMATS


@pytest.mark.quick
def test_formats_are_written_in_their_order_and_named_by_their_record(tmp_path):
    assert [f.name for f in FORMATS] == ["report", "trace", "timeline", "step_times", "html"]
    assert len({f.file for f in FORMATS}) == len(FORMATS)
    result = api.simulate(api.resolve({"model": "llama3-8b", "topology": "h100-ib", "gpus": 8, "tp": 2, "pp": 2,
                                       "seq": 1024, "gbs": 4}))
    plain = api.write_outputs(result, tmp_path / "plain", plot=False)
    assert list(plain) == ["report", "trace"]
    full = api.write_outputs(result, tmp_path / "full", plot=True, html=True)
    assert list(full) == ["report", "trace", "timeline", "html"]  # one step: no step-time chart
    files = {f.name: f.file for f in FORMATS}
    for name, path in full.items():
        assert path.endswith(files[name]) and (tmp_path / "full" / files[name]).stat().st_size > 0
    written = sorted(p.name for p in (tmp_path / "full").iterdir() if not p.name.startswith("."))  # not the lock
    assert written == sorted(files[n] for n in full)


@pytest.mark.quick
def test_several_steps_add_the_step_time_chart(tmp_path):
    result = api.simulate(api.resolve({"model": "llama3-8b", "topology": "h100-ib", "gpus": 8, "tp": 2, "pp": 2,
                                       "seq": 1024, "gbs": 4, "steps": 2}))
    assert list(api.write_outputs(result, tmp_path, plot=True)) == ["report", "trace", "timeline", "step_times"]
