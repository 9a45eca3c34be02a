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

Speed: the reorder reads the op table's columns, never an op object, and a lowering keeps it per
pair *shape* (the halves' sizes, the streams, the dependencies relative to the pair's first op):
every steady-state pair a template emitted has the shape of one before it, so it is reordered by
a lookup.
"""

from __future__ import annotations

from array import array

from simtrain.workload.program import MORE, STREAM, OpTable, Program

_COMPUTE = STREAM["compute"]


def _segments(compute: list[bool], deps: list[list[int]], lo: int, hi: int) -> list[int]:
    """The segment of each op ``lo..hi-1`` of the pair (one half; -1 for a communication op),
    numbered 0, 1, ... with no empty segment: a compute op's raw index is the largest over its
    dependencies of theirs, plus one across a communication op. Ops are offsets in the pair;
    ``deps`` holds each one's dependencies inside the pair."""
    raw = [0] * (hi - lo)
    for k in range(lo, hi):
        level = 0
        for d in deps[k]:
            if d >= lo:  # the other half's ops do not count
                v = raw[d - lo] + (1 if compute[k] and not compute[d] else 0)
                if v > level:
                    level = v
        raw[k - lo] = level
    levels = sorted({raw[k - lo] for k in range(lo, hi) if compute[k]})
    compact = {v: j for j, v in enumerate(levels)}
    return [compact[raw[k - lo]] if compute[k] else -1 for k in range(lo, hi)]


#: A pair's shape as :func:`interleave` reads it: the halves' sizes, each op's stream, its
#: dependencies relative to the pair's first op (:func:`_shape`).
Shape = tuple[int, int, bytes, bytes, bytes, tuple[tuple[int, tuple[int, ...]], ...]]
#: What :func:`interleave` did to a pair of one shape: each stream's tail as offsets from the
#: pair's first op, in the new order; None where the pair keeps its plain order.
Reorder = dict[int, tuple[int, ...]] | None


def _shape(ops: OpTable, start: int, mid: int, end: int) -> Shape:
    """Everything :func:`_reorder` reads of the pair ``start..end-1``, with op ids taken relative
    to ``start`` (a dependency outside the pair is -3), so pairs a template emitted on other
    micro-batches compare equal."""
    def rel(column: array[int]) -> bytes:  # (a pair has tens of ops: Python beats numpy's per-call cost)
        return array("i", [d - start if start <= d < end else (d if d < 0 else -3)
                           for d in column[start:end]]).tobytes()

    d0 = ops.dep0[start:end]
    more = tuple((k, tuple(d - start if start <= d < end else -3 for d in ops.more[start + k]))
                 for k, d in enumerate(d0) if d == MORE)
    return mid - start, end - start, ops.stream[start:end].tobytes(), rel(ops.dep0), rel(ops.dep1), more


def interleave(prog: Program, rank: int, start: int, mid: int, end: int,
               memo: dict[Shape, Reorder] | None = None) -> None:
    """Reorder ``rank``'s streams for the overlapped pair whose forward half emitted ops
    ``start..mid-1`` and backward half ``mid..end-1`` (all of ``rank``, at the tail of its
    streams, in emission order). ``memo`` keeps the reorder of each pair shape met, so a pair of
    a shape seen before is only looked up."""
    if memo is None:
        reorder = _reorder(prog.ops, start, mid, end)
    else:
        key = _shape(prog.ops, start, mid, end)
        if key not in memo:
            memo[key] = _reorder(prog.ops, start, mid, end)
        reorder = memo[key]
    if reorder is None:
        return
    for s, offsets in reorder.items():
        ids = prog.order[(rank, s)]
        ids[len(ids) - len(offsets):] = array(ids.typecode, [start + k for k in offsets])


def _reorder(ops: OpTable, start: int, mid: int, end: int) -> Reorder:
    """The new order of the pair's ops on each stream (offsets from ``start``), or None where a
    dependency between the halves forbids it."""
    stream, n = ops.stream, end - start
    compute = [stream[i] == _COMPUTE for i in range(start, end)]
    deps = [[d - start for d in ops.deps_of(i) if start <= d < end] for i in range(start, end)]
    seg = _segments(compute, deps, 0, mid - start) + _segments(compute, deps, mid - start, n)
    order = sorted((k for k in range(n) if compute[k]), key=lambda k: (seg[k], k >= mid - start, k))
    position: list[float] = [0.0] * n
    for p, k in enumerate(order):
        position[k] = p
    # communication goes right after the latest compute op it follows (-1: none in the pair)
    for k in range(n):
        if not compute[k]:
            position[k] = max((position[d] for d in deps[k]), default=-1) + 0.5
    for k in range(n):  # a dependency between the halves may forbid the order
        if any((position[d], d) >= (position[k], k) for d in deps[k]):
            return None
    tails: dict[int, list[int]] = {}
    for k in range(n):
        tails.setdefault(stream[start + k], []).append(k)
    return {s: tuple(sorted(ks, key=lambda k: (position[k], k))) for s, ks in tails.items()}
