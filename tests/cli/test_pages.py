"""The command line's arrays on 4 KiB pages unless its user set NumPy's variable."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from simtrain.cli.pages import VARIABLE, small_pages_unless_set

pytestmark = pytest.mark.quick

_core = np._core if hasattr(np, "_core") else np.core  # (NumPy 2, NumPy 1)
_advise = _core.multiarray._set_madvise_hugepage  # returns the setting it replaces


def test_unset_the_advice_is_turned_off_here_and_for_child_processes():
    before = _advise(True)
    try:
        env: dict[str, str] = {}
        assert small_pages_unless_set(env) is True
        assert env == {VARIABLE: "0"}
        assert _advise(True) is False  # (what the call left: off)
    finally:
        _advise(before)


@pytest.mark.parametrize("given", ["1", "0"])
def test_a_value_the_user_set_is_left_to_numpy(given):
    before = _advise(True)
    try:
        env = {VARIABLE: given}
        assert small_pages_unless_set(env) is False
        assert env == {VARIABLE: given}
        assert _advise(True) is True  # untouched
    finally:
        _advise(before)


def test_the_command_line_sets_it_for_its_process():
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    code = ("import os, sys; from simtrain.cli.main import main; status = main(['list', 'gpus']); "
            f"sys.stderr.write(os.environ['{VARIABLE}']); sys.exit(status)")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stderr.endswith("0") and "h100" in done.stdout
