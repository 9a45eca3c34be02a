"""Chrome traces of small hand-built timelines: complete events and metadata, flows from send to
receive, grouping by node, deterministic files, counters."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from helpers import add_span, awkward_timeline, two_rank_timeline
from simtrain.outputs.trace import counter_events, rank_pid, trace_events, write_trace
from simtrain.engine.timeline import TimelineBuilder
from simtrain.workload.program import STREAMS

pytestmark = pytest.mark.quick


def test_trace_events_complete_events_and_metadata():
    tl = two_rank_timeline()
    trace = json.loads(json.dumps(trace_events(tl, rank_labels={1: "stage 1"})))
    events = trace["traceEvents"]
    assert trace["displayTimeUnit"] == "ms"
    xs = [e for e in events if e["ph"] == "X"]
    assert len(xs) == len(tl)
    for i, e in enumerate(xs):
        span = tl.span(i)
        # microseconds to the nanosecond: start and end each rounded to whole nanoseconds
        assert e["ts"] == round(span.start_s * 1e9) / 1000
        assert e["dur"] == (round(span.end_s * 1e9) - round(span.start_s * 1e9)) / 1000
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


@pytest.mark.parametrize("group_by", ["rank", "node"])
def test_written_trace_is_the_encoders_json_byte_for_byte(tmp_path, group_by):
    """The directly formatted file equals ``json.dumps(..., sort_keys=True)`` of the event dicts,
    counters included (those of counter_events and any other shape), and parses back."""
    import numpy as np

    tl = awkward_timeline()
    counters = counter_events("memory \u00b5", rank_pid(0), [(0.0, 1.0), (1e-7, -0.0), (0.25, 1e300)], key="GiB")
    counters += [{"ph": "M", "name": "process_name", "pid": 1_000_000, "tid": 0, "args": {"name": "link a->b"}},
                 {"ph": "C", "name": "odd", "pid": 2, "ts": 1.0, "args": {"value": np.float64(0.5)}},
                 {"ph": "C", "name": "two", "pid": 2, "ts": 2.0, "args": {"a": 1.0, "b": 2.0}}]
    kw = dict(rank_labels={1: "stage \u00e9"}, group_by=group_by, counters=counters)
    if group_by == "node":
        kw["gpus_per_node"] = 2
    path = tmp_path / "t.json"
    write_trace(tl, path, **kw)
    expected = json.dumps(trace_events(tl, **kw), sort_keys=True, separators=(",", ":"))
    assert path.read_text(encoding="utf-8") == expected
    trace = json.loads(path.read_text(encoding="utf-8"))
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert xs[0]["name"] == 'attn "q" \u00e9\u4e2d mb3' and str(xs[0]["args"]["flops"]) == "-0.0"
    assert xs[0]["args"]["bytes"] == 1e22 and xs[0]["dur"] == 0.1
    assert [e["name"] for e in trace["traceEvents"] if e["ph"] == "i"] == ["end of step 1"]


def test_a_trace_written_a_few_events_at_a_time_has_the_same_bytes(tmp_path, monkeypatch):
    """The spans go to the file CHUNK_EVENTS at a time; pieces of one, two or three events (the
    last piece short or full) give the bytes of the encoder's JSON all the same."""
    from simtrain.outputs import trace

    tl = awkward_timeline()
    expected = json.dumps(trace_events(tl), sort_keys=True, separators=(",", ":"))
    for chunk in (1, 2, 3, len(tl), len(tl) + 5):
        monkeypatch.setattr(trace, "CHUNK_EVENTS", chunk)
        write_trace(tl, tmp_path / "t.json")
        assert (tmp_path / "t.json").read_text(encoding="utf-8") == expected, chunk


def test_trace_times_are_whole_nanoseconds_and_keep_spans_nested(tmp_path):
    """Times finer than a nanosecond are rounded, start and end each, so a span inside another on
    the timeline is inside it in the file too; the text is that of the encoder."""
    b = TimelineBuilder()
    add_span(b, 0, "compute", "F", "outer", 1.0000000004, 1.0000000016)
    add_span(b, 0, "compute", "F", "inner", 1.0000000006, 1.0000000014)
    tl = b.build()
    write_trace(tl, tmp_path / "t.json")
    text = (tmp_path / "t.json").read_text(encoding="utf-8")
    assert text == json.dumps(trace_events(tl), sort_keys=True, separators=(",", ":"))
    xs = {e["name"]: e for e in json.loads(text)["traceEvents"] if e["ph"] == "X"}
    assert (xs["outer"]["ts"], xs["outer"]["dur"]) == (1000000.0, 0.002)
    assert (xs["inner"]["ts"], xs["inner"]["dur"]) == (1000000.001, 0.0)
    assert xs["outer"]["ts"] <= xs["inner"]["ts"] <= xs["inner"]["ts"] + xs["inner"]["dur"] \
        <= xs["outer"]["ts"] + xs["outer"]["dur"]


def test_written_trace_spells_non_finite_numbers_as_the_encoder_does(tmp_path):
    b = TimelineBuilder()
    add_span(b, 0, "compute", "F", "attn.F", 0.0, 1.0, flops=float("nan"), nbytes=float("inf"))
    tl = b.build()
    write_trace(tl, tmp_path / "t.json")
    text = (tmp_path / "t.json").read_text(encoding="utf-8")
    assert text == json.dumps(trace_events(tl), sort_keys=True, separators=(",", ":"))
    assert '"bytes":Infinity,"flops":NaN' in text


def _wide_ranging_timeline():
    """Spans whose columns take many distinct values (times, FLOPs, bytes) or far-apart ones
    (layers), none with a micro-batch, on eight ranks."""
    b = TimelineBuilder()
    for i in range(1500):
        add_span(b, i % 8, STREAMS[i % 3], "F" if i % 3 == 0 else "tp", f"op{i % 11}", i * 1.1e-4,
                 i * 1.1e-4 + (i % 97 + 1) * 1.3e-6, layer=(i % 4) * 1_000_000 - 1, flops=i * 0.37,
                 nbytes=float(i % 5) ** 7 / 3.0)
    return b.build()


@pytest.mark.parametrize("group_by", ["rank", "node"])
def test_wide_ranging_columns_write_the_encoders_json(tmp_path, group_by):
    tl = _wide_ranging_timeline()
    kw = {"group_by": group_by} | ({"gpus_per_node": 4} if group_by == "node" else {})
    write_trace(tl, tmp_path / "t.json", **kw)
    expected = json.dumps(trace_events(tl, **kw), sort_keys=True, separators=(",", ":"))
    assert (tmp_path / "t.json").read_text(encoding="utf-8") == expected
    processes = 2 if group_by == "node" else 8
    assert len(json.loads(expected)["traceEvents"]) == 1500 + 2 * 24 + 2 * processes  # spans, threads, processes


def test_counters_of_other_shapes_go_through_the_encoder(tmp_path):
    """Counter-like events the direct formatting must not take: non-finite samples or times, a
    bool pid, an int sample, an extra or a missing key; each is written as the encoder writes it."""
    tl = two_rank_timeline()
    good = counter_events("mem", 1, [(1e-3, 2.0)])[0]
    odd = [dict(good, args={"value": float("nan")}), dict(good, ts=float("inf")), dict(good, pid=True),
           dict(good, args={"value": 3}), dict(good, cat="x"), {k: v for k, v in good.items() if k != "ts"},
           dict(good, name="mem \u00b5"), good]
    write_trace(tl, tmp_path / "t.json", counters=odd)
    text = (tmp_path / "t.json").read_text(encoding="utf-8")
    assert text == json.dumps(trace_events(tl, counters=odd), sort_keys=True, separators=(",", ":"))
    assert '"args":{"value":NaN}' in text and '"pid":true' in text and '"value":3}' in text


def test_empty_and_micro_batchless_timelines_write_the_encoders_json(tmp_path):
    b = TimelineBuilder()
    add_span(b, 0, "compute", "opt", "optimizer", 0.0, 1e-3)
    add_span(b, 2, "dp", "dp", "grads", 1e-3, 2e-3, layer=-1)
    for tl in (TimelineBuilder().build(), b.build()):
        write_trace(tl, tmp_path / "t.json", counters=counter_events("m", 1, [(0.0, 1.0)]))
        expected = json.dumps(trace_events(tl, counters=counter_events("m", 1, [(0.0, 1.0)])),
                              sort_keys=True, separators=(",", ":"))
        assert (tmp_path / "t.json").read_text(encoding="utf-8") == expected
    assert '"name":"grads","ph":"X","pid":3,"tid":7' in expected


@pytest.mark.quick
def test_a_counter_track_writes_the_bytes_of_its_events(tmp_path):
    """A track given as columns (equal times, repeated and signed-zero values, a huge one, an empty
    track, and one with a NaN the encoder spells) writes what its event dicts write."""
    import numpy as np

    from simtrain.outputs.trace import CounterTrack

    tl = awkward_timeline()
    tracks = [CounterTrack("memory \u00b5", rank_pid(0), np.array([0.0, 1e-7, 1e-7, 0.25, 0.3]),
                           np.array([1.0, -0.0, 0.0, 1e300, 1.0]), key="GiB"),
              CounterTrack("empty", 3, np.zeros(0), np.zeros(0)),
              CounterTrack("link a->b", 1_000_000, np.array([0.0, 1.0]), np.array([0.5, float("nan")]),
                           key="utilisation")]
    events = [e for t in tracks for e in t.events()]
    write_trace(tl, tmp_path / "tracks.json", counters=tracks)
    write_trace(tl, tmp_path / "events.json", counters=events)
    assert (tmp_path / "tracks.json").read_bytes() == (tmp_path / "events.json").read_bytes()
    dumped = [json.dumps(trace_events(tl, counters=c), sort_keys=True) for c in (tracks, events)]
    assert dumped[0] == dumped[1]  # NaN != NaN: compare the texts
