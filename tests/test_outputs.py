"""Tests of the Gantt chart and Chrome-trace outputs on small hand-built timelines."""

from __future__ import annotations

import json
import struct
from collections import Counter

import pytest

from simtrain.outputs.colors import KIND_COLOURS, KIND_LABELS, lighten, text_colour
from simtrain.outputs.gantt import draw_gantt, gantt_rows, plan_rows
from simtrain.outputs.trace import counter_events, rank_pid, trace_events, write_trace
from simtrain.timeline import TimelineBuilder
from simtrain.units import MS
from simtrain.workload.program import KINDS, STREAMS

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _add(b: TimelineBuilder, rank, stream, kind, name, start, end, *, stage=0, layer=-1, mb=-1,
         flow=-1, flops=0.0, nbytes=0.0):
    b.add(rank, STREAMS.index(stream), KINDS.index(kind), b.name_id(name), stage, layer, mb,
          start, end, flops=flops, nbytes=nbytes, flow=flow)


def two_rank_timeline():
    """Two pipeline stages: F/B/I/W on compute, a TP collective, and two flows (F out, B back)."""
    b = TimelineBuilder()
    ms = MS
    for mb in range(2):
        _add(b, 0, "compute", "F", "attn.F", mb * 2 * ms, (mb * 2 + 1.5) * ms, mb=mb, layer=0,
             flops=1e12)
        _add(b, 0, "tp", "tp", "attn.allreduce", (mb * 2 + 1.5) * ms, (mb * 2 + 1.8) * ms, mb=mb,
             nbytes=4e6)
        _add(b, 0, "pp_send", "pp", "send.act", (mb * 2 + 1.8) * ms, (mb * 2 + 2.2) * ms, mb=mb,
             flow=mb, nbytes=8e6)
        _add(b, 1, "pp_recv", "pp", "recv.act", (mb * 2 + 1.8) * ms, (mb * 2 + 2.2) * ms, mb=mb,
             stage=1, flow=mb, nbytes=8e6)
        _add(b, 1, "compute", "F", "attn.F", (mb * 2 + 2.2) * ms, (mb * 2 + 3.7) * ms, mb=mb,
             stage=1, layer=1)
    _add(b, 1, "compute", "I", "attn.I", 6.0 * ms, 8.0 * ms, mb=0, stage=1, layer=1)
    _add(b, 1, "pp_send", "pp", "send.grad", 8.0 * ms, 8.4 * ms, mb=0, stage=1, flow=7)
    _add(b, 0, "pp_recv", "pp", "recv.grad", 8.0 * ms, 8.4 * ms, mb=0, flow=7)
    _add(b, 1, "compute", "W", "attn.W", 8.0 * ms, 9.5 * ms, mb=0, stage=1, layer=1)
    _add(b, 0, "compute", "B", "attn.B", 8.4 * ms, 11.0 * ms, mb=0, layer=0)
    return b.build()


def many_rank_timeline(n_ranks: int, streams=("compute", "tp")):
    b = TimelineBuilder()
    for r in range(n_ranks):
        for s in streams:
            kind = "F" if s == "compute" else s[:2]
            _add(b, r, s, kind, f"{s}.op", r * 1e-4, r * 1e-4 + 1e-3, mb=r % 4)
    return b.build()


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    width, height = struct.unpack(">II", data[16:24])
    return width, height


# ---------------------------------------------------------------- rows


def test_rows_ordered_by_rank_then_stream_order():
    tl = two_rank_timeline()
    assert gantt_rows(tl, False, None, None, 64) == [
        (0, "compute"), (0, "tp"), (0, "pp_send"), (0, "pp_recv"),
        (1, "compute"), (1, "pp_send"), (1, "pp_recv"),
    ]


def test_rows_textbook_one_per_rank_and_filters():
    tl = two_rank_timeline()
    assert gantt_rows(tl, True, None, None, 64) == [(0, "compute"), (1, "compute")]
    assert gantt_rows(tl, False, [1], None, 64) == [(1, "compute"), (1, "pp_send"), (1, "pp_recv")]
    assert gantt_rows(tl, False, None, ["tp", "compute"], 64) == [
        (0, "compute"), (0, "tp"), (1, "compute")]
    with pytest.raises(ValueError):
        gantt_rows(tl, False, None, ["nvlink"], 64)


def test_representative_subset_when_rows_exceed_max():
    tl = many_rank_timeline(100)  # 200 rows
    plan = plan_rows(tl, False, None, None, 20)
    ranks = plan.shown_ranks
    assert plan.subsampled and plan.total_rows == 200 and plan.total_ranks == 100
    assert len(plan.rows) <= 20 and len(ranks) == 10
    assert ranks[0] == 0 and ranks[-1] == 99
    gaps = [b - a for a, b in zip(ranks, ranks[1:])]
    assert max(gaps) - min(gaps) <= 1  # evenly spaced
    assert plan.rows == [(r, s) for r in ranks for s in ("compute", "tp")]

    textbook = gantt_rows(tl, True, None, None, 7)
    assert [r for r, _ in textbook] == [0, 16, 33, 50, 66, 82, 99]
    assert gantt_rows(tl, True, None, None, 100) == [(r, "compute") for r in range(100)]
    assert not plan_rows(tl, True, None, None, 100).subsampled
    with pytest.raises(ValueError):
        gantt_rows(tl, False, None, None, 0)


# ---------------------------------------------------------------- drawing


def test_png_signature_and_height_grows_with_rows(tmp_path):
    tl = two_rank_timeline()
    one, two, full = tmp_path / "one.png", tmp_path / "two.png", tmp_path / "full.png"
    draw_gantt(tl, one, ranks=[0], streams=["compute"])
    draw_gantt(tl, two, textbook=True, title="textbook")
    draw_gantt(tl, full, rank_labels={0: "stage 0", 1: "stage 1"})
    (w1, h1), (w2, h2), (w3, h3) = png_size(one), png_size(two), png_size(full)
    assert w1 == w2 == w3
    assert h1 < h2 < h3
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write left no temporary behind


def test_textbook_height_matches_one_row_per_rank(tmp_path):
    tl = two_rank_timeline()
    textbook, compute_only = tmp_path / "t.png", tmp_path / "c.png"
    draw_gantt(tl, textbook, textbook=True)
    draw_gantt(tl, compute_only, streams=["compute"])
    assert png_size(textbook)[1] == png_size(compute_only)[1]


def test_svg_output(tmp_path):
    path = tmp_path / "g.svg"
    draw_gantt(two_rank_timeline(), path, textbook=True)
    text = path.read_text()
    assert "<svg" in text


def test_subset_is_drawn_and_capped(tmp_path):
    tl = many_rank_timeline(100)
    capped, small = tmp_path / "capped.png", tmp_path / "small.png"
    draw_gantt(tl, capped, max_rows=8)
    draw_gantt(many_rank_timeline(4), small)  # 8 rows, no subset
    assert png_size(capped)[1] == png_size(small)[1]


def test_unknown_suffix_raises(tmp_path):
    with pytest.raises(ValueError, match="suffix"):
        draw_gantt(two_rank_timeline(), tmp_path / "g.jpg")
    assert not list(tmp_path.iterdir())


def test_empty_timeline_draws(tmp_path):
    path = tmp_path / "empty.png"
    draw_gantt(TimelineBuilder().build(), path)
    assert path.read_bytes()[:8] == PNG_SIGNATURE


# ---------------------------------------------------------------- trace


def test_every_kind_has_a_colour_and_a_label():
    assert set(KIND_COLOURS) == set(KINDS) == set(KIND_LABELS)
    assert lighten("#4477AA", 0.0) == pytest.approx((0x44 / 255, 0x77 / 255, 0xAA / 255))
    assert lighten("#000000", 1.0) == (1.0, 1.0, 1.0)
    assert text_colour((1.0, 1.0, 1.0)) == "black" and text_colour((0.0, 0.0, 0.0)) == "white"


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
    _add(b, 0, "pp_send", "pp", "send", 0.0, 1e-3, flow=3)
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
