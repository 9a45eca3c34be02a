"""The loop's saved machine code: the same records as numba's dispatcher, a fresh process that
runs compiled without importing numba, a damaged file rebuilt, and numba's run where the code
raised midway."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from simtrain import api
from simtrain import machine_code
from simtrain.engine import loop_code, priced

SPEC = dict(model="llama3-8b", topology="h100-ib", gpus=16, tp=2, pp=4, seq=2048, gbs=8, schedule="1f1b")
ROOT = Path(__file__).resolve().parents[2]
_RUN_PRICED = priced.run_priced


def _recorded(monkeypatch, native):
    """The records of SPEC's run, with ``native`` as the loop's machine code."""
    out = []
    monkeypatch.setattr(loop_code, "native_loop", lambda: native)
    monkeypatch.setattr(priced, "run_priced", lambda *a, **k: out.append(_RUN_PRICED(*a, **k)) or out[-1])
    api.simulate(api.resolve(SPEC))
    return out


def _same(a, b):
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x.rows, y.rows) and np.array_equal(x.starts, y.starts)
        assert np.array_equal(x.ends, y.ends) and x.executed == y.executed and x.slowdown_s == y.slowdown_s


@pytest.fixture(scope="module")
def native():
    fn = loop_code.native_loop()
    assert fn is not None  # a folder can be written here (the package's __pycache__)
    return fn


@pytest.mark.quick
def test_the_machine_code_records_what_numbas_dispatcher_records(monkeypatch, native):
    from simtrain.engine import simulator
    monkeypatch.setattr(simulator, "COMPILED_MIN_OPS", 0)
    mine = _recorded(monkeypatch, native)
    theirs = _recorded(monkeypatch, None)
    assert mine and len(mine) == len(theirs)
    _same(mine, theirs)


def test_machine_code_can_be_switched_off(monkeypatch):
    monkeypatch.setenv(loop_code.ENV_SWITCH, "0")
    loop_code.native_loop.cache_clear()
    try:
        assert loop_code.native_loop() is None
    finally:
        loop_code.native_loop.cache_clear()


@pytest.mark.quick
def test_where_the_code_raises_numba_runs_the_loop_afresh(monkeypatch, native):
    from simtrain.engine import simulator
    monkeypatch.setattr(simulator, "COMPILED_MIN_OPS", 0)

    class Raising:
        released = False

        def __call__(self, I, F, o):
            I[:] = -7  # stopped midway, its state spoilt
            raise machine_code.NativeError(-1)

        def release(self):
            self.released = True

    raising = Raising()
    _same(_recorded(monkeypatch, raising), _recorded(monkeypatch, native))
    assert raising.released


@pytest.mark.quick
def test_a_fresh_process_runs_compiled_without_importing_numba(native):
    script = textwrap.dedent("""
        import sys
        from simtrain import api
        from simtrain.engine import simulator
        simulator.COMPILED_MIN_OPS = 0
        api.simulate(api.resolve(%r))
        assert simulator.loop_loaded(), "not compiled"
        print("numba" in sys.modules)
    """ % SPEC)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_a_damaged_file_is_built_again(tmp_path, monkeypatch):
    monkeypatch.setenv(machine_code.ENV_FOLDER, str(tmp_path))
    key = machine_code.cache_key(loop_code.NAME, loop_code.SOURCES, loop_code.ARGS)
    path = tmp_path / f"{loop_code.NAME}-{key[:32]}.o"
    path.write_bytes(b"{}\n damaged")
    loop_code.native_loop.cache_clear()
    try:
        assert loop_code.native_loop() is not None
        assert machine_code.ObjectCode.from_bytes(path.read_bytes()) is not None
    finally:
        loop_code.native_loop.cache_clear()
