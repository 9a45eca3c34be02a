"""Action templates: one micro-batch's ops of a (rank, pass, stage) lowered once, then copied.

Every forward of one stage on one rank emits the same ops with the same costs, dependencies and
collective groups; only the micro-batch, the op ids and the collectives' sequence numbers differ.
The first emission that is self-contained is captured (its ops' fields, dependencies relative to
its first op, the sequence numbers relative to the rank's counters, and the gradient records it
left with the data-parallel ops); the later ones are instantiated from it, which skips the cost
model, the group look-ups and the per-layer Python of :mod:`simtrain.workload.blocks`.

An emission is captured only where copying it is exact: every dependency lies inside it (the first
forward of a stage in a step also waits for its parameter gathers, so it is emitted in full), and
it emits no data-parallel op. Under ZeRO 2 and 3 the data-parallel ops interleave with every
micro-batch's layers, so no action is templated (:meth:`DataParallelOps.settled`).
``tests/test_equivalence.py`` and the byte-identical golden reports check that the copies equal
the emitted ops.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from itertools import repeat
from dataclasses import dataclass

import numpy as np

from simtrain.workload.data_parallel import DataParallelOps, GradCall
from simtrain.workload.emit import Emitter
from simtrain.workload.program import STREAM, Key, OpTable, StreamKey

_DP = STREAM["dp"]


@dataclass(frozen=True)
class _Template:
    start: int  # id of the first op when it was captured
    mb: int  # the micro-batch it was captured from
    columns: tuple[Sequence[object], ...]  # per copied column of _COPIED: its values, in op order
    size: int  # ops
    not_own: tuple[int, ...]  # offsets of the ops that carry no micro-batch (-1)
    # what a copy rebases, as C ints laid end to end: per op its first dependency, per op its
    # second (each relative to the first op, or NONE, MORE), then per stream the offsets of its ops
    rel: np.ndarray
    rebased: np.ndarray  # 1 where ``rel`` holds an op (the first op's id is added), else 0; C ints
    more: tuple[tuple[int, tuple[int, ...]], ...]  # (op offset, its dependencies relative to the first op)
    key_of: tuple[int, ...]  # per op: 0 where it has no key, else 1 + the index of its key in ``key_parts``
    # their (stream, key[0], key[1], key[2] relative to the stream's counter)
    key_parts: tuple[tuple[int, str, int | tuple[int, ...], int], ...]
    counts: tuple[tuple[int, int], ...]  # (stream, collectives it numbered)
    streams: tuple[tuple[int, int, int], ...]  # (stream, where its offsets start and end in ``rel``), in bytes
    grads: tuple[tuple[tuple[int, int], int], ...]  # (stage, layer) -> offset of its last B or W op
    last: int | None  # offset of the op the next one waits for


class ActionTemplates:
    """Captures and instantiates action bodies for one lowering (see the module docstring)."""

    def __init__(self, em: Emitter, dp: DataParallelOps) -> None:
        self.em, self.dp = em, dp
        self._store: dict[tuple[int, str, int, bool], _Template] = {}  # (rank, pass, stage, receives)
        table = em.prog.ops  # its columns stay the same objects while they grow
        self._extend = tuple(getattr(table, c).extend for c in _COPIED)

    def emit(self, key: tuple[int, str, int, bool], rank: int, mb: int, settled: bool,
             body: Callable[[], int | None]) -> int | None:
        """The ops of ``body`` (an action's emission, returning what the next op waits for) for
        micro-batch ``mb``: instantiated from the template of ``key`` where one exists and the data-
        parallel state is ``settled``, else emitted and, where exact, captured."""
        if not settled:
            return body()
        tpl = self._store.get(key)
        if tpl is not None:
            return self._instantiate(tpl, rank, mb)
        prog, counters = self.em.prog, self.em._counters
        start = len(prog.ops)
        before = {s: counters.get((rank, s), 0) for s in range(len(STREAM))}
        self.dp.recorded = []
        try:
            last = body()
        finally:
            calls, self.dp.recorded = self.dp.recorded, None
        tpl = _capture(prog.ops, start, mb, last, before, counters, rank, calls)
        if tpl is not None:
            self._store[key] = tpl
        return last

    def _instantiate(self, tpl: _Template, rank: int, mb: int) -> int | None:
        """Append a copy of ``tpl``'s ops for ``rank`` and micro-batch ``mb`` (what
        :meth:`Program.append` does, op by op, column by column)."""
        em, prog = self.em, self.em.prog
        table = prog.ops
        base = len(table)
        n = tpl.size
        counters = em._counters
        now = {s: counters.get((rank, s), 0) for s, _ in tpl.counts}
        for s, count in tpl.counts:
            counters[(rank, s)] = now[s] + count
        table.rank.extend(array("i", [rank]) * n)
        for extend, values in zip(self._extend, tpl.columns):
            extend(values)
        mbs = array("i", [mb]) * n
        for offset in tpl.not_own:
            mbs[offset] = -1
        table.mb.extend(mbs)
        rebased = memoryview((tpl.rel + tpl.rebased * base).tobytes())  # one pass for every column below
        width = tpl.rel.itemsize * n
        table.dep0.frombytes(rebased[:width])
        table.dep1.frombytes(rebased[width:2 * width])
        for offset, ds in tpl.more:
            table.more[base + offset] = [base + d for d in ds]
        new: list[Key] = [(k0, k1, k2 + now[stream]) for stream, k0, k1, k2 in tpl.key_parts]
        if not em.keys_name_their_rank:  # (else each has one member: none to share, none to count)
            new = prog.shared_keys(new)
            members = prog.members  # the template's keys are distinct: counted in one pass
            members.update(zip(new, map((1).__add__, map(members.get, new, repeat(0)))))
        pool: list[Key | None] = [None]
        pool += new
        table.key.extend(map(pool.__getitem__, tpl.key_of))
        order = prog.order
        for stream, lo, hi in tpl.streams:
            queue = order.get((rank, stream))
            if queue is None:
                order[(rank, stream)] = queue = array("i")
            queue.frombytes(rebased[lo:hi])
        self.dp.grads_done([(layer, base + offset) for layer, offset in tpl.grads])
        return None if tpl.last is None else base + tpl.last


#: The columns a template copies as they are (rank, micro-batch, dependencies and keys are rebased).
_COPIED = ("stream", "kind", "name_code", "stage", "layer", "duration_s", "flops", "nbytes", "comm_code", "group_set", "peer",
           "peer_stage", "alloc", "free")


def _capture(table: OpTable, start: int, mb: int, last: int | None, before: dict[int, int],
             counters: dict[tuple[int, int], int], rank: int, calls: list[GradCall]) -> _Template | None:
    """The template of ops ``start:``, or None where copying them would not be exact."""
    end = len(table)
    if any(s == _DP for s in table.stream[start:end]) or any(m not in (mb, -1) for m in table.mb[start:end]):
        return None
    more = tuple((i - start, tuple(d - start for d in table.more[i])) for i in range(start, end) if i in table.more)
    dep0 = np.array([d - start if d >= 0 else d for d in table.dep0[start:end]], dtype=np.intc)
    dep1 = np.array([d - start if d >= 0 else d for d in table.dep1[start:end]], dtype=np.intc)
    if any(d < start for d in table.dep0[start:end] if d >= 0) or \
            any(d < start for d in table.dep1[start:end] if d >= 0) or any(d < 0 for _, ds in more for d in ds):
        return None
    keys: list[tuple[int, int, StreamKey]] = []
    for offset, (key, stream) in enumerate(zip(table.key[start:end], table.stream[start:end])):
        if key is not None:
            if len(key) != 3 or not isinstance(key[2], int):
                return None
            keys.append((offset, stream, (key[0], key[1], key[2] - before[stream])))
    if len({(st, k) for _, st, k in keys}) < len(keys):  # a copy counts its keys in one pass: distinct
        return None
    grads: dict[tuple[int, int], int] = {}
    for stage, layer, op_id, kind in calls:
        if kind in ("B", "W"):  # what grad_done keeps: the last weight-gradient op of each layer
            grads[(stage, layer)] = op_id - start
    counts = tuple((s, counters.get((rank, s), 0) - n) for s, n in before.items()
                   if counters.get((rank, s), 0) != n)
    by_stream: dict[int, list[int]] = {}
    for offset, s in enumerate(table.stream[start:end]):
        by_stream.setdefault(s, []).append(offset)
    size = end - start
    key_of = [0] * size
    for j, (offset, _, _) in enumerate(keys):
        key_of[offset] = 1 + j
    offsets = [np.array(o, dtype=np.intc) for o in by_stream.values()]
    rel = np.concatenate([dep0, dep1, *offsets]).astype(np.intc)
    cuts = np.cumsum([2 * size] + [len(o) for o in offsets]) * rel.itemsize  # where each stream's offsets start
    streams = tuple((s, int(lo), int(hi)) for s, lo, hi in zip(by_stream, cuts[:-1], cuts[1:]))
    rebased = np.concatenate([dep0 >= 0, dep1 >= 0, np.ones(len(rel) - 2 * size, dtype=bool)]).astype(np.intc)
    return _Template(start, mb, tuple(getattr(table, c)[start:end] for c in _COPIED), size,
                     tuple(k for k, m in enumerate(table.mb[start:end]) if m != mb), rel, rebased, more,
                     tuple(key_of), tuple((st, k0, k1, k2) for _, st, (k0, k1, k2) in keys), counts,
                     streams, tuple(grads.items()), None if last is None else last - start)
