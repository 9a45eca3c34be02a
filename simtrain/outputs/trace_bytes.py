"""The trace's complete events as bytes, written by compiled code (:mod:`simtrain.outputs.trace_fill`).

:func:`span_bytes` gives the bytes :meth:`simtrain.outputs.trace._Parts.span_texts` gives as text:
the columns' distinct pieces go once into a pool, and the compiled fill copies each event's
pieces and spells its start time, so that no Python string is made per event. It runs where it
pays (:func:`wanted`): on long traces, through the fill's saved machine code
(:mod:`simtrain.kernels`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from simtrain.kernels import Kernels
from simtrain.machine_code import Arg
from simtrain.outputs.trace_text import _NS_TEXT_MAX_US, Texts

__all__ = ["FILL", "ARGS", "SOURCES", "MIN_SPANS", "BUILD_MIN_SPANS", "MAX_TS_NS", "wanted", "span_bytes"]

#: the fill's arguments: out, pool, starts, ids, start times, last
ARGS: tuple[Arg, ...] = (("uint8", 1), ("uint8", 1), ("int64", 1), ("int32", 2), ("int64", 1), ("bool", 0))
SOURCES = (Path(__file__).resolve().parent / "trace_fill.py",)
FILL = Kernels("simtrain.outputs.trace_fill", SOURCES, keep_arrays=False)
#: Traces of this many spans or more are written by the fill where its machine code is saved (its
#: load, about 0.03 s, is then less than the text's formatting, about 1 us a span).
MIN_SPANS = 20_000
#: While the fill's machine code is not built yet, only traces this long build it (numba's compile
#: takes a few seconds, once per installation).
BUILD_MIN_SPANS = 200_000
#: Start times from this many nanoseconds on are left to ``float.__repr__`` (the text's path): the
#: fill's spelling is ``float.__repr__``'s below it, the bound of the text's own spelling
#: (:func:`simtrain.outputs.trace_text._ns_texts`).
MAX_TS_NS = _NS_TEXT_MAX_US * 1000


def wanted(ts_ns: np.ndarray) -> bool:
    """Whether the fill writes a trace with these start times (whole nanoseconds, finite): long
    enough, in the fill's range, and its machine code saved (or the trace long enough to build it)."""
    n = len(ts_ns)
    if n < MIN_SPANS or ts_ns.min() < 0 or ts_ns.max() >= MAX_TS_NS:
        return False
    return n >= BUILD_MIN_SPANS or FILL.fill.saved(ARGS)


def _pool(columns: Sequence[Texts]) -> tuple[np.ndarray, np.ndarray, list[int], int]:
    """Every column's distinct pieces as one pool of bytes, each piece's start in it (and the
    end), the first piece of each column, and the longest event the pieces make."""
    pieces: list[bytes] = []
    bases: list[int] = []
    longest = 0
    for table, _ in columns:
        bases.append(len(pieces))
        texts = [b"" if t is None else t.encode("ascii") for t in table.tolist()]
        pieces += texts
        longest += max(map(len, texts), default=0)
    lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
    starts = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    return np.frombuffer(b"".join(pieces), dtype=np.uint8).copy(), starts, bases, longest


def span_bytes(columns: Sequence[Texts], ts_ns: np.ndarray, chunk: int) -> Iterator[memoryview]:
    """The events of ``columns`` (each a table of pieces and each span's place in it) and start
    times ``ts_ns`` (whole nanoseconds, ``0 <= ts_ns <`` :data:`MAX_TS_NS`), comma-separated, in
    pieces of ``chunk`` events (each but the last ending in a comma). The pieces share one
    buffer: each is valid until the next is asked for (a new buffer per piece would be touched
    afresh, page by page, which costs more than filling it on some machines)."""
    n = len(ts_ns)
    if not n:
        return
    pool, starts, bases, longest = _pool(columns)
    ts = np.ascontiguousarray(ts_ns, dtype=np.int64)
    per_event = longest + len(str(int(ts.max()) // 1000)) + 4 + 2  # the pieces, "<int>.ddd", "},"
    rows = min(chunk, n)
    out = np.empty(per_event * rows, dtype=np.uint8)  # one buffer for every piece: fresh pages are slow
    ids = np.empty((len(columns), rows), dtype=np.int32)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        if b - a < rows:  # the last piece, shorter
            ids = np.ascontiguousarray(ids[:, :b - a])
        for j, (_, index) in enumerate(columns):
            np.add(index[a:b], bases[j], out=ids[j], casting="unsafe")
        written = FILL.fill(out, pool, starts, ids, ts[a:b], b == n)
        yield memoryview(out)[:written]
