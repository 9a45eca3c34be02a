"""Gantt charts of a simulated step: one row per (rank, stream), one box per span.

:func:`draw_gantt` writes a PNG or SVG; :func:`gantt_rows` is the pure row planner it uses (which
rows are drawn, in which order, and the representative subset of ranks when there are too many).
matplotlib is imported lazily, inside :func:`draw_gantt`, so importing this module is cheap.

Boxes are drawn as one ``PolyCollection`` per (kind, shade), not one artist per span, so a
timeline of a few hundred thousand spans draws in seconds; micro-batch numbers are written only
into boxes wide enough to hold them, and at most :data:`MAX_LABELS` of them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simtrain.outputs.files import atomic_open
from simtrain.outputs.colors import (CHUNK_LIGHTEN, KIND_COLOURS, KIND_LABELS, LINE_COLOURS, lighten,
                                     text_colour)
from simtrain.timeline import Timeline
from simtrain.units import MS, US, GiB
from simtrain.workload.program import KINDS, STREAMS

MAX_LABELS = 3000
SUFFIX_FORMATS = {".png": "png", ".svg": "svg"}

_FIG_WIDTH_IN = 16.0
_DPI = 100
_ROW_IN = 0.28          # height of one row
_BAR = 0.8              # box height as a fraction of the row
_TOP_IN = 0.7           # title + legend
_BOTTOM_IN = 0.6        # time axis
_RIGHT_IN = 0.3
_LABEL_PT = 7.0         # micro-batch numbers
_TICK_PT = 8.0


@dataclass(frozen=True)
class RowPlan:
    """The rows to draw: ``rows`` as (rank, stream) pairs, and what the subset left out."""

    rows: list[tuple[int, str]]
    total_rows: int
    shown_ranks: list[int]
    total_ranks: int

    @property
    def subsampled(self) -> bool:
        return self.total_rows > len(self.rows)


def _check_streams(streams: Iterable[str] | None) -> tuple[str, ...]:
    if streams is None:
        return STREAMS
    chosen = tuple(streams)
    bad = [s for s in chosen if s not in STREAMS]
    if bad:
        raise ValueError(f"unknown stream(s) {bad}; known: {', '.join(STREAMS)}")
    return tuple(s for s in STREAMS if s in chosen)


def plan_rows(timeline: Timeline, textbook: bool = False, ranks: Iterable[int] | None = None,
              streams: Iterable[str] | None = None, max_rows: int | None = 64) -> RowPlan:
    """Plan the rows of a chart; see :func:`gantt_rows`. Also reports what was left out."""
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"max_rows={max_rows}: must be at least 1")
    wanted = set(int(r) for r in ranks) if ranks is not None else None
    per_rank: dict[int, list[str]] = {}
    if textbook:
        candidates = sorted(wanted) if wanted is not None else timeline.ranks
        per_rank = {r: ["compute"] for r in candidates}
    else:
        allowed = {STREAMS.index(s) for s in _check_streams(streams)}
        if len(timeline):
            pairs = np.unique(np.stack([timeline["rank"].astype(np.int64),
                                        timeline["stream"].astype(np.int64)], axis=1), axis=0)
            for r, s in pairs.tolist():  # sorted by rank then stream code = STREAMS order
                if s in allowed and (wanted is None or r in wanted):
                    per_rank.setdefault(r, []).append(STREAMS[s])
    all_ranks = sorted(per_rank)
    total = sum(len(v) for v in per_rank.values())
    shown = all_ranks
    if max_rows is not None and total > max_rows:
        shown = _representative(all_ranks, [len(per_rank[r]) for r in all_ranks], max_rows)
    rows = [(r, s) for r in shown for s in per_rank[r]]
    if max_rows is not None:
        rows = rows[:max_rows]  # only bites when a single rank alone has more rows than max_rows
    return RowPlan(rows=rows, total_rows=total, shown_ranks=list(shown), total_ranks=len(all_ranks))


def _representative(ranks: list[int], counts: list[int], max_rows: int) -> list[int]:
    """The most ranks, evenly spaced and including the first and the last, whose rows fit."""
    n = len(ranks)
    for k in range(min(n, max_rows), 0, -1):
        idx = sorted(set(np.round(np.linspace(0, n - 1, k)).astype(int).tolist()))
        if sum(counts[i] for i in idx) <= max_rows:
            return [ranks[i] for i in idx]
    return ranks[:1]


def gantt_rows(timeline: Timeline, textbook: bool = False, ranks: Iterable[int] | None = None,
               streams: Iterable[str] | None = None,
               max_rows: int | None = 64) -> list[tuple[int, str]]:
    """The (rank, stream) rows a Gantt chart draws, top to bottom.

    One row per (rank, stream) that has spans, ordered by rank then :data:`STREAMS` order, limited
    to ``ranks`` and ``streams`` when given. With ``textbook`` one ``compute`` row per rank
    (``streams`` is ignored). When there are more than ``max_rows`` rows (``None``: no limit), only
    a representative subset of ranks is kept: the first and the last rank and evenly spaced ranks
    between, as many as fit.
    """
    return plan_rows(timeline, textbook, ranks, streams, max_rows).rows


def _time_unit(t_max_s: float) -> tuple[str, float]:
    """The axis unit for a step of ``t_max_s`` seconds, and the factor from seconds to it."""
    if t_max_s >= 10.0:
        return "s", 1.0
    if t_max_s >= 10 * MS:
        return "ms", 1 / MS
    return "us", 1 / US


def _chunk_levels(timeline: Timeline, idx: np.ndarray) -> np.ndarray:
    """For spans ``idx``: which of its rank's stages (0 = the lowest-numbered) each belongs to."""
    rank = timeline["rank"][idx].astype(np.int64)
    stage = timeline["stage"][idx].astype(np.int64)
    levels = np.zeros(len(idx), dtype=np.int64)
    has = stage >= 0
    if not has.any():
        return levels
    pairs, inverse = np.unique(np.stack([rank[has], stage[has]], axis=1), axis=0,
                               return_inverse=True)
    first_of_rank = np.searchsorted(pairs[:, 0], pairs[:, 0], side="left")
    chunk = np.arange(len(pairs)) - first_of_rank
    levels[has] = chunk[np.asarray(inverse).reshape(-1)]
    return np.minimum(levels, len(CHUNK_LIGHTEN) - 1)


def _use_agg() -> None:
    """Select the Agg backend unless the process already chose one (pyplot, MPLBACKEND)."""
    import matplotlib

    if "matplotlib.pyplot" in sys.modules or os.environ.get("MPLBACKEND"):
        return
    try:
        matplotlib.use("Agg")
    except (ImportError, ValueError, RuntimeError):
        pass  # a backend is already in place; we draw through FigureCanvasAgg regardless


def draw_gantt(timeline: Timeline, path: str | os.PathLike, *, title: str | None = None,
               ranks: Iterable[int] | None = None, streams: Iterable[str] | None = None,
               textbook: bool = False, max_rows: int = 64,
               rank_labels: Mapping[int, str] | None = None,
               memory: Mapping[int, tuple[np.ndarray, np.ndarray]] | None = None,
               memory_capacity_bytes: float | None = None,
               time_label: str | None = None) -> None:
    """Draw ``timeline`` as a Gantt chart to ``path`` (``.png`` or ``.svg``, else ValueError).

    Rows are planned by :func:`gantt_rows`; ``textbook`` draws the pipeline-schedule picture (one
    compute row per rank). Boxes are coloured by kind (:data:`KIND_COLOURS`, with a legend), later
    model chunks of an interleaved schedule in lighter shades; idle time is blank. The file is
    written atomically (a temporary file in the same folder, then renamed).
    """
    path = Path(path)
    fmt = SUFFIX_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"{path}: unknown image suffix {path.suffix!r}; use .png or .svg")
    plan = plan_rows(timeline, textbook, ranks, streams, max_rows)
    rank_labels = dict(rank_labels or {})

    _use_agg()
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    rows = plan.rows
    n_rows = max(len(rows), 1)

    # --- select the spans on drawn rows and give each its row index
    n_streams = len(STREAMS)
    row_keys = np.array([r * n_streams + STREAMS.index(s) for r, s in rows], dtype=np.int64)
    order = np.argsort(row_keys, kind="stable")
    span_keys = timeline["rank"].astype(np.int64) * n_streams + timeline["stream"].astype(np.int64)
    if rows:
        sorted_keys = row_keys[order]
        pos = np.searchsorted(sorted_keys, span_keys).clip(0, len(rows) - 1)
        idx = np.nonzero(sorted_keys[pos] == span_keys)[0]
        span_row = order[pos[idx]].astype(np.float64)
    else:
        idx = np.zeros(0, dtype=np.int64)
        span_row = np.zeros(0)

    start = timeline["start_s"][idx]
    end = timeline["end_s"][idx]
    t0 = min(0.0, float(start.min())) if len(idx) else 0.0
    t1 = float(end.max()) if len(idx) else max(timeline.end_s, MS)
    if t1 <= t0:
        t1 = t0 + US
    unit, scale = _time_unit(t1 - t0)
    x0 = start * scale
    x1 = np.maximum(end, start) * scale
    min_width = (t1 - t0) * scale / (_FIG_WIDTH_IN * _DPI)  # about one pixel: short spans stay visible
    x1 = np.maximum(x1, x0 + min_width)
    kinds = timeline["kind"][idx]
    levels = _chunk_levels(timeline, idx)

    # --- figure geometry (inches), fixed so pixel sizes of boxes are known before drawing
    labels = []
    for r, s in rows:
        base = rank_labels.get(r, f"rank {r}")
        labels.append(base if textbook else f"{base}  {s}")
    longest = max((len(t) for t in labels), default=6)
    left_in = max(0.8, 0.2 + longest * _TICK_PT * 0.6 / 72)
    mem_in = _MEMORY_IN if memory else 0.0
    height_in = _TOP_IN + _BOTTOM_IN + n_rows * _ROW_IN + mem_in
    ax_w_in = _FIG_WIDTH_IN - left_in - _RIGHT_IN

    fig = Figure(figsize=(_FIG_WIDTH_IN, height_in), dpi=_DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((left_in / _FIG_WIDTH_IN, (_BOTTOM_IN + mem_in) / height_in,
                       ax_w_in / _FIG_WIDTH_IN, n_rows * _ROW_IN / height_in))

    ax.set_facecolor("white")
    ax.set_xlim(t0 * scale, t1 * scale)
    ax.set_ylim(n_rows - 0.5, -0.5)

    # --- row separators: light between streams, darker between ranks
    if len(rows) > 1:
        bounds = np.arange(len(rows) - 1) + 0.5
        new_rank = np.array([rows[i + 1][0] != rows[i][0] for i in range(len(rows) - 1)])
        if (~new_rank).any():
            ax.hlines(bounds[~new_rank], t0 * scale, t1 * scale, colors="#EEEEEE", linewidths=0.5,
                      zorder=0)
        if new_rank.any():
            ax.hlines(bounds[new_rank], t0 * scale, t1 * scale, colors="#BBBBBB", linewidths=0.7,
                      zorder=0)

    # --- boxes: one PolyCollection per (kind, shade)
    edge = len(idx) <= 2000
    half = _BAR / 2
    present_kinds: list[str] = []
    shaded = False
    for k_code, kind in enumerate(KINDS):
        sel_k = kinds == k_code
        if not sel_k.any():
            continue
        present_kinds.append(kind)
        for level in np.unique(levels[sel_k]).tolist():
            sel = sel_k & (levels == level)
            shaded |= level > 0
            verts = np.empty((int(sel.sum()), 4, 2))
            y = span_row[sel]
            verts[:, 0, 0] = verts[:, 3, 0] = x0[sel]
            verts[:, 1, 0] = verts[:, 2, 0] = x1[sel]
            verts[:, 0, 1] = verts[:, 1, 1] = y - half
            verts[:, 2, 1] = verts[:, 3, 1] = y + half
            colour = lighten(KIND_COLOURS[kind], CHUNK_LIGHTEN[level])
            ax.add_collection(PolyCollection(
                verts, closed=True, facecolors=[colour], edgecolors="white" if edge else "none",
                linewidths=0.3 if edge else 0.0, antialiaseds=edge, zorder=2))

    # --- micro-batch numbers, one per action: consecutive spans of a row with the same kind,
    # stage and micro-batch (the blocks of one forward or backward) form one labelled group
    mbs = timeline["mb"][idx]
    stages = timeline["stage"][idx]
    order = np.lexsort((x0, span_row))
    g_row, g_kind, g_mb, g_stage = span_row[order], kinds[order], mbs[order], stages[order]
    new_group = np.ones(len(order), dtype=bool)
    if len(order) > 1:
        new_group[1:] = ((g_row[1:] != g_row[:-1]) | (g_kind[1:] != g_kind[:-1])
                         | (g_mb[1:] != g_mb[:-1]) | (g_stage[1:] != g_stage[:-1]))
    starts = np.nonzero(new_group)[0]
    gx0 = x0[order][starts]
    gx1 = np.maximum.reduceat(x1[order], starts) if len(order) else np.zeros(0)
    first = order[starts]
    px_per_unit = ax_w_in * _DPI / (scale * (t1 - t0))
    box_px = (gx1 - gx0) * px_per_unit
    font_pt = _LABEL_PT + (1.0 if textbook else 0.0)
    char_px = font_pt * 0.62 * _DPI / 72
    gmb = mbs[first]
    n_chars = np.where(gmb >= 0, np.floor(np.log10(np.maximum(gmb, 1))) + 1, 0)
    need_px = n_chars * char_px + 3
    fits = (gmb >= 0) & (box_px >= need_px) & (_ROW_IN * _BAR * 72 >= font_pt * 1.1)
    cand = np.nonzero(fits)[0]
    if len(cand) > MAX_LABELS:  # keep the widest boxes, ties in timeline order
        cand = np.sort(cand[np.argsort(-box_px[cand], kind="stable")[:MAX_LABELS]])
    for g in cand.tolist():
        i = int(first[g])
        kind = KINDS[kinds[i]]
        fill = lighten(KIND_COLOURS[kind], CHUNK_LIGHTEN[int(levels[i])])
        ax.text((gx0[g] + gx1[g]) / 2, span_row[i], str(int(mbs[i])), ha="center", va="center",
                fontsize=font_pt, color=text_colour(fill), zorder=3, clip_on=True)

    # --- axes, legend, title
    ax.set_yticks(np.arange(len(rows)))
    ax.set_yticklabels(labels, fontsize=_TICK_PT)
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelsize=_TICK_PT)
    ax.set_xlabel(time_label or f"time ({unit})", fontsize=9)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    handles = [Patch(facecolor=KIND_COLOURS[k], label=KIND_LABELS[k]) for k in present_kinds]
    if shaded:
        handles.append(Patch(facecolor="none", edgecolor="none", label="(lighter: later chunk)"))
    if handles:
        ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(handles),
                  frameon=False, fontsize=8, borderaxespad=0.3, handlelength=1.2,
                  columnspacing=1.0)
    if memory:
        _memory_panel(fig, ax, memory, memory_capacity_bytes, plan.shown_ranks, rank_labels,
                      scale, (t0, t1), left_in, ax_w_in, height_in, unit)
    heading = title if title is not None else (
        "pipeline schedule" if textbook else "simulated training step")
    if plan.subsampled:
        heading += (f" (showing {len(plan.shown_ranks)} of {plan.total_ranks} ranks: first, last "
                    f"and evenly spaced; {len(rows)} of {plan.total_rows} rows)")
    fig.suptitle(heading, fontsize=10, x=left_in / _FIG_WIDTH_IN, ha="left",
                 y=1.0 - 0.1 / height_in, va="top")

    _save_atomic(fig, path, fmt, matplotlib)


def _memory_panel(fig, ax, memory, capacity, ranks, rank_labels, scale, span, left_in, ax_w_in,
                  height_in, unit) -> None:
    """Memory in use per drawn rank (GiB) as step lines under the Gantt, with the capacity."""
    pax = fig.add_axes((left_in / _FIG_WIDTH_IN, _BOTTOM_IN / height_in, ax_w_in / _FIG_WIDTH_IN,
                        (_MEMORY_IN - 0.45) / height_in), sharex=ax)
    shown = [r for r in ranks if r in memory] or sorted(memory)
    for i, rank in enumerate(shown[:12]):
        times, level = memory[rank]
        t = np.append(times, span[1]) * scale
        y = np.append(level, level[-1]) / GiB
        pax.step(t, y, where="post", linewidth=1.0, color=LINE_COLOURS[i % len(LINE_COLOURS)],
                 label=(rank_labels or {}).get(rank, f"rank {rank}"))
    if capacity:
        pax.axhline(capacity / GiB, color="#CC3311", linestyle="--", linewidth=0.8, label="capacity")
    pax.set_ylabel("memory (GiB)", fontsize=8)
    pax.tick_params(labelsize=_TICK_PT)
    pax.set_ylim(bottom=0)
    pax.legend(fontsize=6, loc="lower right", ncol=4, frameon=True, framealpha=0.8)
    pax.set_xlabel(f"time ({unit})", fontsize=9)
    for side in ("top", "right"):
        pax.spines[side].set_visible(False)
    ax.tick_params(axis="x", labelbottom=False)
    ax.set_xlabel("")


_MEMORY_IN = 2.2  # height of the memory panel


def _save_atomic(fig, path: Path, fmt: str, matplotlib) -> None:
    """Save ``fig`` to ``path`` atomically, with reproducible bytes (no date, fixed SVG ids)."""
    with atomic_open(path, "wb") as fh, matplotlib.rc_context(
            {"svg.hashsalt": "simtrain", "svg.fonttype": "none"}):
        metadata = {"Date": None} if fmt == "svg" else None
        fig.savefig(fh, format=fmt, dpi=_DPI, metadata=metadata)
