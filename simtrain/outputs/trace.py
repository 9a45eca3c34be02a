"""Chrome trace-event JSON of a simulated step, for Perfetto (ui.perfetto.dev) or chrome://tracing.

Each rank is a process and each of its streams a thread (or, with ``group_by="node"``, each node a
process and each (rank, stream) a thread); each span is a complete ("X") event and each
point-to-point transfer a flow arrow from its send span to its receive span. Times are in
microseconds, as the format requires.

pids and tids start at 1, not 0: Perfetto treats pid 0 (the Linux idle task) specially. Use
:func:`rank_pid` / :func:`node_pid` to place extra tracks (:func:`counter_events`) on a process.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from simtrain import __version__
from simtrain.outputs.files import atomic_open
from simtrain.timeline import Timeline
from simtrain.workload.program import KINDS, STREAMS
from simtrain.units import US_PER_S

GROUP_BY = ("rank", "node")
_US = US_PER_S


def rank_pid(rank: int) -> int:
    """The trace pid of ``rank`` with ``group_by="rank"``."""
    return int(rank) + 1


def node_pid(node: int) -> int:
    """The trace pid of ``node`` with ``group_by="node"``."""
    return int(node) + 1


def stream_tid(stream: str, local_rank: int = 0) -> int:
    """The trace tid of ``stream`` (of the ``local_rank``-th GPU of a node when grouped by node)."""
    return int(local_rank) * len(STREAMS) + STREAMS.index(stream) + 1


def counter_events(name: str, pid: int, samples: Sequence[tuple[float, float]], *,
                   key: str = "value") -> list[dict]:
    """Counter ("C") events: one per ``(time_s, value)`` sample, a step track named ``name``.

    ``pid`` places the track on a process (see :func:`rank_pid`); Perfetto names the track
    ``"<name> <key>"``.
    """
    return [{"ph": "C", "name": name, "pid": int(pid), "ts": float(t) * _US,
             "args": {key: float(v)}} for t, v in samples]


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
            pid, tid = rank + 1, stream + 1
        else:
            pid, tid = rank // gpus_per_node + 1, (rank % gpus_per_node) * n_streams + stream + 1
        self.pid, self.tid = pid.tolist(), tid.tolist()
        self.rank, self.stream = rank.tolist(), stream.tolist()

        def rank_name(r: int) -> str:
            return labels.get(r, f"rank {r}")

        # metadata: processes, then threads, in (rank, stream) order
        self.meta: list[dict] = []
        seen_pids: set[int] = set()
        for r, s in sorted(set(zip(self.rank, self.stream))):
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
        self.name, self.kind = c["name"].tolist(), c["kind"].tolist()
        self.stage, self.layer, self.mb = c["stage"].tolist(), c["layer"].tolist(), c["mb"].tolist()
        # the same IEEE products as ``start * 1e6`` and ``(end - start) * 1e6`` on Python floats
        self.ts = (c["start_s"] * _US).tolist()
        self.dur = ((c["end_s"] - c["start_s"]) * _US).tolist()
        self.flops, self.bytes = c["flops"].tolist(), c["bytes"].tolist()
        self.finite = bool(np.all(np.isfinite(c["start_s"])) and np.all(np.isfinite(c["end_s"]))
                           and np.all(np.isfinite(c["flops"])) and np.all(np.isfinite(c["bytes"])))
        self.flows, unpaired = _flow_pairs(timeline)
        ends = timeline.step_ends()
        self.steps = [{"ph": "i", "s": "g", "name": f"end of step {k + 1}", "cat": "step", "pid": 0,
                       "tid": 0, "ts": t * _US} for k, t in enumerate(ends[:-1] if len(ends) > 1 else [])]
        self.other = {"generator": "simtrain", "version": __version__, "group_by": group_by,
                      "step_time_s": timeline.end_s, "spans": len(timeline),
                      "ranks": len(set(self.rank)), "flows": len(self.flows), "unpaired_flows": unpaired}
        if gpus_per_node is not None:
            self.other["gpus_per_node"] = int(gpus_per_node)

    def label(self, i: int) -> str:
        name = self.names[self.name[i]]
        return name if self.mb[i] < 0 else f"{name} mb{self.mb[i]}"

    def span_dicts(self) -> list[dict]:
        return [{"ph": "X", "name": self.label(i), "cat": KINDS[self.kind[i]], "pid": self.pid[i],
                 "tid": self.tid[i], "ts": self.ts[i], "dur": self.dur[i],
                 "args": {"stage": self.stage[i], "layer": self.layer[i], "mb": self.mb[i],
                          "flops": self.flops[i], "bytes": self.bytes[i]}}
                for i in range(len(self.ts))]

    def flow_dicts(self) -> list[dict]:
        out = []
        for fid, (si, ri) in self.flows.items():
            out.append({"ph": "s", "name": "pp", "cat": "pp", "id": fid, "pid": self.pid[si],
                        "tid": self.tid[si], "ts": self.ts[si]})
            out.append({"ph": "f", "bp": "e", "name": "pp", "cat": "pp", "id": fid, "pid": self.pid[ri],
                        "tid": self.tid[ri], "ts": self.ts[ri]})
        return out

    def span_texts(self) -> list[str]:
        """The spans' complete events as compact sorted-key JSON, formatted directly (the
        encoder's own rules: ``float.__repr__`` for floats, ASCII-escaped strings). FLOPs, bytes,
        kinds and labels repeat from span to span, so each distinct one is formatted once."""
        c = self.cols
        flops, nbytes = _each(c["flops"], _f), _each(c["bytes"], _f)
        cats = [_text(k) for k in KINDS]
        kind = [cats[k] for k in self.kind]
        mb = c["mb"].astype(np.int64)
        key = c["name"].astype(np.int64) * (int(mb.max(initial=0)) + 2) + mb + 1
        first = {}
        for k, nm, m in zip(key.tolist(), self.name, self.mb):
            if k not in first:
                first[k] = _text(self.names[nm] if m < 0 else f"{self.names[nm]} mb{m}")
        label = [first[k] for k in key.tolist()]
        return [f'{{"args":{{"bytes":{by},"flops":{fl},"layer":{ly},"mb":{m},"stage":{st}}},"cat":{k},'
                f'"dur":{dur!r},"name":{nm},"ph":"X","pid":{p},"tid":{t},"ts":{ts!r}}}'
                for nm, m, k, st, ly, p, t, ts, dur, fl, by in zip(
                    label, self.mb, kind, self.stage, self.layer, self.pid, self.tid, self.ts, self.dur,
                    flops, nbytes)]

    def flow_texts(self) -> list[str]:
        out = []
        for fid, (si, ri) in self.flows.items():
            out.append(_S % (fid, self.pid[si], self.tid[si], _f(self.ts[si])))
            out.append(_F % (fid, self.pid[ri], self.tid[ri], _f(self.ts[ri])))
        return out


_f = float.__repr__
_text = json.encoder.encode_basestring_ascii
_S = '{"cat":"pp","id":%d,"name":"pp","ph":"s","pid":%d,"tid":%d,"ts":%s}'
_F = '{"bp":"e","cat":"pp","id":%d,"name":"pp","ph":"f","pid":%d,"tid":%d,"ts":%s}'
_C = '{"args":{%s:%s},"name":%s,"ph":"C","pid":%d,"ts":%s}'
_C_KEYS = {"ph", "name", "pid", "ts", "args"}


def _each(values: np.ndarray, fmt) -> list[str]:
    """``fmt`` of every value, computed once per distinct value (by bit pattern, so that -0.0 and
    0.0 stay apart)."""
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.int64)
    uniq, inverse = np.unique(bits, return_index=False, return_inverse=True)
    texts = [fmt(v) for v in uniq.view(np.float64).tolist()]
    return [texts[i] for i in inverse.ravel().tolist()]


def _place(r: int, s: int, group_by: str, gpus_per_node: int | None) -> tuple[int, int]:
    if group_by == "rank":
        return rank_pid(r), s + 1
    return node_pid(r // gpus_per_node), (r % gpus_per_node) * len(STREAMS) + s + 1


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def _counter_text(e: dict, texts: dict[str, str]) -> str:
    """A counter event as :func:`counter_events` builds it, formatted directly; any other event
    through the JSON encoder."""
    if e.keys() == _C_KEYS and e["ph"] == "C" and type(e["pid"]) is int and type(e["ts"]) is float \
            and type(e["args"]) is dict and len(e["args"]) == 1 and type(e["name"]) is str:
        (key, value), = e["args"].items()
        if type(key) is str and type(value) is float and math.isfinite(value) and math.isfinite(e["ts"]):
            name = texts.get(e["name"])
            if name is None:
                name = texts[e["name"]] = _text(e["name"])
            return _C % (_text(key), _f(value), name, e["pid"], _f(e["ts"]))
    return _dumps(e)


def trace_events(timeline: Timeline, *, rank_labels: Mapping[int, str] | None = None,
                 group_by: str = "rank", gpus_per_node: int | None = None,
                 counters: Sequence[dict] = ()) -> dict:
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
    appended as they are.
    """
    parts = _Parts(timeline, rank_labels, group_by, gpus_per_node)
    events = parts.meta + parts.span_dicts() + parts.flow_dicts() + parts.steps + list(counters)
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
    if not parts.finite:  # NaN or infinity: the encoder's spelling of them
        spans = [_dumps(e) for e in parts.span_dicts()]
        flows = [_dumps(e) for e in parts.flow_dicts()]
    else:
        spans, flows = parts.span_texts(), parts.flow_texts()
    texts: dict[str, str] = {}
    head = f'{{"displayTimeUnit":"ms","otherData":{_dumps(parts.other)},"traceEvents":['
    with atomic_open(path) as fh:
        fh.write(head)
        first = True
        for chunk in ([_dumps(e) for e in parts.meta], spans, flows, [_dumps(e) for e in parts.steps],
                      [_counter_text(e, texts) for e in counters]):
            if chunk:
                fh.write(("" if first else ",") + ",".join(chunk))
                first = False
        fh.write("]}")
