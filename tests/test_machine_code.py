"""Machine code kept as an object file: built from numba's compile, saved, damaged files refused,
and loaded code giving numba's results and statuses."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from numba import njit

from simtrain import machine_code as mc
from simtrain.engine.compiled import OPTIONS

_OPTIONS = {k: v for k, v in OPTIONS.items() if k != "cache"}


@njit(**_OPTIONS)
def _scaled_sum(x, out, rows, a):
    """out[i] = a * sum of row i of x + i // rows[0] (an integer division: raises where rows[0] is
    0); the sum of out."""
    for i in range(x.shape[0]):
        total = 0.0
        for j in range(x.shape[1]):
            total += x[i, j]
        out[i] = a * total + (i // rows[0])
    return out.sum()


@njit(**_OPTIONS)
def _flagged(flag, k, seen):
    """Whether ``flag``; ``seen[0]`` set to ``k`` where it is."""
    if flag:
        seen[0] = k
    return flag


_ARGS = (("float64", 2), ("float64", 1), ("int64", 1), ("float64", 0))


@pytest.fixture(scope="module")
def code():
    built = mc.build(_scaled_sum, _ARGS)
    assert built is not None
    return built


@pytest.mark.quick
def test_parameters_follow_numbas_data_model():
    assert mc.parameters([("int32", 1), ("int64", 0), ("bool", 0)]) == [
        "ptr", "ptr", "ptr", "ptr", "i64", "i64", "ptr", "i64", "i64", "i64", "i8"]
    assert len(mc.parameters([("float64", 2)])) == 2 + 5 + 4


@pytest.mark.quick
def test_loaded_code_gives_numbas_results_and_status(code):
    fn = mc.load(code)
    assert fn is not None
    x = np.arange(12.0).reshape(3, 4)
    mine, theirs = np.zeros(3), np.zeros(3)
    assert fn(x, mine, np.array([2], dtype=np.int64), 0.5) == _scaled_sum(x, theirs, np.array([2]), 0.5) == 34.0
    assert mine.tolist() == theirs.tolist() == [3.0, 11.0, 20.0]
    x[0, 0] = 100.0  # the same array, changed in place: read anew
    assert fn(x, mine, np.array([2], dtype=np.int64), 1.0) == 6.0 + 100.0 + 22.0 + 38.0 + 1.0
    other = np.ones((2, 2))  # another array, of another shape: its fields written
    assert fn(other, mine[:2], np.array([1], dtype=np.int64), 1.0) == 2.0 + 3.0
    with pytest.raises(mc.NativeError, match="status"):
        fn(x, mine, np.array([0], dtype=np.int64), 0.5)  # numba raises ZeroDivisionError there
    with pytest.raises(ZeroDivisionError):
        _scaled_sum(x, theirs, np.array([0], dtype=np.int64), 0.5)


@pytest.mark.quick
def test_booleans_and_returns_pass_as_numba_passes_them():
    args = (("bool", 0), ("int64", 0), ("int64", 1))
    code = mc.build(_flagged, args)
    assert code is not None and code.returns == "bool"
    fn, seen = mc.load(code), np.zeros(1, dtype=np.int64)
    assert fn(False, 7, seen) is False and seen[0] == 0
    assert fn(True, 7, seen) is True and seen[0] == 7
    frozen = np.zeros(1, dtype=np.int64)
    frozen.flags.writeable = False
    assert [mc.arg_of(v) for v in (True, 3, 2.5, seen, np.zeros((2, 2))[:, :1], frozen, "x")] == \
        [("bool", 0), ("int64", 0), ("float64", 0), ("int64", 1), None, None, None]
    with pytest.raises(TypeError, match="writeable"):
        fn(True, 7, frozen)
    with pytest.raises(TypeError, match="int64"):
        fn(True, 7.0, seen)
    with pytest.raises(TypeError, match="int64"):
        fn(True, True, seen)


@pytest.mark.quick
def test_threads_call_at_once_on_arrays_of_their_own(code):
    fn = mc.load(code)
    rows = np.array([1], dtype=np.int64)
    inputs = [np.full((64, 512), float(k)) for k in range(8)]

    def run(x):
        out = np.zeros(64)
        for _ in range(20):
            total = fn(x, out, rows, 1.0)
        return total, out

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, inputs))
    for k, (total, out) in enumerate(results):
        expected = 512.0 * k + np.arange(64)
        assert out.tolist() == expected.tolist() and total == expected.sum()
    fn.release()


@pytest.mark.quick
def test_the_code_calls_nothing_outside_itself(code):
    """numba's Python wrappers, which call its C helpers, are gone: the object loads in a process
    that never imported numba (the helpers' symbols would not resolve there)."""
    assert b"numba_do_raise" not in code.code and b"PyArg_UnpackTuple" not in code.code


@pytest.mark.quick
def test_arguments_are_checked(code):
    fn = mc.load(code)
    x, out, rows = np.ones((2, 2)), np.zeros(2), np.ones(1, dtype=np.int64)
    with pytest.raises(TypeError, match="float64"):
        fn(x, out, rows, 1)  # an int where the code takes a float
    with pytest.raises(TypeError, match="arguments"):
        fn(x, out, rows)
    with pytest.raises(TypeError, match="float64"):
        fn(x.astype(np.float32), out, rows, 1.0)
    with pytest.raises(TypeError, match="C-contiguous"):
        fn(np.ones((2, 4))[:, ::2], out, rows, 1.0)


@pytest.mark.quick
def test_a_file_cut_short_or_changed_is_refused(code):
    data = code.to_bytes()
    assert mc.ObjectCode.from_bytes(data) == code
    assert mc.ObjectCode.from_bytes(data[:-1]) is None
    changed = bytearray(data)
    changed[-10] ^= 1
    assert mc.ObjectCode.from_bytes(bytes(changed)) is None
    assert mc.ObjectCode.from_bytes(b"not json\n" + code.code) is None
    assert mc.ObjectCode.from_bytes(data.replace(b'"format": 2', b'"format": 99')) is None


def test_the_host_is_asked_once_and_answers_as_llvmlite():
    """The triple, CPU and features the target machine and the saved code's key use: llvmlite's
    own answers, asked once per process."""
    ll = mc.llvm()
    assert mc.host() == (ll.get_process_triple(), ll.get_host_cpu_name(), ll.get_host_cpu_features().flatten())
    assert mc.host() is mc.host()
