"""Chrome trace-event JSON of a simulated step, for Perfetto (ui.perfetto.dev) or chrome://tracing.

Each rank is a process and each of its streams a thread (or, with ``group_by="node"``, each node a
process and each (rank, stream) a thread); each span is a complete ("X") event and each
point-to-point transfer a flow arrow from its send span to its receive span. Times are in
microseconds, as the format requires, to the nanosecond: Perfetto keeps times as whole nanoseconds,
so a finer digit would be dropped when the trace is read. Starts and ends are each rounded to the
nearest nanosecond, so a span that holds another on the timeline holds it in the trace.

pids and tids start at 1, not 0: Perfetto treats pid 0 (the Linux idle task) specially. Use
:func:`rank_pid` / :func:`node_pid` to place extra tracks (:func:`counter_events`) on a process.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np

from simtrain import __version__
from simtrain.outputs.counters import Counter, CounterTrack, _counter_texts, _expanded, counter_events
from simtrain.outputs import trace_bytes
from simtrain.outputs.files import atomic_open
from simtrain.outputs.trace_text import (_F, _S, Texts, _dumps, _each_int_texts, _each_texts, _f, _gathered,
                                         _ns_texts, _text)
from simtrain.engine.timeline import Timeline
from simtrain.workload.program import KINDS, STREAMS
from simtrain.units import NS_PER_S, GiB

__all__ = ["GROUP_BY", "LINK_PID_BASE", "CounterTrack", "counter_events", "node_pid", "rank_pid", "run_counters",
           "stream_tid", "trace_events", "write_trace"]

GROUP_BY = ("rank", "node")
#: Complete events formatted, joined and written at a time by :func:`write_trace` (about 7 MB of
#: text): a trace of millions of spans is never held as one text.
CHUNK_EVENTS = 1 << 15


def rank_pid(rank: int) -> int:
    """The trace pid of ``rank`` with ``group_by="rank"``."""
    return int(rank) + 1


def node_pid(node: int) -> int:
    """The trace pid of ``node`` with ``group_by="node"``."""
    return int(node) + 1


def stream_tid(stream: str, local_rank: int = 0) -> int:
    """The trace tid of ``stream`` (of the ``local_rank``-th GPU of a node when grouped by node)."""
    return int(local_rank) * len(STREAMS) + STREAMS.index(stream) + 1


def _meta(name: str, pid: int, tid: int, value: str | int) -> dict:
    """A metadata event: ``*_name`` carries ``args.name``, ``*_sort_index`` ``args.sort_index``."""
    key = "name" if name.endswith("_name") else "sort_index"
    return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": {key: value}}


class _Parts:
    """The pieces of a trace, shared by :func:`trace_events` (dicts) and :func:`write_trace`
    (pre-formatted JSON text): metadata events, the span columns, flows and step marks."""

    def __init__(self, timeline: Timeline, rank_labels: Mapping[int, str] | None, group_by: str,
                 gpus_per_node: int | None):
        if group_by not in GROUP_BY:
            raise ValueError(f"group_by={group_by!r}: must be one of {GROUP_BY}")
        if group_by == "node" and (gpus_per_node is None or gpus_per_node < 1):
            raise ValueError("group_by='node' needs gpus_per_node >= 1")
        labels = dict(rank_labels or {})
        c = timeline.cols
        n_streams = len(STREAMS)
        rank, stream = c["rank"].astype(np.int64), c["stream"].astype(np.int64)
        if group_by == "rank":
            self.pid, self.tid = rank + 1, stream + 1
        else:
            self.pid = rank // gpus_per_node + 1
            self.tid = (rank % gpus_per_node) * n_streams + stream + 1

        def rank_name(r: int) -> str:
            return labels.get(r, f"rank {r}")

        # metadata: processes, then threads, in (rank, stream) order (0 <= stream < n_streams, so
        # the order of rank * n_streams + stream is that of the pairs)
        self.meta: list[dict] = []
        seen_pids: set[int] = set()
        pairs = np.unique(rank * n_streams + stream).tolist()
        for r, s in (divmod(k, n_streams) for k in pairs):
            p, t = _place(r, s, group_by, gpus_per_node)
            if p not in seen_pids:
                seen_pids.add(p)
                pname = rank_name(r) if group_by == "rank" else f"node {r // gpus_per_node}"
                self.meta.append(_meta("process_name", p, 0, pname))
                self.meta.append(_meta("process_sort_index", p, 0, p))
            tname = STREAMS[s] if group_by == "rank" else f"{rank_name(r)} {STREAMS[s]}"
            self.meta.append(_meta("thread_name", p, t, tname))
            self.meta.append(_meta("thread_sort_index", p, t, t))

        self.names = timeline.names
        self.cols = c
        # whole nanoseconds (as floats, which keep NaN and infinity), then microseconds
        self.ts_ns = np.rint(c["start_s"] * NS_PER_S)
        end_ns = np.rint(c["end_s"] * NS_PER_S)
        self.ts = self.ts_ns / 1000
        self.dur = (end_ns - self.ts_ns) / 1000
        self.finite = bool(np.all(np.isfinite(c["start_s"])) and np.all(np.isfinite(c["end_s"]))
                           and np.all(np.isfinite(c["flops"])) and np.all(np.isfinite(c["bytes"])))
        self.flows, unpaired = _flow_pairs(timeline)
        ends = timeline.step_ends()
        marks = (np.rint(np.asarray(ends[:-1], dtype=np.float64) * NS_PER_S) / 1000).tolist()
        self.steps = [{"ph": "i", "s": "g", "name": f"end of step {k + 1}", "cat": "step", "pid": 0,
                       "tid": 0, "ts": t} for k, t in enumerate(marks)]
        self.other = {"generator": "simtrain", "version": __version__, "group_by": group_by,
                      "step_time_s": timeline.end_s, "spans": len(timeline),
                      "ranks": len({k // n_streams for k in pairs}), "flows": len(self.flows),
                      "unpaired_flows": unpaired}
        if gpus_per_node is not None:
            self.other["gpus_per_node"] = int(gpus_per_node)

    def label(self, name: int, mb: int) -> str:
        """A span's event name: its name, then `` mb<k>`` when it has a micro-batch."""
        return self.names[name] if mb < 0 else f"{self.names[name]} mb{mb}"

    def span_dicts(self) -> list[dict]:
        c = self.cols
        return [{"ph": "X", "name": self.label(nm, m), "cat": KINDS[k], "pid": p, "tid": t, "ts": ts,
                 "dur": dur, "args": {"stage": st, "layer": ly, "mb": m, "flops": fl, "bytes": by}}
                for nm, m, k, p, t, ts, dur, st, ly, fl, by in zip(
                    c["name"].tolist(), c["mb"].tolist(), c["kind"].tolist(), self.pid.tolist(),
                    self.tid.tolist(), self.ts.tolist(), self.dur.tolist(), c["stage"].tolist(),
                    c["layer"].tolist(), c["flops"].tolist(), c["bytes"].tolist())]

    def flow_dicts(self) -> list[dict]:
        out = []
        pid, tid, ts = self.pid.tolist(), self.tid.tolist(), self.ts.tolist()
        for fid, (si, ri) in self.flows.items():
            out.append({"ph": "s", "name": "pp", "cat": "pp", "id": fid, "pid": pid[si],
                        "tid": tid[si], "ts": ts[si]})
            out.append({"ph": "f", "bp": "e", "name": "pp", "cat": "pp", "id": fid, "pid": pid[ri],
                        "tid": tid[ri], "ts": ts[ri]})
        return out

    def span_columns(self) -> tuple[list[Texts], np.ndarray]:
        """The spans' complete events as compact sorted-key JSON, cut into pieces that each depend
        on one column (or on name and micro-batch, or on pid and tid), each column's distinct
        pieces formatted once by the encoder's own rules (``float.__repr__`` for floats, ``str``
        for ints, ASCII-escaped strings); and the start times in whole nanoseconds, spelt last in
        each event, then ``}`` (and a comma between events)."""
        c = self.cols
        mb = c["mb"].astype(np.int64)
        mb_lo = min(int(mb.min()), 0)
        n_mb = int(mb.max()) - mb_lo + 1
        name_key = c["name"].astype(np.int64) * n_mb + (mb - mb_lo)
        tid_hi = int(self.tid.max()) + 1
        cats = [_text(k) for k in KINDS]
        columns = [
            _each_texts(c["bytes"], lambda v: '{"args":{"bytes":' + _f(v)),
            _each_texts(c["flops"], lambda v: ',"flops":' + _f(v)),
            _each_int_texts(c["layer"], lambda v: f',"layer":{v}'),
            _each_int_texts(mb, lambda v: f',"mb":{v}'),
            _each_int_texts(c["stage"], lambda v: f',"stage":{v}}},"cat":'),
            _each_int_texts(c["kind"], lambda v: cats[v] + ',"dur":'),
            _each_texts(self.dur, _f),
            _each_int_texts(name_key, lambda k: ',"name":' + _text(self.label(k // n_mb, k % n_mb + mb_lo))
                            + ',"ph":"X","pid":'),
            _each_int_texts(self.pid * tid_hi + self.tid, lambda k: f'{k // tid_hi},"tid":{k % tid_hi},"ts":'),
        ]
        return columns, self.ts_ns.astype(np.int64)

    def span_texts(self, chunk: int) -> Iterator[str]:
        """The spans' complete events (:meth:`span_columns`) separated by commas, in pieces of
        ``chunk`` events (each but the last ending in a comma). A piece of events is joined in
        one ``str.join``, so no text of the whole trace is ever held. Only the start times, mostly
        distinct, are spelt by numpy from their whole nanoseconds (:func:`_ns_texts`)."""
        n = len(self.ts)
        if not n:
            return
        columns, ts_ns = self.span_columns()
        step = len(columns) + 2  # the pieces of span i at i * step ..., its start, then "}," (the last: "}")
        for a in range(0, n, chunk):
            b = min(n, a + chunk)
            pieces: list[str | None] = [None] * ((b - a) * step)
            for j, col in enumerate(columns):
                pieces[j::step] = _gathered(col, a, b)
            pieces[len(columns)::step] = _gathered(_ns_texts(ts_ns[a:b]))
            pieces[len(columns) + 1::step] = ["},"] * (b - a)
            if b == n:
                pieces[-1] = "}"
            yield "".join(pieces)  # type: ignore[arg-type]  # (every place filled)

    def flow_texts(self) -> list[str]:
        out = []
        pid, tid, ts = self.pid.tolist(), self.tid.tolist(), self.ts.tolist()
        for fid, (si, ri) in self.flows.items():
            out.append(_S % (fid, pid[si], tid[si], _f(ts[si])))
            out.append(_F % (fid, pid[ri], tid[ri], _f(ts[ri])))
        return out


def _place(r: int, s: int, group_by: str, gpus_per_node: int | None) -> tuple[int, int]:
    if group_by == "rank":
        return rank_pid(r), s + 1
    return node_pid(r // gpus_per_node), (r % gpus_per_node) * len(STREAMS) + s + 1


def trace_events(timeline: Timeline, *, rank_labels: Mapping[int, str] | None = None,
                 group_by: str = "rank", gpus_per_node: int | None = None,
                 counters: Sequence[Counter] = ()) -> dict:
    """The Chrome trace-event JSON object of ``timeline``.

    ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`` with: process and
    thread name/sort-index metadata ("M"); one complete event ("X") per span, named
    ``"<span name> mb<k>"`` (no suffix when the span has no micro-batch), ``cat`` = kind, ``ts``
    and ``dur`` in microseconds, ``args`` = stage, layer, mb, flops, bytes; and for each
    non-negative ``flow`` id that has a span on ``pp_send`` and one on ``pp_recv``, a flow start
    ("s") at the send span's start and a flow end ("f", ``"bp": "e"``) at the receive span's
    start, both with ``cat`` "pp" and ``id`` = the flow id. Flow ids missing either end are
    counted in ``otherData["unpaired_flows"]``. A run of several steps has one global instant
    event ("i", ``"s": "g"``, ``cat`` "step") at the end of each step but the last.

    ``group_by="node"`` (needs ``gpus_per_node``) makes each node a process and each
    (rank, stream) a thread. ``counters`` are extra counter events (memory, link utilisation)
    appended as they are, a :class:`CounterTrack` as its events.
    """
    parts = _Parts(timeline, rank_labels, group_by, gpus_per_node)
    events = parts.meta + parts.span_dicts() + parts.flow_dicts() + parts.steps + _expanded(counters)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": parts.other}


def _flow_pairs(timeline: Timeline) -> tuple[dict[int, tuple[int, int]], int]:
    """Flow id -> (send span index, receive span index), and how many ids lack an end.

    The send end is the earliest span with that id on ``pp_send``, the receive end the earliest
    on ``pp_recv``.
    """
    flow = timeline["arrow"]
    has = np.nonzero(flow >= 0)[0]
    send_code, recv_code = STREAMS.index("pp_send"), STREAMS.index("pp_recv")
    sends: dict[int, int] = {}
    recvs: dict[int, int] = {}
    for i, f, s in zip(has.tolist(), flow[has].tolist(), timeline["stream"][has].tolist()):
        # spans are in start-time order, so the first one seen is the earliest
        if s == send_code:
            sends.setdefault(f, i)
        elif s == recv_code:
            recvs.setdefault(f, i)
    ids = sorted(set(flow[has].tolist()))
    pairs = {f: (sends[f], recvs[f]) for f in ids if f in sends and f in recvs}
    return pairs, len(ids) - len(pairs)


def write_trace(timeline: Timeline, path: str | os.PathLike, **kw) -> None:
    """Write :func:`trace_events` of ``timeline`` (``kw`` passed on) as compact, sorted JSON.

    The bytes are those of ``json.dumps(trace_events(...), sort_keys=True, separators=(",", ":"))``,
    but spans, flows and counter samples are formatted directly and streamed to the file (a trace of
    millions of events would spend most of its time in the generic encoder). The bytes depend only
    on the timeline and arguments; the file is written atomically (a temporary file in the same
    folder, then renamed into place).
    """
    counters = kw.pop("counters", ())
    parts = _Parts(timeline, kw.pop("rank_labels", None), kw.pop("group_by", "rank"),
                   kw.pop("gpus_per_node", None))
    if kw:
        raise TypeError(f"write_trace() got unexpected arguments {sorted(kw)}")
    spans: Iterable[str | memoryview]
    if not parts.finite:  # NaN or infinity: the encoder's spelling of them
        spans = [",".join(_dumps(e) for e in parts.span_dicts())]
        flows = [_dumps(e) for e in parts.flow_dicts()]
    elif trace_bytes.wanted(parts.ts_ns):  # a long trace: its events' bytes made by compiled code
        spans, flows = trace_bytes.span_bytes(*parts.span_columns(), CHUNK_EVENTS), parts.flow_texts()
    else:
        spans, flows = parts.span_texts(CHUNK_EVENTS), parts.flow_texts()
    sections: tuple[Iterable[str | memoryview], ...] = (
        [",".join(_dumps(e) for e in parts.meta)], spans, [",".join(flows)],
        [",".join(_dumps(e) for e in parts.steps)], [",".join(_counter_texts(counters))])
    head = f'{{"displayTimeUnit":"ms","otherData":{_dumps(parts.other)},"traceEvents":['
    with atomic_open(path, "wb") as fh:  # each piece encoded at once: a text file's encoder is slower
        fh.write(head.encode())
        wrote = False  # any event written: the next section's first piece follows a comma
        for section in sections:
            opened = False
            for text in section:
                if text:
                    if wrote and not opened:
                        fh.write(b",")
                    fh.write(text if isinstance(text, memoryview) else text.encode())
                    opened = wrote = True
        fh.write(b"]}")


#: Trace process ids of the link-utilisation tracks: the i-th link (in name order) is pid
#: ``LINK_PID_BASE + i``, above any rank's.
LINK_PID_BASE = 1_000_000


def run_counters(memory: Mapping[int, tuple[np.ndarray, np.ndarray]],
                 link_series: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> list[Counter]:
    """A run's counter tracks: each simulated rank's memory in use (GiB, on the rank's process)
    and each link's utilisation (flow fidelity; a process per link, named ``link <u->v>``)."""
    out: list[Counter] = [CounterTrack("memory", rank_pid(rank), np.asarray(t, dtype=np.float64),
                                       np.asarray(level, dtype=np.float64) / GiB, key="GiB")
                          for rank, (t, level) in sorted(memory.items())]
    for i, (link, (t, u)) in enumerate(sorted(link_series.items())):
        pid = LINK_PID_BASE + i
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"link {link}"}})
        out.append(CounterTrack(f"link {link}", pid, np.asarray(t, dtype=np.float64),
                                np.asarray(u, dtype=np.float64), key="utilisation"))
    return out
