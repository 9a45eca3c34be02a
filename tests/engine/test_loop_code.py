"""The loop's functions through their saved machine code: the same records as numba's
dispatchers, a fresh process that runs compiled without importing numba, and numba's run where the
machine code raised midway."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from simtrain import api, kernels, machine_code
from simtrain.engine import loop_code, priced, simulator

SPEC = dict(model="llama3-8b", topology="h100-ib", gpus=16, tp=2, pp=4, seq=2048, gbs=8, schedule="1f1b")
ROOT = Path(__file__).resolve().parents[2]
_RUN_PRICED = priced.run_priced


def _recorded(monkeypatch, switch: str, loop=None):
    """The records of SPEC's compiled run, the loop's functions made afresh, machine code switched
    on or off (or the loop's replaced by ``loop``)."""
    out = []
    monkeypatch.setenv(kernels.ENV_SWITCH, switch)
    monkeypatch.setattr(simulator, "BUILD_MIN_OPS", 0)  # compiled, whether its code is saved or not
    monkeypatch.setattr(loop_code, "LOOP", kernels.Kernels("simtrain.engine.compiled", loop_code.SOURCES, False))
    monkeypatch.setattr(loop_code, "RECORDS", kernels.Kernels("simtrain.engine.records", loop_code.SOURCES, False))
    if loop is not None:
        loop_code.LOOP.run_loop._fast = loop
    monkeypatch.setattr(priced, "run_priced", lambda *a, **k: out.append(_RUN_PRICED(*a, **k)) or out[-1])
    api.simulate(api.resolve(SPEC))
    return out


def _same(a, b):
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x.rows, y.rows) and np.array_equal(x.starts, y.starts)
        assert np.array_equal(x.ends, y.ends) and x.executed == y.executed and x.slowdown_s == y.slowdown_s


@pytest.mark.quick
def test_the_machine_code_records_what_numbas_dispatchers_record(monkeypatch):
    mine = _recorded(monkeypatch, "1")
    assert isinstance(loop_code.LOOP.run_loop._fast, machine_code.NativeFunction)
    assert isinstance(loop_code.RECORDS.fill._fast, machine_code.NativeFunction)
    assert loop_code.LOOP.run_loop._fast._slots.bound == [None] * 3  # the run's arrays let go
    theirs = _recorded(monkeypatch, "0")
    assert not isinstance(loop_code.LOOP.run_loop._fast, machine_code.NativeFunction)
    assert mine and len(mine) == len(theirs) and sum(len(r.rows) for r in mine) > 1000
    _same(mine, theirs)


@pytest.mark.quick
def test_where_the_machine_code_raises_numba_runs_the_loop_afresh(monkeypatch):
    class Raising:
        released = False

        def __call__(self, I, F, o):
            I[:] = -7  # stopped midway, its state spoilt
            raise machine_code.NativeError(-1)

        def release(self):
            self.released = True

    raising = Raising()
    mine = _recorded(monkeypatch, "1", loop=raising)
    assert raising.released and mine
    _same(mine, _recorded(monkeypatch, "0"))


@pytest.mark.quick
def test_a_fresh_process_runs_compiled_without_importing_numba():
    assert loop_code.LOOP.run_loop.prepare(loop_code.ARGS)  # saved (built now where it was not)
    script = textwrap.dedent("""
        import sys
        from simtrain import api
        from simtrain.engine import simulator
        simulator.COMPILED_MIN_OPS = 0  # (its code is saved: compiled from any length)
        api.simulate(api.resolve(%r))
        assert simulator.loop_loaded(), "not compiled"
        print("numba" in sys.modules)
    """ % SPEC)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop(kernels.ENV_SWITCH, None)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.quick
def test_a_short_program_runs_compiled_once_the_loops_code_is_saved(monkeypatch):
    monkeypatch.setattr(simulator, "loop_loaded", lambda: False)
    for saved in (True, False):
        monkeypatch.setattr(loop_code, "ready", lambda saved=saved: saved)
        assert [simulator.compiled_by_default(n) for n in (19_999, 20_000, 199_999, 200_000)] == \
            [False, saved, saved, True]
    monkeypatch.setattr(simulator, "loop_loaded", lambda: True)
    assert simulator.compiled_by_default(1)
