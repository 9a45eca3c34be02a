"""The trace's events as bytes from the compiled fill: the same bytes as the text's path and the
encoder's JSON, in chunks of any size; used only on long traces within the fill's range."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simtrain.engine.timeline import TimelineBuilder
from simtrain.outputs import trace, trace_bytes
from simtrain.outputs.trace import trace_events, write_trace

from helpers import add_span

pytestmark = pytest.mark.quick


def _timeline():
    """Spans with odd names, floats and times, some without a micro-batch, over two ranks."""
    b = TimelineBuilder()
    add_span(b, 0, "compute", "F", 'attn "q" \u00e9\u4e2d', 0.0, 1e-7, mb=3, layer=2, flops=-0.0, nbytes=1e22)
    add_span(b, 0, "compute", "opt", "optimizer", 1e-7, 2.5e-7, flops=1.5e-300)
    add_span(b, 0, "pp_send", "pp", "send", 2.5e-7, 3e-7, mb=0, arrow=4, nbytes=123456789012345678.0)
    add_span(b, 1, "pp_recv", "pp", "recv", 2.5e-7, 3e-7, mb=0, arrow=4)
    add_span(b, 1, "compute", "opt", "optimizer", 3e-7, 1.0 / 3.0)
    add_span(b, 1, "compute", "B", "mlp.B", 0.6, 1234.5678901, mb=12, layer=79, flops=3.5e12)
    return b.build()


@pytest.mark.parametrize("chunk", [1, 2, 4, 6, 10])
def test_the_bytes_are_the_texts(chunk):
    parts = trace._Parts(_timeline(), {1: "stage \u00e9"}, "rank", None)
    columns, ts_ns = parts.span_columns()
    got = [bytes(v) for v in trace_bytes.span_bytes(columns, ts_ns, chunk)]
    assert got == [t.encode() for t in parts.span_texts(chunk)]


def test_a_trace_written_through_the_fill_is_the_encoders_json(tmp_path, monkeypatch):
    tl = _timeline()
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
