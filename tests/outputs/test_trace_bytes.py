"""The trace's events as bytes from the compiled fill: the same bytes as the text's path and the
encoder's JSON, in chunks of any size; used only on long traces within the fill's range."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simtrain.outputs import trace, trace_bytes
from simtrain.outputs.trace import trace_events, write_trace

from helpers import awkward_timeline

pytestmark = pytest.mark.quick


@pytest.mark.parametrize("group_by", ["rank", "node"])
@pytest.mark.parametrize("chunk", [1, 2, 4, 6, 10])
def test_the_bytes_are_the_texts(chunk, group_by):
    parts = trace._Parts(awkward_timeline(), {1: "stage \u00e9"}, group_by, 1 if group_by == "node" else None)
    columns, ts_ns = parts.span_columns()
    got = [bytes(v) for v in trace_bytes.span_bytes(columns, ts_ns, chunk)]
    assert got == [t.encode() for t in parts.span_texts(chunk)]


def test_a_trace_written_through_the_fill_is_the_encoders_json(tmp_path, monkeypatch):
    tl = awkward_timeline()
    monkeypatch.setattr(trace_bytes, "wanted", lambda ts_ns: True)
    monkeypatch.setattr(trace, "CHUNK_EVENTS", 4)
    write_trace(tl, tmp_path / "t.json", rank_labels={1: "r"})
    text = (tmp_path / "t.json").read_text(encoding="utf-8")
    assert text == json.dumps(trace_events(tl, rank_labels={1: "r"}), sort_keys=True, separators=(",", ":"))


def test_the_fill_writes_long_traces_in_its_range_only(monkeypatch):
    saved = {"yes": False}
    monkeypatch.setattr(trace_bytes.FILL.fill, "saved", lambda args: saved["yes"])
    short = np.arange(trace_bytes.MIN_SPANS - 1, dtype=np.float64)
    mid = np.arange(trace_bytes.MIN_SPANS, dtype=np.float64)
    long = np.arange(trace_bytes.BUILD_MIN_SPANS, dtype=np.float64)
    assert not trace_bytes.wanted(short) and not trace_bytes.wanted(mid) and trace_bytes.wanted(long)
    saved["yes"] = True
    assert trace_bytes.wanted(mid) and not trace_bytes.wanted(short)
    late, early = long.copy(), long.copy()
    late[-1] = trace_bytes.MAX_TS_NS  # beyond the fill's spelling
    early[0] = -1.0
    assert not trace_bytes.wanted(late) and not trace_bytes.wanted(early)
