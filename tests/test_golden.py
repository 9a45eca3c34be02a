"""Golden reports: each scenario of tests/golden/scenarios.py gives its recorded report.json byte
for byte (deterministic numbers; a change that is meant to move them rewrites the files)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from golden.scenarios import HERE, SCENARIOS, run_report


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_report_is_byte_identical(name, tmp_path):
    with contextlib.redirect_stdout(io.StringIO()):
        got = run_report(name, tmp_path)
    want = (HERE / f"{name}.json").read_bytes()
    assert got == want, f"report.json of golden scenario {name} changed"


@pytest.mark.quick
def test_scenarios_cover_the_extension_points():
    flags = [" ".join(v) for v in SCENARIOS.values()]
    joined = " ".join(flags)
    for schedule in ("gpipe", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-v", "dualpipe", "dualpipev", "zb-auto",
                     "zb-h1-4x8"):
        assert f"--schedule {schedule}" in joined
    for text in ("--network flow", "--network none", "--cp 2", "--ep", "--routing-skew", "--zero 0", "--zero 2",
                 "--zero 3", "--recompute full", "--recompute selective", "--first-stage-layers", "--no-fold"):
        assert text in joined
    assert len(SCENARIOS) >= 12
    assert all(Path(HERE / f"{n}.json").exists() for n in SCENARIOS)
