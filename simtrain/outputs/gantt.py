"""Gantt charts of a simulated step: one row per (rank, stream), one box per span.

:func:`draw_gantt` writes a PNG or SVG (:func:`gantt_figure` builds the figure it saves). Rows are
planned by :func:`simtrain.outputs.view.plan_rows`; a time window (``--window``) narrows the
x-axis to a stretch of seconds or micro-batches, ``--xlim`` sets its end to share it between
charts. matplotlib is imported lazily, so importing this module is cheap.

The boxes and micro-batch numbers are drawn by :mod:`simtrain.outputs.gantt_marks` (compound
paths, boxes less than a pixel apart merged: a few hundred thousand spans draw in well under a
second). Every legend sits outside the data: the kinds' above the chart, the memory lines' under
the memory panel.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from simtrain.outputs.colors import (CAPACITY_COLOUR, CHUNK_LIGHTEN, KIND_COLOURS, KIND_HATCHES,
                                     KIND_LABELS, LINE_COLOURS, lighten, text_colour)
from simtrain.outputs.files import atomic_open
from simtrain.outputs.gantt_marks import DPI, ROW_IN, draw_boxes, draw_labels
from simtrain.outputs.view import RowPlan, Window, chunk_index, plan_rows, row_of_spans, window_bounds
from simtrain.outputs.words import counted
from simtrain.engine.timeline import Timeline
from simtrain.units import MS, US, GiB
from simtrain.workload.program import KINDS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SUFFIX_FORMATS = {".png": "png", ".svg": "svg"}
#: zlib's level for a PNG chart (Pillow's default is 6): S1's 1600 x 894 chart encodes in 39-58 ms
#: instead of 67-100 ms, in 188 KB instead of 164 KB
PNG_COMPRESS_LEVEL = 3
#: Most memory lines drawn (the first ranks of the chart).
MAX_MEMORY_LINES = 12

_FIG_WIDTH_IN = 16.0
_TITLE_IN = 0.35
_LEGEND_LINE_IN = 0.22  # one line of a legend
_BOTTOM_IN = 0.6        # time axis
_RIGHT_IN = 0.3
_MEMORY_IN = 1.6        # memory panel
_MEMORY_GAP_IN = 0.25
_LABEL_PT = 7.0         # micro-batch numbers
_OUTLINE_PX = 6.0       # outline boxes when the median box is at least this wide
_TICK_PT = 8.0
_LEGEND_PT = 8.0
_MEMORY_LEGEND_PT = 7.0


def _time_unit(t_max_s: float) -> tuple[str, float]:
    """The axis unit for a step of ``t_max_s`` seconds, and the factor from seconds to it."""
    if t_max_s >= 10.0:
        return "s", 1.0
    if t_max_s >= 10 * MS:
        return "ms", 1 / MS
    return "us", 1 / US


def _use_agg() -> None:
    """Select the Agg backend unless the process already chose one (pyplot, MPLBACKEND)."""
    import matplotlib

    if "matplotlib.pyplot" in sys.modules or os.environ.get("MPLBACKEND"):
        return
    try:
        matplotlib.use("Agg")
    except (ImportError, ValueError, RuntimeError):
        pass  # a backend is already in place; we draw through FigureCanvasAgg regardless


def _legend_layout(labels: list[str], width_in: float, font_pt: float) -> tuple[int, int]:
    """Columns and lines of a legend of ``labels`` laid out across ``width_in`` inches."""
    if not labels:
        return 1, 0
    entry_in = (max(len(t) for t in labels) * 0.6 + 4.0) * font_pt / 72
    ncol = max(1, min(len(labels), int(width_in // entry_in)))
    return ncol, math.ceil(len(labels) / ncol)


def _row_spans(timeline: Timeline, rows: list[tuple[int, str]],
               bounds: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray]:
    """The spans on ``rows`` (overlapping ``bounds`` when given) and the row index of each."""
    row = row_of_spans(timeline, rows)
    keep = row >= 0
    if bounds is not None:
        keep &= (timeline["end_s"] >= bounds[0]) & (timeline["start_s"] <= bounds[1])
    idx = np.nonzero(keep)[0]
    return idx, row[idx].astype(np.float64)


def _chunks_of(timeline: Timeline, idx: np.ndarray) -> np.ndarray:
    """:func:`~simtrain.outputs.view.chunk_index` of the spans ``idx`` in one pass, without sorting:
    a running count along a table of the (rank, stage) pairs present (unless it would be large)."""
    rank, stage = timeline["rank"].astype(np.int64), timeline["stage"].astype(np.int64)
    has = stage >= 0
    if not has.any() or not len(idx):
        return np.zeros(len(idx), dtype=np.int64)
    n_stages, n_ranks = int(stage.max()) + 1, int(rank.max()) + 1
    if rank.min() < 0 or n_stages * n_ranks > 4 * len(timeline) + 4096:
        return chunk_index(timeline)[idx]
    present = np.bincount(rank[has] * n_stages + stage[has], minlength=n_ranks * n_stages) > 0
    chunk = np.cumsum(present.reshape(n_ranks, n_stages), axis=1) - 1
    return np.where(stage[idx] >= 0, chunk[rank[idx], np.maximum(stage[idx], 0)], 0)


def draw_gantt(timeline: Timeline, path: str | os.PathLike, *, title: str | None = None,
               ranks: Iterable[int] | None = None, streams: Iterable[str] | None = None,
               textbook: bool = False, max_rows: int = 64,
               rank_labels: Mapping[int, str] | None = None,
               memory: Mapping[int, tuple[np.ndarray, np.ndarray]] | None = None,
               memory_capacity_bytes: float | None = None,
               time_label: str | None = None, window: Window | None = None) -> None:
    """Draw ``timeline`` as a Gantt chart to ``path`` (``.png`` or ``.svg``, else ValueError).

    See :func:`gantt_figure` for what is drawn. The file is written atomically (a temporary file
    in the same folder, then renamed), with reproducible bytes.
    """
    path = Path(path)
    fmt = SUFFIX_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"{path}: unknown image suffix {path.suffix!r}; use .png or .svg")
    fig = gantt_figure(timeline, title=title, ranks=ranks, streams=streams, textbook=textbook,
                       max_rows=max_rows, rank_labels=rank_labels, memory=memory,
                       memory_capacity_bytes=memory_capacity_bytes, time_label=time_label,
                       window=window)
    import matplotlib

    with atomic_open(path, "wb") as fh, matplotlib.rc_context(
            {"svg.hashsalt": "simtrain", "svg.fonttype": "none", "hatch.linewidth": 0.6}):
        if fmt == "svg":
            fig.savefig(fh, format=fmt, dpi=DPI, metadata={"Date": None})
        else:
            fig.savefig(fh, format=fmt, dpi=DPI, pil_kwargs={"compress_level": PNG_COMPRESS_LEVEL})


def gantt_figure(timeline: Timeline, *, title: str | None = None,
                 ranks: Iterable[int] | None = None, streams: Iterable[str] | None = None,
                 textbook: bool = False, max_rows: int = 64,
                 rank_labels: Mapping[int, str] | None = None,
                 memory: Mapping[int, tuple[np.ndarray, np.ndarray]] | None = None,
                 memory_capacity_bytes: float | None = None,
                 time_label: str | None = None, window: Window | None = None) -> Figure:
    """The matplotlib ``Figure`` of a Gantt chart of ``timeline``.

    Rows are planned by :func:`~simtrain.outputs.view.plan_rows` (``ranks``, ``streams``,
    ``max_rows``); ``textbook`` draws the pipeline-schedule picture (one compute row per rank).
    Boxes are coloured by kind (:data:`~simtrain.outputs.colors.KIND_COLOURS`, communication
    hatched), later model chunks of an interleaved schedule in lighter shades; idle time is blank.
    ``window`` limits the x-axis; ``memory`` adds a panel of memory in use per drawn rank.
    """
    plan = plan_rows(timeline, textbook, ranks, streams, max_rows)
    rows = plan.rows
    labels_of = dict(rank_labels or {})
    bounds = window_bounds(timeline, window) if window is not None else None
    idx, span_row = _row_spans(timeline, rows, bounds)

    if bounds is not None:
        t0, t1 = bounds
    else:
        t0 = min(0.0, float(timeline["start_s"][idx].min())) if len(idx) else 0.0
        t1 = float(timeline["end_s"][idx].max()) if len(idx) else max(timeline.end_s, MS)
    if t1 <= t0:
        t1 = t0 + US
    unit, scale = _time_unit(t1 - t0)

    row_labels = _row_labels(rows, labels_of, textbook)
    left_in = max(0.8, 0.2 + max((len(t) for t in row_labels), default=6) * _TICK_PT * 0.6 / 72)
    ax_w_in = _FIG_WIDTH_IN - left_in - _RIGHT_IN
    kind_counts = np.bincount(timeline["kind"][idx], minlength=len(KINDS))
    present = [k for k_code, k in enumerate(KINDS) if kind_counts[k_code]]
    levels = np.minimum(_chunks_of(timeline, idx), len(CHUNK_LIGHTEN) - 1)
    kind_entries = [KIND_LABELS[k] for k in present] + (["(lighter: later chunk)"] if (levels > 0).any() else [])
    kind_ncol, kind_lines = _legend_layout(kind_entries, ax_w_in, _LEGEND_PT)
    mem_ranks = ([r for r in plan.shown_ranks if r in memory] or sorted(memory))[:MAX_MEMORY_LINES] \
        if memory else []
    mem_entries = [labels_of.get(r, f"rank {r}") for r in mem_ranks] + (
        ["capacity"] if memory and memory_capacity_bytes else [])
    mem_ncol, mem_lines = _legend_layout(mem_entries, ax_w_in, _MEMORY_LEGEND_PT)

    n_rows = max(len(rows), 1)
    top_in = _TITLE_IN + kind_lines * _LEGEND_LINE_IN + 0.1
    mem_in = (_MEMORY_GAP_IN + _MEMORY_IN + mem_lines * _LEGEND_LINE_IN) if memory else 0.0
    height_in = top_in + n_rows * ROW_IN + mem_in + _BOTTOM_IN

    _use_agg()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(_FIG_WIDTH_IN, height_in), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((left_in / _FIG_WIDTH_IN, (_BOTTOM_IN + mem_in) / height_in,
                       ax_w_in / _FIG_WIDTH_IN, n_rows * ROW_IN / height_in))
    ax.set_facecolor("white")
    ax.set_xlim(t0 * scale, t1 * scale)
    ax.set_ylim(n_rows - 0.5, -0.5)
    _separators(ax, rows, t0 * scale, t1 * scale)

    x0 = np.maximum(timeline["start_s"][idx], t0) * scale
    x1 = np.minimum(np.maximum(timeline["end_s"][idx], timeline["start_s"][idx]), t1) * scale
    x1 = np.maximum(x1, x0 + (t1 - t0) * scale / (_FIG_WIDTH_IN * DPI))  # short spans stay visible
    kinds = timeline["kind"][idx]
    px_per_unit = ax_w_in * DPI / (scale * (t1 - t0))
    wide = len(idx) <= 2000 and (len(idx) == 0 or float(np.median(x1 - x0)) * px_per_unit >= _OUTLINE_PX)
    draw_boxes(ax, x0, x1, span_row, kinds, levels, outlined=wide, pixel=1.0 / px_per_unit)
    draw_labels(ax, x0, x1, span_row, kinds, levels, timeline["mb"][idx], timeline["stage"][idx],
               px_per_unit, _LABEL_PT + (1.0 if textbook else 0.0))
    _step_marks(ax, timeline.step_ends(), t0, t1, scale)

    ax.set_yticks(np.arange(len(rows)))
    ax.set_yticklabels(row_labels, fontsize=_TICK_PT)
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelsize=_TICK_PT)
    ax.set_xlabel(time_label or f"time ({unit})", fontsize=9)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    _kind_legend(fig, present, (levels > 0).any(), kind_ncol,
                 (left_in / _FIG_WIDTH_IN, 1.0 - (_TITLE_IN + 0.05) / height_in))
    if memory:
        _memory_panel(fig, ax, memory, memory_capacity_bytes, mem_ranks, labels_of, scale, (t0, t1),
                      (left_in, ax_w_in, height_in, mem_lines, mem_ncol), unit, time_label)
    fig.suptitle(_heading(title, textbook, plan, len(rows), window), fontsize=10,
                 x=left_in / _FIG_WIDTH_IN, ha="left", y=1.0 - 0.08 / height_in, va="top")
    return fig


def _heading(title: str | None, textbook: bool, plan: RowPlan, n_rows: int, window: Window | None) -> str:
    heading = title if title is not None else ("pipeline schedule" if textbook else "simulated training step")
    if plan.subsampled:
        heading += (f" (showing {len(plan.shown_ranks)} of {counted(plan.total_ranks, 'rank')}: first, "
                    f"last and evenly spaced; {n_rows} of {counted(plan.total_rows, 'row')})")
    if window is not None and window.unit != "axis":
        heading += f"; window {window.describe()}"
    return heading


def _step_marks(ax, ends: list[float], t0: float, t1: float, scale: float) -> None:
    """A dashed line at the end of each step but the last of a run of several steps."""
    for k, t in enumerate(ends[:-1] if len(ends) > 1 else []):
        if t0 <= t <= t1:
            ax.axvline(t * scale, color="black", linestyle="--", linewidth=0.8, zorder=3)
            ax.annotate(f"end of step {k + 1}", (t * scale, 0), xycoords=("data", "axes fraction"),
                        xytext=(2, 2), textcoords="offset points", fontsize=7)


def _row_labels(rows: list[tuple[int, str]], labels_of: Mapping[int, str], textbook: bool) -> list[str]:
    """A row's label: its rank's label and its stream on the first row of a rank, the stream alone
    on the rows below it (the darker separator marks where a rank's rows begin). A textbook chart
    has one row per rank, its label. Each glyph costs matplotlib about 0.1 ms to draw, and the
    rank's label repeated on every row made most of a chart's text."""
    out = []
    for i, (r, stream) in enumerate(rows):
        rank = labels_of.get(r, f"rank {r}")
        out.append(rank if textbook else stream if i and rows[i - 1][0] == r else f"{rank}  {stream}")
    return out


def _separators(ax, rows: list[tuple[int, str]], x_lo: float, x_hi: float) -> None:
    """Row separators: light between streams, darker between ranks."""
    if len(rows) < 2:
        return
    bounds = np.arange(len(rows) - 1) + 0.5
    new_rank = np.array([rows[i + 1][0] != rows[i][0] for i in range(len(rows) - 1)])
    if (~new_rank).any():
        ax.hlines(bounds[~new_rank], x_lo, x_hi, colors="#EEEEEE", linewidths=0.5, zorder=0)
    if new_rank.any():
        ax.hlines(bounds[new_rank], x_lo, x_hi, colors="#BBBBBB", linewidths=0.7, zorder=0)


def _kind_legend(fig, present: list[str], shaded: bool, ncol: int, anchor: tuple[float, float]) -> None:
    """The kinds' legend, above the chart (under the title), left-aligned with the axes."""
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=KIND_COLOURS[k], hatch=KIND_HATCHES.get(k),
                     edgecolor=text_colour(lighten(KIND_COLOURS[k], 0.0)) if k in KIND_HATCHES else "none",
                     linewidth=0.0, label=KIND_LABELS[k]) for k in present]
    if shaded:
        handles.append(Patch(facecolor="none", edgecolor="none", label="(lighter: later chunk)"))
    if handles:
        fig.legend(handles=handles, loc="upper left", bbox_to_anchor=anchor, ncol=ncol, frameon=False,
                   fontsize=_LEGEND_PT, borderaxespad=0.0, borderpad=0.0, handlelength=1.6,
                   handleheight=1.0, columnspacing=1.0)


def _memory_panel(fig, ax, memory, capacity, ranks, rank_labels, scale, span, geometry, unit,
                  time_label) -> None:
    """Memory in use per drawn rank (GiB) as step lines under the Gantt, with the capacity; the
    legend below the panel's time axis."""
    left_in, ax_w_in, height_in, legend_lines, ncol = geometry
    bottom_in = _BOTTOM_IN + legend_lines * _LEGEND_LINE_IN
    pax = fig.add_axes((left_in / _FIG_WIDTH_IN, bottom_in / height_in, ax_w_in / _FIG_WIDTH_IN,
                        _MEMORY_IN / height_in), sharex=ax)
    for i, rank in enumerate(ranks):
        times, level = memory[rank]
        t = np.append(times, max(span[1], times[-1] if len(times) else span[1])) * scale
        y = np.append(level, level[-1] if len(level) else 0.0) / GiB
        pax.step(t, y, where="post", linewidth=1.0, color=LINE_COLOURS[i % len(LINE_COLOURS)],
                 label=rank_labels.get(rank, f"rank {rank}"))
    if capacity:
        pax.axhline(capacity / GiB, color=CAPACITY_COLOUR, linestyle="--", linewidth=0.8, label="capacity")
    pax.set_ylabel("memory (GiB)", fontsize=8)
    pax.tick_params(labelsize=_TICK_PT)
    pax.set_ylim(bottom=0)
    pax.set_xlabel(time_label or f"time ({unit})", fontsize=9)
    handles, labels = pax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower left", ncol=ncol, frameon=False,
                   fontsize=_MEMORY_LEGEND_PT, borderaxespad=0.0, borderpad=0.0,
                   bbox_to_anchor=(left_in / _FIG_WIDTH_IN, 0.05 / height_in))
    for side in ("top", "right"):
        pax.spines[side].set_visible(False)
    ax.tick_params(axis="x", labelbottom=False)
    ax.set_xlabel("")
