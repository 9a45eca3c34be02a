"""The flow model's compiled functions through their saved machine code: the same timelines as
numba's dispatchers, and a fresh process that runs the flow model without importing numba."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from simtrain import api
from simtrain.kernels import ENV_SWITCH, Kernels
from simtrain.network import flow_kernels, flowcore

SPEC = dict(model="mixtral-8x7b", topology="h100-ib-2to1", gpus=64, tp=8, ep=8, pp=1, order="tp-cp-dp-ep-pp",
            seq=1024, gbs=8, network="flow")
ROOT = Path(__file__).resolve().parents[2]


def _timeline(monkeypatch, switch: str):
    """SPEC's timeline, its flow model's functions made afresh, machine code switched on or off."""
    monkeypatch.setenv(ENV_SWITCH, switch)
    monkeypatch.setattr(flow_kernels, "CORE", Kernels("simtrain.network.flowcore", flow_kernels.SOURCES))
    monkeypatch.setattr(flow_kernels, "AHEAD", Kernels("simtrain.network.flowahead", flow_kernels.SOURCES))
    return api.simulate(api.resolve(SPEC)).timeline, flow_kernels.CORE


@pytest.mark.quick
def test_the_machine_code_gives_numbas_timeline(monkeypatch):
    mine, core = _timeline(monkeypatch, "1")
    assert type(core.run_until._fast).__name__ == "NativeFunction"
    theirs, core = _timeline(monkeypatch, "0")
    assert core.run_until._fast is flowcore.run_until
    assert mine.names == theirs.names
    for name, col in mine.cols.items():
        assert np.array_equal(col, theirs.cols[name]), name


@pytest.mark.quick
def test_a_fresh_process_runs_flows_without_importing_numba(monkeypatch):
    _timeline(monkeypatch, "1")  # the functions' machine code saved for these types
    script = textwrap.dedent("""
        import sys
        from simtrain import api
        api.simulate(api.resolve(%r))
        print("numba" in sys.modules)
    """ % SPEC)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop(ENV_SWITCH, None)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
