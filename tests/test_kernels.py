"""numba functions by name, through their saved machine code: numba where the code does not take
the arguments or machine code is switched off, other types looked up again, arrays let go."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from simtrain import kernels, machine_code
from simtrain.network import flowcore
from simtrain.network.flow_kernels import SOURCES
from simtrain.network.flow_layout import SF_ROWS, SI_ROWS

MODULE = "simtrain.network.flowcore"


@pytest.mark.quick
def test_arguments_the_machine_code_does_not_take_go_to_numba():
    kernel = kernels.Kernel(MODULE, "first_end", SOURCES)
    sf, si, ist = np.zeros((SF_ROWS, 8)), np.zeros((SI_ROWS, 16), dtype=np.int64), np.zeros(64, dtype=np.int64)
    assert kernel(sf, si[:, ::2], ist) == flowcore.first_end(sf, si[:, ::2], ist)  # not contiguous
    assert kernel._fast is flowcore.first_end
    with pytest.raises(AttributeError):
        kernels.Kernels(MODULE, SOURCES)._hidden


@pytest.mark.quick
def test_machine_code_runs_and_lets_go_of_its_arrays(monkeypatch):
    named = kernels.Kernels(MODULE, SOURCES)
    kernel = named.first_end
    assert named.first_end is kernel  # (made once, then an attribute)
    sf, si, ist = np.zeros((SF_ROWS, 8)), np.zeros((SI_ROWS, 8), dtype=np.int64), np.zeros(64, dtype=np.int64)
    assert kernel(sf, si, ist) == flowcore.first_end(sf, si, ist)
    native = kernel._fast
    assert isinstance(native, machine_code.NativeFunction) and native._slots.bound[0] is sf
    kernel.release()
    assert native._slots.bound == [None, None, None]
    once = kernels.Kernel(MODULE, "first_end", SOURCES, keep_arrays=False)
    once(sf, si, ist)
    assert once._fast._slots.bound == [None, None, None]  # let go after each call
    monkeypatch.setenv(kernels.ENV_SWITCH, "0")
    assert not kernels.Kernel(MODULE, "first_end", SOURCES).prepare((("float64", 2), ("int64", 2), ("int64", 1)))


@pytest.mark.quick
def test_other_types_are_looked_up_again():
    """A call with other types than the last one's: the machine code refuses them before it runs,
    and the types' own code takes the call; the first types' code is kept for their next call."""
    kernel = kernels.Kernel(MODULE, "first_end", SOURCES)
    sf, si, ist = np.zeros((SF_ROWS, 8)), np.zeros((SI_ROWS, 8), dtype=np.int64), np.zeros(64, dtype=np.int64)
    kernel(sf, si, ist)
    first = kernel._fast
    narrow = ist.astype(np.int32)
    assert kernel(sf, si, narrow) == flowcore.first_end(sf, si, narrow)
    assert isinstance(kernel._fast, machine_code.NativeFunction) and kernel._fast is not first
    kernel(sf, si, ist)
    assert kernel._fast is first


def test_a_changed_callee_in_another_file_is_built_anew(tmp_path):
    """numba keys its saved code by each function's own file: after a function in another file
    changes, the saved code of its callers is from before (``h``'s here, which ``g`` calls).
    Machine code built for the new sources must not be that code."""
    (tmp_path / "callee_mod.py").write_text("from numba import njit\n\n\n@njit(cache=True)\ndef f():\n    return 1\n")
    (tmp_path / "caller_mod.py").write_text(textwrap.dedent("""
        from numba import njit

        from callee_mod import f


        @njit(cache=True)
        def h(x):
            return f() + x


        @njit(cache=True)
        def g(x):
            return h(x)
    """))
    script = textwrap.dedent(f"""
        from pathlib import Path
        from simtrain.kernels import Kernels
        here = Path({str(tmp_path)!r})
        print(Kernels("caller_mod", [here / "caller_mod.py", here / "callee_mod.py"]).g(0))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]),
               SIMTRAIN_CACHE_DIR=str(tmp_path / "code"))

    def run() -> str:
        return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                              check=True).stdout.strip()

    assert run() == "1"
    callee = tmp_path / "callee_mod.py"
    callee.write_text(callee.read_text().replace("return 1", "return 2"))
    assert run() == "2"
    assert len(list((tmp_path / "code").glob("caller_mod.g-*.o"))) == 2  # machine code, each time
