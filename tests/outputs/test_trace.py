"""Chrome traces of small hand-built timelines: complete events and metadata, flows from send to
receive, grouping by node, deterministic files, counters."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from helpers import add_span, two_rank_timeline
from simtrain.outputs.trace import counter_events, rank_pid, trace_events, write_trace
from simtrain.timeline import TimelineBuilder
from simtrain.workload.program import STREAMS


def test_trace_events_complete_events_and_metadata():
    tl = two_rank_timeline()
    trace = json.loads(json.dumps(trace_events(tl, rank_labels={1: "stage 1"})))
    events = trace["traceEvents"]
    assert trace["displayTimeUnit"] == "ms"
    xs = [e for e in events if e["ph"] == "X"]
    assert len(xs) == len(tl)
    for i, e in enumerate(xs):
        span = tl.span(i)
        assert e["ts"] == span.start_s * 1e6
        assert e["dur"] == (span.end_s - span.start_s) * 1e6
        assert e["cat"] == span.kind
        assert e["name"] == (f"{span.name} mb{span.mb}" if span.mb >= 0 else span.name)
        assert e["pid"] == rank_pid(span.rank)
        assert e["tid"] == STREAMS.index(span.stream) + 1
        assert e["args"] == {"stage": span.stage, "layer": span.layer, "mb": span.mb,
                             "flops": span.flops, "bytes": span.bytes}
    assert xs[0]["name"] == "attn.F mb0"

    meta = [e for e in events if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert procs == {1: "rank 0", 2: "stage 1"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert threads[(1, 1)] == "compute" and threads[(2, 6)] == "pp_recv"
    assert len(threads) == len({(e["pid"], e["tid"]) for e in xs})
    sort = {(e["pid"], e["tid"]): e["args"]["sort_index"] for e in meta
            if e["name"] == "thread_sort_index"}
    assert sort.keys() == threads.keys()


def test_trace_flows_pair_send_and_receive():
    tl = two_rank_timeline()
    events = trace_events(tl)["traceEvents"]
    starts = [e for e in events if e["ph"] == "s"]
    finishes = [e for e in events if e["ph"] == "f"]
    assert Counter(e["id"] for e in starts) == Counter({0: 1, 1: 1, 7: 1})
    assert Counter(e["id"] for e in finishes) == Counter({0: 1, 1: 1, 7: 1})
    by_id = {e["id"]: e for e in finishes}
    for s in starts:
        f = by_id[s["id"]]
        assert s["cat"] == f["cat"] == "pp" and f["bp"] == "e"
        assert s["tid"] == STREAMS.index("pp_send") + 1
        assert f["tid"] == STREAMS.index("pp_recv") + 1
        assert s["pid"] != f["pid"]
    assert by_id[7]["pid"] == rank_pid(0) and by_id[0]["pid"] == rank_pid(1)
    # each flow end lies inside a slice on its own track
    xs = [e for e in events if e["ph"] == "X"]
    for e in starts + finishes:
        assert any(x["pid"] == e["pid"] and x["tid"] == e["tid"]
                   and x["ts"] <= e["ts"] <= x["ts"] + x["dur"] for x in xs)


def test_trace_unpaired_flow_is_skipped():
    b = TimelineBuilder()
    add_span(b, 0, "pp_send", "pp", "send", 0.0, 1e-3, arrow=3)
    trace = trace_events(b.build())
    assert not [e for e in trace["traceEvents"] if e["ph"] in "sf"]
    assert trace["otherData"]["unpaired_flows"] == 1


def test_trace_group_by_node():
    tl = two_rank_timeline()
    events = trace_events(tl, group_by="node", gpus_per_node=2)["traceEvents"]
    assert {e["pid"] for e in events if e["ph"] == "X"} == {1}
    procs = [e["args"]["name"] for e in events if e["name"] == "process_name"]
    assert procs == ["node 0"]
    threads = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads[1] == "rank 0 compute"
    assert threads[len(STREAMS) + 1] == "rank 1 compute"
    with pytest.raises(ValueError):
        trace_events(tl, group_by="node")
    with pytest.raises(ValueError):
        trace_events(tl, group_by="pod")


def test_write_trace_is_deterministic(tmp_path):
    tl = two_rank_timeline()
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_trace(tl, a, rank_labels={0: "stage 0"})
    write_trace(tl, b, rank_labels={0: "stage 0"})
    assert a.read_bytes() == b.read_bytes()
    assert json.loads(a.read_text())["otherData"]["spans"] == len(tl)
    expected = json.dumps(trace_events(tl, rank_labels={0: "stage 0"}), sort_keys=True,
                          separators=(",", ":"))
    assert a.read_text(encoding="utf-8") == expected
    assert not list(tmp_path.glob(".*.tmp"))


def test_counter_events():
    evs = counter_events("memory", rank_pid(3), [(0.0, 1.0), (2e-3, 5.0)])
    assert evs == [
        {"ph": "C", "name": "memory", "pid": 4, "ts": 0.0, "args": {"value": 1.0}},
        {"ph": "C", "name": "memory", "pid": 4, "ts": 2e-3 * 1e6, "args": {"value": 5.0}},
    ]
