"""The compiled fill of the trace's events: each event's pieces from the pool in column order, its
start time spelt as ``float.__repr__`` spells ``ns / 1000``, then ``},`` (the last event: ``}``)."""

from __future__ import annotations

import numpy as np
import pytest

from simtrain.machine_code import NativeFunction
from simtrain.outputs import trace_bytes
from simtrain.outputs.trace_fill import fill


def _pool(texts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    starts = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in texts], out=starts[1:])
    return np.frombuffer(b"".join(texts), dtype=np.uint8).copy(), starts


@pytest.mark.quick
@pytest.mark.parametrize("through", ["numba", "machine code"])
def test_events_are_their_pieces_then_the_start_time(through):
    pool, starts = _pool([b'{"a":', b"", b"xyz", b',"ts":'])
    ids = np.array([[0, 0, 0, 0, 0, 0, 0], [2, 1, 2, 1, 2, 1, 2], [3, 3, 3, 3, 3, 3, 3]], dtype=np.int32)
    ts_ns = np.array([0, 1500, 1250, 1125, 1_000_000, 123_456_789, 999_999_999_999_999], dtype=np.int64)
    if through == "machine code":  # built (or loaded), not numba's dispatcher standing in
        assert trace_bytes.FILL.fill.prepare(trace_bytes.ARGS)
    run = fill if through == "numba" else trace_bytes.FILL.fill
    for last in (True, False):
        out = np.zeros(1000, dtype=np.uint8)
        written = run(out, pool, starts, ids, ts_ns, last)
        mid = [b'{"a":' + (b"xyz" if i % 2 == 0 else b"") + b',"ts":' + repr(int(ns) / 1000).encode() + b"}"
               for i, ns in enumerate(ts_ns.tolist())]
        expected = b",".join(mid) + (b"" if last else b",")
        assert out[:written].tobytes() == expected
        assert (out[written:] == 0).all()
        if through == "machine code":
            assert isinstance(trace_bytes.FILL.fill._fast, NativeFunction)
    assert [repr(int(ns) / 1000) for ns in ts_ns[:4].tolist()] == ["0.0", "1.5", "1.25", "1.125"]
