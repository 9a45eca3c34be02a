"""The timeline of a simulated step: one span per operation a rank ran on one of its streams.

Spans are stored column-wise in numpy arrays (strings as small integer codes into name tables) so
that a timeline of millions of spans stays compact, and round-trip through JSON. The engine records
only (op id, start, end) per span; :func:`program_timeline` gathers the other columns from the
program's ops once, after the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from typing import Any

import numpy as np

from simtrain.workload.program import COMM_NONE, KINDS, STREAM, STREAMS, OpTable, Program
from simtrain.workload.vocab import Vocabulary

_INT_COLUMNS = ("rank", "stream", "kind", "name", "stage", "layer", "mb", "arrow")
_FLOAT_COLUMNS = ("start_s", "end_s", "flops", "bytes", "alloc_bytes", "free_bytes")

#: A column of recorded spans: a list the engine filled, or its numpy array.
Spans = Sequence[float] | np.ndarray


@dataclass(frozen=True)
class Span:
    """One operation as it ran. ``layer``, ``stage`` and ``mb`` are -1 where they do not apply.

    ``arrow`` links the two ends of a point-to-point transfer (the trace draws it as a flow arrow) (-1 otherwise); ``alloc_bytes`` is
    memory allocated when the span starts and ``free_bytes`` memory released when it ends.
    """

    rank: int
    stream: str
    kind: str
    name: str
    stage: int
    layer: int
    mb: int
    start_s: float
    end_s: float
    flops: float = 0.0
    bytes: float = 0.0
    arrow: int = -1
    alloc_bytes: float = 0.0
    free_bytes: float = 0.0

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass
class TimelineBuilder:
    """Collects spans during a run; :meth:`build` freezes them into a :class:`Timeline`."""

    vocabulary: Vocabulary[str] = field(default_factory=Vocabulary)
    rows: list[tuple[Any, ...]] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        """The span names, each at its code."""
        return self.vocabulary.values

    def name_id(self, name: str) -> int:
        """The code of span name ``name`` (a new one where it is new)."""
        return self.vocabulary.code(name)

    def add(self, rank: int, stream: int, kind: int, name: int, stage: int, layer: int, mb: int,
            start_s: float, end_s: float, flops: float = 0.0, nbytes: float = 0.0, arrow: int = -1,
            alloc_bytes: float = 0.0, free_bytes: float = 0.0) -> None:
        """Record a span; stream, kind and name are codes (indices into STREAMS, KINDS, names)."""
        self.rows.append((rank, stream, kind, name, stage, layer, mb, arrow,
                          start_s, end_s, flops, nbytes, alloc_bytes, free_bytes))

    def build(self) -> "Timeline":
        n = len(self.rows)
        cols: dict[str, np.ndarray] = {}
        if n:
            ints = np.array([r[:8] for r in self.rows], dtype=np.int64)
            floats = np.array([r[8:] for r in self.rows], dtype=np.float64)
        else:
            ints = np.zeros((0, 8), dtype=np.int64)
            floats = np.zeros((0, 6), dtype=np.float64)
        for i, c in enumerate(_INT_COLUMNS):
            cols[c] = ints[:, i].astype(np.int32)
        for i, c in enumerate(_FLOAT_COLUMNS):
            cols[c] = floats[:, i]
        # a stable order: by start time, then rank, stream and insertion
        order = np.lexsort((np.arange(n), cols["stream"], cols["rank"], cols["start_s"]))
        return Timeline({c: v[order] for c, v in cols.items()}, list(self.names))


class Timeline:
    """Column store of spans. ``cols`` maps column name to a numpy array of equal length."""

    def __init__(self, cols: dict[str, np.ndarray], names: list[str]):
        self.cols = cols
        self.names = names

    @classmethod
    def from_columns(cls, cols: dict[str, np.ndarray], names: list[str]) -> "Timeline":
        """The timeline of spans given column-wise in any order (``name`` codes index ``names``):
        sorted stably by start time, then rank, stream and the given order, with the names
        renumbered by first appearance in that order (so the codes do not depend on the order
        the spans were recorded in)."""
        order = span_order(cols["start_s"], cols["rank"], cols["stream"])
        out: dict[str, np.ndarray] = {c: np.asarray(cols[c])[order].astype(np.int32) for c in _INT_COLUMNS}
        out.update({c: np.asarray(cols[c], dtype=np.float64)[order] for c in _FLOAT_COLUMNS})
        return cls.from_sorted(out, names)

    @classmethod
    def from_sorted(cls, out: dict[str, np.ndarray], names: list[str]) -> "Timeline":
        """The timeline of columns already in :func:`span_order`, int32 and float64 as
        :meth:`from_columns` makes them: the names renumbered by first appearance."""
        name = out["name"]
        first = np.full(len(names), len(name), dtype=np.int64)  # each code's first span (none: past the end)
        np.minimum.at(first, name, np.arange(len(name)))  # (np.unique sorts every span: 20 times slower)
        used = np.flatnonzero(first < len(name))
        by_first = used[np.argsort(first[used], kind="stable")]
        code = np.zeros(len(names), dtype=np.int32)
        code[by_first] = np.arange(len(by_first), dtype=np.int32)
        out["name"] = code[out["name"]]
        return cls(out, [names[i] for i in by_first.tolist()])

    def __len__(self) -> int:
        return len(self.cols["rank"])

    def __getitem__(self, column: str) -> np.ndarray:
        return self.cols[column]

    @property
    def end_s(self) -> float:
        """The end of the last span: the step time."""
        return float(self.cols["end_s"].max()) if len(self) else 0.0

    @property
    def ranks(self) -> list[int]:
        """The ranks with spans, ascending."""
        return _present(self.cols["rank"])

    def step_ends(self) -> list[float]:
        """The end of each simulated step: the k-th optimizer step's latest end over the ranks
        (none without optimizer steps)."""
        c = self.cols
        opt = c["kind"] == KINDS.index("opt")
        ends, owner = c["end_s"][opt], c["rank"][opt]  # the optimizer spans alone: a few per rank
        per_rank = [np.sort(ends[owner == r]) for r in _present(owner)]
        per_rank = [e for e in per_rank if len(e)]
        if not per_rank:
            return []
        return [float(x) for x in np.max(np.vstack(per_rank), axis=0)]

    def window(self, start_s: float, end_s: float) -> "Timeline":
        """The spans that run between ``start_s`` and ``end_s``, clipped to it and shifted to start
        at 0 (one step of a run of several). A clipped span keeps the share of its FLOPs and bytes
        that ran inside; its allocation only if it starts inside, its release only if it ends
        inside."""
        c = self.cols
        keep = (c["end_s"] > start_s) & (c["start_s"] < end_s)
        s0, e0 = c["start_s"][keep], c["end_s"][keep]
        s1, e1 = np.maximum(s0, start_s), np.minimum(e0, end_s)
        length = e0 - s0
        share = np.divide(e1 - s1, length, out=np.ones_like(length), where=length > 0)
        cols = {k: v[keep] for k, v in c.items()}
        cols["start_s"], cols["end_s"] = s1 - start_s, e1 - start_s
        cols["flops"], cols["bytes"] = cols["flops"] * share, cols["bytes"] * share
        cols["alloc_bytes"] = np.where(s0 >= start_s, cols["alloc_bytes"], 0.0)
        cols["free_bytes"] = np.where(e0 <= end_s, cols["free_bytes"], 0.0)
        return Timeline(cols, list(self.names))

    def mask(self, *, rank: int | None = None, stream: str | None = None,
             kind: str | tuple[str, ...] | None = None) -> np.ndarray:
        m = np.ones(len(self), dtype=bool)
        if rank is not None:
            m &= self.cols["rank"] == rank
        if stream is not None:
            m &= self.cols["stream"] == STREAMS.index(stream)
        if kind is not None:
            kinds = (kind,) if isinstance(kind, str) else kind
            m &= np.isin(self.cols["kind"], [KINDS.index(k) for k in kinds])
        return m

    def span(self, i: int) -> Span:
        c = self.cols
        return Span(rank=int(c["rank"][i]), stream=STREAMS[c["stream"][i]], kind=KINDS[c["kind"][i]],
                    name=self.names[c["name"][i]], stage=int(c["stage"][i]), layer=int(c["layer"][i]),
                    mb=int(c["mb"][i]), start_s=float(c["start_s"][i]), end_s=float(c["end_s"][i]),
                    flops=float(c["flops"][i]), bytes=float(c["bytes"][i]), arrow=int(c["arrow"][i]),
                    alloc_bytes=float(c["alloc_bytes"][i]), free_bytes=float(c["free_bytes"][i]))

    def spans(self, mask: np.ndarray | None = None) -> list[Span]:
        idx = np.nonzero(mask)[0] if mask is not None else range(len(self))
        return [self.span(int(i)) for i in idx]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: column lists plus the string tables."""
        return {
            "streams": list(STREAMS), "kinds": list(KINDS), "names": list(self.names),
            "columns": {c: v.tolist() for c, v in self.cols.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Timeline":
        if list(data["streams"]) != list(STREAMS) or list(data["kinds"]) != list(KINDS):
            raise ValueError("timeline JSON was written with other stream or kind tables")
        cols = {}
        for c in _INT_COLUMNS:
            cols[c] = np.asarray(data["columns"][c], dtype=np.int32)
        for c in _FLOAT_COLUMNS:
            cols[c] = np.asarray(data["columns"][c], dtype=np.float64)
        return cls(cols, list(data["names"]))


def _present(values: np.ndarray) -> list[int]:
    """The distinct values of an integer column, ascending: counted where they are small and not
    negative (ranks: one pass), else sorted."""
    if not len(values):
        return []
    lo, hi = int(values.min()), int(values.max())
    present: list[int] = (np.flatnonzero(np.bincount(values, minlength=hi + 1)) if lo >= 0 and hi <= 4 * len(values) + 4096
                          else np.unique(values)).tolist()
    return present


def span_order(start_s: np.ndarray, rank: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """The order a timeline keeps its spans in: by start time, then rank, stream and the order
    given (rank and stream sort as one key).

    As ``np.lexsort((rank * streams + stream, start_s))``, in two stable sorts that are fast on
    what a run records: spans in the order they end, so nearly in order of start already. The
    first orders by start; the second orders runs of equal starts (an unfolded run's replicas
    start together) by rank and stream, as one integer key (the run's number, then the key)."""
    start = np.asarray(start_s, dtype=np.float64)
    lane = np.asarray(rank, dtype=np.int64) * len(STREAMS) + stream
    n = len(start)
    by_start = np.argsort(start, kind="stable")
    s = start[by_start]
    new = np.empty(n, dtype=bool)
    new[:1] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    if new.all():
        return by_start
    width = int(lane.max()) + 1 if n else 1
    if n * width >= 2**62 or int(lane.min()) < 0 or np.isnan(s[-1]):  # (no one 64-bit key; NaN sorts last)
        return np.lexsort((lane, start))
    run = np.cumsum(new, dtype=np.int64)
    run *= width
    run += lane[by_start]
    return by_start[np.argsort(run, kind="stable")]


def program_timeline(ops: OpTable, rows: Spans, starts: Spans, ends: Spans,
                     compute: np.ndarray | None = None) -> "Timeline":
    """The timeline of a run of ``ops`` from its recorded rows: ``rows[k]`` is the id of the op
    that ran from ``starts[k]`` to ``ends[k]``, or ``~i`` for the receiver's span of transfer ``i``
    (on the peer's ``pp_recv`` stream, of the stage it delivers to, named ``recv`` for ``send``).
    Both spans of a transfer carry its ``arrow`` id: transfers are numbered in the order they
    ended, those that ended together in program order. Only compute spans allocate and free
    memory (``compute``: per op, whether it is one, where the caller has it). The spans are put
    in :func:`span_order` first, so every other column is gathered from the program once,
    already in order."""
    n = len(ops)
    name = ops.column("name_code")
    names = {nm: code for code, nm in enumerate(ops.names.values)}
    idx = np.asarray(rows, dtype=np.int64)
    recv = idx < 0
    op_of = np.where(recv, ~idx, idx)
    start, end = np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64)
    rank = ops.column("rank")[op_of]
    stream = ops.column("stream")[op_of]
    where = np.nonzero(recv)[0]
    sent = op_of[where]
    rank[where] = ops.column("peer")[sent]
    stream[where] = STREAM["pp_recv"]
    order = span_order(start, rank, stream)
    ids = op_of[order]
    out: dict[str, np.ndarray] = {"rank": rank[order].astype(np.int32), "stream": stream[order].astype(np.int32)}
    for c in ("kind", "stage", "layer", "mb"):
        out[c] = ops.column(c)[ids].astype(np.int32)
    out["name"] = name[ids]
    arrow = np.full(n, -1, dtype=np.int32)
    if len(where):
        back = np.nonzero(recv[order])[0]  # the receivers' spans, in timeline order
        received = ids[back]
        out["stage"][back] = ops.column("peer_stage")[received]
        out["name"][back] = [names.setdefault(ops.name[i].replace("send", "recv"), len(names))
                             for i in received.tolist()]
        ended = np.lexsort((sent, end[where]))
        arrow[sent[ended]] = np.arange(len(sent), dtype=np.int32)
    out["arrow"] = arrow[ids]
    out["start_s"], out["end_s"] = start[order], end[order]
    out["flops"] = ops.column("flops")[ids]
    out["bytes"] = ops.column("nbytes")[ids]
    if compute is None:
        compute = ops.column("comm_code") == COMM_NONE
    alloc, free = ops.column("alloc"), ops.column("free")
    other = ~compute
    if alloc[other].any() or free[other].any():  # (the lowering gives memory to compute ops only)
        alloc, free = np.where(compute, alloc, 0.0), np.where(compute, free, 0.0)
    out["alloc_bytes"], out["free_bytes"] = alloc[ids], free[ids]
    return Timeline.from_sorted(out, list(names))


def check_spans(prog: Program, rows: Spans, starts: Spans, ends: Spans) -> None:
    """Raise AssertionError where the spans a run recorded for ``prog`` (as
    :func:`program_timeline` takes them) break an invariant of the engine: an op started before
    one of its dependencies ended, or a stream or a receiver's ``pp_recv`` ran two ops at once."""
    ops = prog.ops
    n = len(ops)
    idx = np.asarray(rows, dtype=np.int64)
    own = idx >= 0
    start, end = np.zeros(n), np.zeros(n)
    mine = idx[own]
    start[mine] = np.asarray(starts, dtype=np.float64)[own]
    end[mine] = np.asarray(ends, dtype=np.float64)[own]
    tol = 1e-12 * max(1.0, float(end.max(initial=0.0)))
    for src, dst in _dependency_pairs(ops):
        bad = np.flatnonzero(start[src] + tol < end[dst])
        if len(bad):
            i, d = int(src[bad[0]]), int(dst[bad[0]])
            raise AssertionError(f"dependency violated: {ops[i].label()} started before {ops[d].label()} ended")
    for op_ids in prog.order.values():
        s, e = start[op_ids], end[op_ids]
        if len(op_ids) > 1 and np.any(s[1:] + tol < e[:-1]):
            raise AssertionError("a stream ran two operations at once")
    recv = ~idx[~own]
    if len(recv):  # each receiver's transfers, by start time, must not overlap
        peers = ops.column("peer")[recv]
        order = np.lexsort((start[recv], peers))
        ids, peers = recv[order], peers[order]
        same = peers[1:] == peers[:-1]
        if np.any(same & (start[ids][1:] + tol < end[ids][:-1])):
            raise AssertionError("a pp_recv stream ran two transfers at once")


#: Ops per piece of a dependency column checked at once: its temporaries (a few arrays of this
#: many 8-byte values) stay small enough for the allocator to reuse their memory, where arrays of
#: an unfolded run's millions of ops would each take fresh pages from the system.
CHECK_PIECE = 1 << 19


def _dependency_pairs(ops: OpTable) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every (op, dependency) pair of ``ops``, as pairs of id arrays: the first dependencies, the
    second ones (in pieces of :data:`CHECK_PIECE` ops), those beyond two (each array made as it is
    checked: an unfolded run has millions)."""
    for column in ("dep0", "dep1"):
        deps = ops.column(column)
        for a in range(0, len(deps), CHECK_PIECE):
            piece = deps[a:a + CHECK_PIECE]
            src = np.flatnonzero(piece >= 0)
            yield src + a, piece[src]
    more = sorted(ops.more.items())
    yield (np.fromiter(chain.from_iterable([i] * len(ds) for i, ds in more), dtype=np.int64),
           np.fromiter(chain.from_iterable(ds for _, ds in more), dtype=np.int64))


def rank_columns(tl: Timeline, names: Iterable[str] | None = None) -> dict[int, dict[str, np.ndarray]]:
    """Each rank's spans as columns of their own (the columns ``names``, or all), from one stable
    sort by rank (masking the whole timeline once per rank costs time quadratic in the ranks of
    an unfolded run; gathering a column costs a pass over the timeline)."""
    c = tl.cols
    if len(c["rank"]) == 0:
        return {}
    order = np.argsort(c["rank"], kind="stable")
    ranks = c["rank"][order]
    cuts = np.flatnonzero(ranks[1:] != ranks[:-1]) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [len(ranks)]])
    cols = {k: c[k][order] for k in (c if names is None else names)}
    return {int(ranks[a]): {k: v[a:b] for k, v in cols.items()} for a, b in zip(starts, ends)}
