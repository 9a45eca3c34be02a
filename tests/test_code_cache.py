"""Machine code on disk: saved atomically under its key, found only under it, damaged files refused,
the key made of the sources and the arguments, the folder the environment's where set, and a
function's code built once and loaded from there after."""

from __future__ import annotations

import pytest
from numba import njit

from simtrain import code_cache as cc, machine_code as mc
from simtrain.engine.compiled import OPTIONS


@njit(**{k: v for k, v in OPTIONS.items() if k != "cache"})
def _twice(x):
    for i in range(x.size):
        x[i] *= 2


@pytest.fixture(scope="module")
def code():
    built = mc.build(_twice, (("float64", 1),))
    assert built is not None
    return built


@pytest.mark.quick
def test_saved_code_loads_under_its_key_only(code, tmp_path):
    path = cc.save(code, "f", "k" * 64, tmp_path)
    assert path.parent == tmp_path and cc.load_saved("f", "k" * 64, tmp_path) is not None
    assert cc.load_saved("f", "j" * 64, tmp_path) is None
    path.write_bytes(path.read_bytes()[:100])
    assert cc.load_saved("f", "k" * 64, tmp_path) is None
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


@pytest.mark.quick
def test_the_key_is_the_sources_and_the_arguments(tmp_path):
    src = tmp_path / "a.py"
    src.write_text("x = 1\n")
    key = cc.cache_key("f", [src], [("int32", 1)])
    assert key == cc.cache_key("f", [src], [("int32", 1)])
    assert key != cc.cache_key("f", [src], [("int64", 1)])
    assert key != cc.cache_key("g", [src], [("int32", 1)])
    src.write_text("x = 2\n")
    assert key != cc.cache_key("f", [src], [("int32", 1)])


@pytest.mark.quick
def test_the_folder_is_the_environments_where_set(tmp_path, monkeypatch):
    monkeypatch.setenv(cc.ENV_FOLDER, str(tmp_path / "cache"))
    assert cc.cache_folder() == tmp_path / "cache" and (tmp_path / "cache").is_dir()
    monkeypatch.delenv(cc.ENV_FOLDER)
    assert cc.cache_folder() is not None


@pytest.mark.quick
def test_a_function_is_built_once_then_loaded(tmp_path, monkeypatch):
    import numpy as np

    built = []
    monkeypatch.setattr(cc, "build", lambda d, a: built.append(1) or mc.build(d, a))
    args = (("float64", 1),)
    source = tmp_path / "src.py"
    source.write_text("# the function's source\n")
    assert not cc.is_saved("twice", [source], args, tmp_path)
    first = cc.obtain("twice", [source], args, tmp_path, lambda: _twice)
    assert cc.is_saved("twice", [source], args, tmp_path)
    again = cc.obtain("twice", [source], args, tmp_path, lambda: _twice)
    assert built == [1] and first is not None and again is not None and again is not first
    x = np.arange(3.0)
    again(x)
    assert x.tolist() == [0.0, 2.0, 4.0]
