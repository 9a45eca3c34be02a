"""Overlapped forward-backward pairs: the two halves of a DualPipe ``F&B`` action interleaved.

DeepSeek-V3's overlap (technical report arXiv:2412.19437, section 3.2.1 and figure 4) splits each
chunk of an overlapped forward/backward pair into components (attention, all-to-all dispatch,
MLP, all-to-all combine; the backward in reverse) and rearranges them so that while one half
waits for a communication, the other half computes: the forward's dispatch runs under the
backward's MLP, the backward's dispatch under the forward's MLP, and so on.

:func:`interleave` does this to the ops a lowering emitted for the two halves, one after the
other. Each half's compute ops fall into *segments*: a segment ends where the next compute op
waits for a communication op of its own half (a TP collective, an EP all-to-all, a CP ring step).
The rank's compute stream then runs the segments alternately, forward first: F0, B0, F1, B1, ...
Each communication op takes its place on its stream right after the compute op that produces it
(communication that waits for nothing inside the pair goes first), so it starts as soon as its
input exists and runs under the other half's next segment. Dependencies are not touched: the
result is only an order, and a topological one (a segment waits only for communication issued
from an earlier segment of its half; where a dependency between the halves would break that, the
pair keeps its plain order), so it cannot deadlock; ranks with identical programs get identical
orders, so collectives still meet.
"""

from __future__ import annotations

from array import array

from simtrain.workload.program import STREAM, Program

_COMPUTE = STREAM["compute"]


def _segments(prog: Program, lo: int, hi: int) -> dict[int, int]:
    """Compute op id -> its segment within ops ``lo..hi-1`` (one half), numbered 0, 1, ... with
    no empty segment: a compute op's raw index is the largest over its dependencies of theirs,
    plus one across a communication op."""
    raw: dict[int, int] = {}
    for i in range(lo, hi):
        op = prog.ops[i]
        compute = op.stream == _COMPUTE
        level = 0
        for d in op.deps:
            if lo <= d < hi:
                level = max(level, raw[d] + (1 if compute and prog.ops[d].stream != _COMPUTE else 0))
        raw[i] = level
    levels = sorted({raw[i] for i in range(lo, hi) if prog.ops[i].stream == _COMPUTE})
    compact = {v: k for k, v in enumerate(levels)}
    return {i: compact[raw[i]] for i in range(lo, hi) if prog.ops[i].stream == _COMPUTE}


def interleave(prog: Program, rank: int, start: int, mid: int, end: int) -> None:
    """Reorder ``rank``'s streams for the overlapped pair whose forward half emitted ops
    ``start..mid-1`` and backward half ``mid..end-1`` (all of ``rank``, at the tail of its
    streams)."""
    seg = {**_segments(prog, start, mid), **_segments(prog, mid, end)}
    compute = sorted(seg, key=lambda i: (seg[i], i >= mid, i))
    position: dict[int, float] = {op_id: k for k, op_id in enumerate(compute)}
    # communication goes right after the latest compute op it follows (-1: none in the pair)
    for i in range(start, end):
        if i not in position:
            position[i] = max((position[d] for d in prog.ops[i].deps if start <= d < end), default=-1) + 0.5
    for i in range(start, end):  # a dependency between the halves may forbid the order
        if any(start <= d < end and (position[d], d) >= (position[i], i) for d in prog.ops[i].deps):
            return
    streams = {prog.ops[i].stream for i in range(start, end)}
    for stream in streams:
        ids = prog.order[(rank, stream)]
        k = len(ids)
        while k > 0 and ids[k - 1] >= start:
            k -= 1
        ids[k:] = array(ids.typecode, sorted(ids[k:], key=lambda i: (position[i], i)))
