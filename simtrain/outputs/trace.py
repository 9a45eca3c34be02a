"""Chrome trace-event JSON of a simulated step, for Perfetto (ui.perfetto.dev) or chrome://tracing.

Each rank is a process and each of its streams a thread (or, with ``group_by="node"``, each node a
process and each (rank, stream) a thread); each span is a complete ("X") event and each
point-to-point transfer a flow arrow from its send span to its receive span. Times are in
microseconds, as the format requires.

pids and tids start at 1, not 0: Perfetto treats pid 0 (the Linux idle task) specially. Use
:func:`rank_pid` / :func:`node_pid` to place extra tracks (:func:`counter_events`) on a process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

from simtrain import __version__
from simtrain.outputs.files import write_json_atomic
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
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by={group_by!r}: must be one of {GROUP_BY}")
    if group_by == "node" and (gpus_per_node is None or gpus_per_node < 1):
        raise ValueError("group_by='node' needs gpus_per_node >= 1")
    labels = dict(rank_labels or {})
    c = timeline.cols
    rank = c["rank"].tolist()
    stream = c["stream"].tolist()
    n_streams = len(STREAMS)

    def place(r: int, s: int) -> tuple[int, int]:
        if group_by == "rank":
            return rank_pid(r), s + 1
        return node_pid(r // gpus_per_node), (r % gpus_per_node) * n_streams + s + 1

    def rank_name(r: int) -> str:
        return labels.get(r, f"rank {r}")

    events: list[dict] = []
    # --- metadata: processes, then threads, in (rank, stream) order
    pairs = sorted(set(zip(rank, stream)))
    seen_pids: set[int] = set()
    for r, s in pairs:
        pid, tid = place(r, s)
        if pid not in seen_pids:
            seen_pids.add(pid)
            pname = rank_name(r) if group_by == "rank" else f"node {r // gpus_per_node}"
            events.append(_meta("process_name", pid, 0, pname))
            events.append(_meta("process_sort_index", pid, 0, pid))
        tname = STREAMS[s] if group_by == "rank" else f"{rank_name(r)} {STREAMS[s]}"
        events.append(_meta("thread_name", pid, tid, tname))
        events.append(_meta("thread_sort_index", pid, tid, tid))

    # --- one complete event per span
    names = timeline.names
    name = c["name"].tolist()
    kind = c["kind"].tolist()
    stage = c["stage"].tolist()
    layer = c["layer"].tolist()
    mb = c["mb"].tolist()
    start = c["start_s"].tolist()
    end = c["end_s"].tolist()
    flops = c["flops"].tolist()
    nbytes = c["bytes"].tolist()
    for i in range(len(timeline)):
        pid, tid = place(rank[i], stream[i])
        label = names[name[i]] if mb[i] < 0 else f"{names[name[i]]} mb{mb[i]}"
        events.append({
            "ph": "X", "name": label, "cat": KINDS[kind[i]], "pid": pid, "tid": tid,
            "ts": start[i] * _US, "dur": (end[i] - start[i]) * _US,
            "args": {"stage": stage[i], "layer": layer[i], "mb": mb[i], "flops": flops[i],
                     "bytes": nbytes[i]},
        })

    # --- flow arrows: send span -> receive span
    flows, unpaired = _flow_pairs(timeline)
    for fid, (si, ri) in flows.items():
        spid, stid = place(rank[si], stream[si])
        rpid, rtid = place(rank[ri], stream[ri])
        events.append({"ph": "s", "name": "pp", "cat": "pp", "id": fid, "pid": spid, "tid": stid,
                       "ts": start[si] * _US})
        events.append({"ph": "f", "bp": "e", "name": "pp", "cat": "pp", "id": fid, "pid": rpid,
                       "tid": rtid, "ts": start[ri] * _US})

    ends = timeline.step_ends()
    for k, t in enumerate(ends[:-1] if len(ends) > 1 else []):  # step boundaries of a multi-step run
        events.append({"ph": "i", "s": "g", "name": f"end of step {k + 1}", "cat": "step", "pid": 0,
                       "tid": 0, "ts": t * _US})

    events.extend(counters)  # counter tracks ("C" events) built by counter_events()

    other = {"generator": "simtrain", "version": __version__, "group_by": group_by,
             "step_time_s": timeline.end_s, "spans": len(timeline),
             "ranks": len(set(rank)), "flows": len(flows), "unpaired_flows": unpaired}
    if gpus_per_node is not None:
        other["gpus_per_node"] = int(gpus_per_node)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


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

    The bytes depend only on the timeline and arguments; the file is written atomically (a
    temporary file in the same folder, then renamed into place).
    """
    write_json_atomic(trace_events(timeline, **kw), path)
