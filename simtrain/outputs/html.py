"""The offline HTML report: one self-contained page with the interactive timeline of a step.

:func:`write_html_report` writes ``report.html``: the step's metrics, its breakdown, the exposed
and overlapped communication, (for ``compare``) the closed form beside the simulation, and a
timeline of every (rank, stream) drawn on a canvas that zooms (wheel, buttons), pans (drag),
filters by rank, stream and kind and names the span under the pointer, with the memory curves
under it on the same time axis. Everything is inline (the page's script and style are package
data in ``assets/``): it opens from disk with no network.

The spans travel as typed columns (:func:`pack_columns`), gzip-compressed and base64-encoded in
the page, sorted by row then start time so the page draws only the visible spans of each row
(and one box per pixel where spans are narrower than a pixel): a million spans stay responsive.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from simtrain.results.metrics import BREAKDOWN
from simtrain.outputs.colors import (CAPACITY_COLOUR, CHUNK_LIGHTEN, KIND_COLOURS, KIND_HATCHES,
                                     KIND_LABELS, LINE_COLOURS, hex_colour, lighten, text_colour)
from simtrain.outputs.files import atomic_open
from simtrain.outputs.text_tables import EXPOSED_NOTE, IDLE_NOTE, fmt_seconds
from simtrain.outputs.view import chunk_index, plan_rows, row_of_spans
from simtrain.engine.timeline import Timeline
from simtrain.units import GiB
from simtrain.workload.program import KINDS, STREAMS

#: The page's columns per span and their types.
SPAN_COLUMNS = (("start", "float64"), ("dur", "float64"), ("flops", "float64"), ("bytes", "float64"),
                ("name", "int32"), ("mb", "int32"), ("stage", "int32"), ("layer", "int32"),
                ("chunk", "int32"), ("kind", "uint8"))
_JS_TYPES = {"float64": "Float64Array", "int32": "Int32Array", "uint8": "Uint8Array"}


@dataclass(frozen=True)
class SideBySide:
    """The closed form beside the simulation, as ``simtrain compare`` prints it: a table and the
    sentences that explain its largest differences."""

    header: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


def _asset(name: str) -> str:
    return (resources.files("simtrain.outputs") / "assets" / name).read_text(encoding="utf-8")


def pack_columns(columns: list[tuple[str, np.ndarray]]) -> tuple[list[dict[str, Any]], bytes]:
    """Concatenate ``columns`` (little-endian) into one buffer, widest types first so that every
    column starts aligned for its typed array; each column's name, typed-array type, byte
    offset and length."""
    specs, chunks, offset = [], [], 0
    for name, values in sorted(columns, key=lambda c: -c[1].dtype.itemsize):
        data = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<")).tobytes()
        specs.append({"name": name, "type": _JS_TYPES[values.dtype.name], "offset": offset,
                      "length": len(values)})
        chunks.append(data)
        offset += len(data)
    return specs, b"".join(chunks)


def timeline_data(timeline: Timeline, rank_labels: Mapping[int, str],
                  memory: Mapping[int, tuple[np.ndarray, np.ndarray]] | None,
                  capacity_bytes: float | None) -> tuple[dict[str, Any], bytes]:
    """The page's description of the timeline (rows, kinds, names, memory series) and the packed
    columns: spans sorted by row, then start time; ``row_offsets[r]`` is row ``r``'s first span."""
    rows = plan_rows(timeline, max_rows=None).rows
    row_of = row_of_spans(timeline, rows)  # every span has a row
    start = timeline["start_s"]
    order = np.lexsort((start, row_of))
    row_sorted = row_of[order]
    offsets = np.searchsorted(row_sorted, np.arange(len(rows) + 1)).astype(np.int32)
    dur = np.maximum(timeline["end_s"] - start, 0.0)[order]
    values = {"start": start[order], "dur": dur, "flops": timeline["flops"][order],
              "bytes": timeline["bytes"][order], "name": timeline["name"][order],
              "mb": timeline["mb"][order], "stage": timeline["stage"][order],
              "layer": timeline["layer"][order], "kind": timeline["kind"][order],
              "chunk": chunk_index(timeline)[order]}
    columns = [(name, values[name].astype(dtype)) for name, dtype in SPAN_COLUMNS]
    series = []
    for i, (rank, (times, level)) in enumerate(sorted((memory or {}).items())):
        columns += [(f"mem_t{rank}", np.asarray(times, dtype=np.float64)),
                    (f"mem_v{rank}", np.asarray(level, dtype=np.float64) / GiB)]
        series.append({"rank": int(rank), "label": rank_labels.get(rank, f"rank {rank}"),
                       "colour": LINE_COLOURS[i % len(LINE_COLOURS)]})
    columns.append(("row_offsets", offsets))
    specs, blob = pack_columns(columns)
    kinds = []
    for k in KINDS:
        fills = [lighten(KIND_COLOURS[k], a) for a in CHUNK_LIGHTEN]
        kinds.append({"key": k, "label": KIND_LABELS[k], "hatch": KIND_HATCHES.get(k, ""),
                      "fills": [hex_colour(f) for f in fills], "strokes": [text_colour(f) for f in fills]})
    meta = {
        "streams": list(STREAMS), "kinds": kinds, "names": list(timeline.names),
        "rows": [{"rank": r, "stream": s, "label": rank_labels.get(r, f"rank {r}")} for r, s in rows],
        "end_s": timeline.end_s, "count": len(timeline), "columns": specs,
        "memory": series, "capacity_gib": capacity_bytes / GiB if capacity_bytes else None,
        "capacity_colour": CAPACITY_COLOUR,
    }
    return meta, blob


def _table(header: list[str], rows: list[list[str]], note: str = "", cls: str = "") -> str:
    """A table with the sentence that says how to read it under it."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    under = f'<p class="note">{html.escape(note)}</p>' if note else ""
    return (f'<div class="table"><table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
            f"</table>{under}</div>")


def report_tables(report: Mapping[str, Any]) -> str:
    """The step's metrics, breakdown and communication tables, as HTML, each with the sentence
    that says how it reads against the others (the terminal summary's notes)."""
    step = report["step_time_s"]
    br = report["breakdown_s"]

    def share(seconds: float) -> str:
        return f"{seconds / step:.1%}" if step else "-"

    metrics = [
        ["step time", fmt_seconds(step)],
        ["tokens/s", f"{report['tokens_per_s']:,.0f}"],
        ["TFLOP/s per GPU", f"{report['tflops_per_gpu']:.1f}"],
        ["MFU / HFU", f"{report['mfu']:.1%} / {report['hfu']:.1%}"],
        ["idle (bubble + imbalance)", f"{share(br['bubble'] + br['imbalance'])} = {share(br['bubble'])} + "
                                      f"{share(br['imbalance'])}"],
        ["stage imbalance", f"{report['stage_imbalance']:.3f} (busiest / mean compute)"],
        ["peak memory per stage (GiB)", " ".join(f"{g:.1f}" for g in report["peak_memory_gib"])
         + f" of {report['memory_capacity_gib']:.1f}" + ("" if report["fits_in_memory"] else " (does not fit)")],
    ]
    breakdown = [[k, fmt_seconds(br[k]), share(br[k])] for k in BREAKDOWN]
    comm = [[k, fmt_seconds(e), fmt_seconds(br[k]), fmt_seconds(report["overlapped_comm_s"][k])]
            for k, e in report["exposed_comm_s"].items() if e or report["overlapped_comm_s"][k]]
    parts = [_table(["metric", "value"], metrics, "", "metrics"),
             _table(["category", "time", "share"], breakdown,
                    "step breakdown (mean over ranks; sums to the step time). " + IDLE_NOTE, "breakdown")]
    if comm:
        parts.append(_table(["kind", "exposed", "in breakdown", "overlapped"], comm, EXPOSED_NOTE,
                            "communication"))
    return "".join(parts)


def render_html_report(timeline: Timeline, *, title: str, report: Mapping[str, Any],
                       rank_labels: Mapping[int, str] | None = None,
                       memory: Mapping[int, tuple[np.ndarray, np.ndarray]] | None = None,
                       capacity_bytes: float | None = None,
                       comparison: SideBySide | None = None) -> str:
    """The report page as one string (see the module docstring)."""
    meta, blob = timeline_data(timeline, dict(rank_labels or {}), memory, capacity_bytes)
    meta["title"] = title
    data = base64.b64encode(gzip.compress(blob, compresslevel=6, mtime=0)).decode("ascii")
    # "</" may not appear inside a script element; JSON allows the escaped form "<\/"
    meta_json = json.dumps(meta, sort_keys=True, separators=(",", ":")).replace("</", "<\\/")
    side = ""
    if comparison is not None:
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in comparison.notes)
        side = ('<section id="comparison"><h2>Closed form beside the simulation</h2>'
                + _table(comparison.header, comparison.rows, "", "comparison")
                + (f"<h3>Largest differences</h3><ul>{notes}</ul>" if notes else "") + "</section>")
    config = report.get("config") or {}
    config_line = " \u00b7 ".join(f"{k}={v}" for k, v in sorted(config.items()) if v is not None)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_asset('report.css')}</style></head>\n<body>"
        f'<header><h1>{html.escape(title)}</h1><p class="config">{html.escape(config_line)}</p></header>'
        f'<section id="timeline">{_asset("timeline.html")}</section>'
        f"{side}"
        f'<section id="tables"><h2>Step</h2><div class="tables">{report_tables(report)}</div></section>'
        f'<script type="application/json" id="simtrain-meta">{meta_json}</script>\n'
        f'<script type="application/octet-stream" id="simtrain-data">{data}</script>\n'
        f"<script>{_asset('report.js')}</script>\n</body></html>\n")


def write_html_report(path: str | os.PathLike, timeline: Timeline, **kwargs: Any) -> None:
    """Write :func:`render_html_report`'s page to ``path``, atomically."""
    page = render_html_report(timeline, **kwargs)
    with atomic_open(path, "w") as fh:
        fh.write(page)
