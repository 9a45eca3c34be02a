"""What part of a timeline a chart shows: its rows (ranks x streams), its time window, the model
chunk of each span.

The Gantt pictures and the HTML report plan their rows with :func:`plan_rows`; ``--window``
(:func:`parse_window`, then :func:`window_bounds`) and ``--ranks``/``--streams`` narrow what the
Gantt picture draws; ``--xlim`` sets the end of its time axis.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from simtrain.errors import SimtrainError
from simtrain.engine.timeline import Timeline
from simtrain.workload.program import STREAMS


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


def check_streams(streams: Iterable[str] | None) -> tuple[str, ...]:
    """``streams`` in :data:`STREAMS` order (all of them for None); an unknown one is refused."""
    if streams is None:
        return STREAMS
    chosen = tuple(streams)
    bad = [s for s in chosen if s not in STREAMS]
    if bad:
        raise SimtrainError(f"--streams {','.join(chosen)}: unknown stream(s) {', '.join(bad)}; "
                            f"known: {', '.join(STREAMS)}")
    return tuple(s for s in STREAMS if s in chosen)


def plan_rows(timeline: Timeline, textbook: bool = False, ranks: Iterable[int] | None = None,
              streams: Iterable[str] | None = None, max_rows: int | None = 64) -> RowPlan:
    """The (rank, stream) rows of a chart, top to bottom, and what was left out.

    One row per (rank, stream) that has spans, ordered by rank then :data:`STREAMS` order, limited
    to ``ranks`` and ``streams`` when given (a rank the timeline does not hold is refused, naming
    the ranks it does). With ``textbook`` one ``compute`` row per rank (``streams`` is ignored).
    When there are more than ``max_rows`` rows (``None``: no limit), only a representative subset
    of ranks is kept: the first and the last rank and evenly spaced ranks between, as many as fit.
    """
    if max_rows is not None and max_rows < 1:
        raise SimtrainError(f"max_rows={max_rows}: must be at least 1")
    wanted = None
    if ranks is not None:
        wanted = sorted(set(int(r) for r in ranks))
        missing = [r for r in wanted if r not in set(timeline.ranks)]
        if missing and len(timeline):
            raise SimtrainError(f"--ranks {','.join(map(str, wanted))}: rank(s) "
                                f"{', '.join(map(str, missing))} not in the timeline; it holds ranks "
                                f"{', '.join(map(str, timeline.ranks))}")
    per_rank: dict[int, list[str]] = {}
    if textbook:
        per_rank = {r: ["compute"] for r in (wanted if wanted is not None else timeline.ranks)}
    else:
        allowed = {STREAMS.index(s) for s in check_streams(streams)}
        for r, s in rank_streams(timeline):  # sorted by rank then stream code = STREAMS order
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


def unique_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (``a[i]``, ``b[i]``) pairs of two integer columns, sorted by ``a`` then ``b``,
    as an (n, 2) int64 array, and for every ``i`` the index of its pair: what
    ``np.unique(np.stack([a, b], axis=1), axis=0, return_inverse=True)`` gives, computed on one
    int64 key ``(a - min a) * (span of b) + (b - min b)`` (a 1-D sort, several times faster)."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    if not len(a):
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.int64)
    a0, b0 = int(a.min()), int(b.min())
    width, height = int(b.max()) - b0 + 1, int(a.max()) - a0 + 1
    if width * height >= 2 ** 62:  # the key would overflow int64
        pairs, inverse = np.unique(np.stack([a, b], axis=1), axis=0, return_inverse=True)
        return pairs, np.asarray(inverse).reshape(-1)
    keys, inverse = np.unique((a - a0) * width + (b - b0), return_inverse=True)
    pairs = np.stack([keys // width + a0, keys % width + b0], axis=1)
    return pairs, np.asarray(inverse).reshape(-1)


def rank_streams(timeline: Timeline) -> tuple[tuple[int, int], ...]:
    """The (rank, stream code) pairs that have spans, sorted by rank then stream code.

    Both charts of a run (the Gantt picture and the HTML report) plan their rows from these, so
    they are computed once per timeline and kept on it, valid while its ``rank`` and ``stream``
    columns are the same arrays (a timeline's columns are not modified in place once built)."""
    rank, stream = timeline["rank"], timeline["stream"]
    memo = getattr(timeline, "_rank_streams", None)
    if memo is not None and memo[0] is rank and memo[1] is stream:
        return memo[2]
    pairs = tuple((r, s) for r, s in unique_pairs(rank, stream)[0].tolist())
    timeline._rank_streams = (rank, stream, pairs)
    return pairs


def row_of_spans(timeline: Timeline, rows: list[tuple[int, str]]) -> np.ndarray:
    """For every span, the index of its (rank, stream) in ``rows``; -1 for a span on no row."""
    if not rows:
        return np.full(len(timeline), -1, dtype=np.int64)
    n_streams = len(STREAMS)
    keys = np.array([r * n_streams + STREAMS.index(s) for r, s in rows], dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    span_keys = timeline["rank"].astype(np.int64) * n_streams + timeline["stream"].astype(np.int64)
    pos = np.searchsorted(sorted_keys, span_keys).clip(0, len(rows) - 1)
    return np.where(sorted_keys[pos] == span_keys, order[pos], -1)


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
    """The (rank, stream) rows a Gantt chart draws, top to bottom (see :func:`plan_rows`)."""
    return plan_rows(timeline, textbook, ranks, streams, max_rows).rows


@dataclass(frozen=True)
class Window:
    """A time window: seconds (``unit="s"``) or micro-batches ``start`` to ``end`` - 1
    (``unit="mb"``: from the first start to the last end of those micro-batches' spans); or the
    whole timeline on a time axis from 0 to ``end`` (``unit="axis"``, ``--xlim``), so charts of
    timelines of different lengths share one axis."""

    unit: str
    start: float
    end: float
    text: str

    def describe(self) -> str:
        if self.unit == "axis":
            return f"time axis 0 to {self.end:g}"
        if self.unit == "mb":
            first, last = int(self.start), int(self.end) - 1
            return f"micro-batch {first}" if first == last else f"micro-batches {first} to {last}"
        return f"{self.start:g} s to {self.end:g} s"


def parse_window(text: str) -> Window:
    """``START:END`` in seconds (``0.5:1.25``) or a micro-batch range ``mb:A:B`` (micro-batches
    ``A`` to ``B - 1``, as a Python slice); ValueError with a one-line message otherwise."""
    expected = "expected START:END in seconds (e.g. 0.5:1.25) or mb:A:B (micro-batches A to B-1)"
    parts = text.strip().split(":")
    if len(parts) == 3 and parts[0].strip().lower() == "mb":
        try:
            a, b = int(parts[1]), int(parts[2])
        except ValueError:
            raise ValueError(f"invalid window {text!r}: {expected}") from None
        if a < 0 or b <= a:
            raise ValueError(f"invalid window {text!r}: needs 0 <= A < B")
        return Window("mb", float(a), float(b), text)
    if len(parts) != 2:
        raise ValueError(f"invalid window {text!r}: {expected}")
    try:
        start, end = float(parts[0]), float(parts[1])
    except ValueError:
        raise ValueError(f"invalid window {text!r}: {expected}") from None
    if not (math.isfinite(start) and math.isfinite(end) and 0 <= start < end):
        raise ValueError(f"invalid window {text!r}: needs 0 <= START < END seconds")
    return Window("s", start, end, text)


def window_bounds(timeline: Timeline, window: Window) -> tuple[float, float]:
    """``window`` in seconds on ``timeline``; a micro-batch range the timeline does not hold, or a
    window after its end, is refused naming what it holds."""
    if window.unit == "axis":
        if len(timeline) and timeline.end_s > window.end:
            raise SimtrainError(f"--xlim {window.text}: the timeline ends at {timeline.end_s:.6g}, after it; give "
                                f"at least that to draw it whole on a shared axis (--window draws a part)")
        return 0.0, window.end
    if window.unit == "s":
        if len(timeline) and window.start >= timeline.end_s:
            raise SimtrainError(f"--window {window.text}: starts after the step's end "
                                f"({timeline.end_s:.6g} s)")
        return window.start, window.end
    mb = timeline["mb"]
    sel = (mb >= window.start) & (mb < window.end)
    if not sel.any():
        held = mb[mb >= 0]
        what = f"micro-batches 0 to {int(held.max())}" if len(held) else "no micro-batches"
        raise SimtrainError(f"--window {window.text}: no span of {window.describe()}; the timeline "
                            f"holds {what}")
    return float(timeline["start_s"][sel].min()), float(timeline["end_s"][sel].max())


@dataclass(frozen=True)
class ChartOptions:
    """What the Gantt picture of a run shows: some ranks, some streams, a time window (None:
    all of them, the whole step)."""

    ranks: tuple[int, ...] | None = None
    streams: tuple[str, ...] | None = None
    window: Window | None = None


def chart_options(ranks: str | None = None, streams: str | None = None,
                  window: str | None = None, xlim: float | None = None) -> ChartOptions:
    """The options ``--ranks R,R,...``, ``--streams S,S,...``, ``--window`` and ``--xlim`` (the
    end of the time axis) as given (None: not given), checked; a bad one is refused in one line
    naming the flag and the value."""
    rank_list = None
    if ranks is not None:
        try:
            rank_list = tuple(int(x) for x in str(ranks).split(",") if x.strip())
        except ValueError:
            rank_list = ()
        if not rank_list or min(rank_list) < 0:
            raise SimtrainError(f"--ranks {ranks}: expected rank numbers >= 0 separated by commas, e.g. 0,16")
    stream_list = None
    if streams is not None:
        stream_list = check_streams(x.strip() for x in str(streams).split(",") if x.strip())
        if not stream_list:
            raise SimtrainError(f"--streams {streams}: expected stream names separated by commas; known: "
                                f"{', '.join(STREAMS)}")
    try:
        parsed = parse_window(window) if window is not None else None
    except ValueError as exc:
        raise SimtrainError(f"--window: {exc}") from None
    if xlim is not None:
        if parsed is not None:
            raise SimtrainError(f"--xlim {xlim:g} and --window {window}: both set the time axis; give one")
        if not 0 < xlim < math.inf:
            raise SimtrainError(f"--xlim {xlim:g}: must be a finite number > 0")
        parsed = Window("axis", 0.0, float(xlim), f"{xlim:g}")
    return ChartOptions(rank_list, stream_list, parsed)


def chunk_index(timeline: Timeline) -> np.ndarray:
    """For every span: which of its rank's stages (model chunks) it belongs to, 0 for the
    lowest-numbered stage the rank holds (and for spans of no stage, such as the optimizer's).
    The charts draw chunk ``c`` in shade ``min(c, len(CHUNK_LIGHTEN) - 1)``."""
    rank = timeline["rank"].astype(np.int64)
    stage = timeline["stage"].astype(np.int64)
    chunks = np.zeros(len(timeline), dtype=np.int64)
    has = stage >= 0
    if not has.any():
        return chunks
    pairs, inverse = unique_pairs(rank[has], stage[has])
    first_of_rank = np.searchsorted(pairs[:, 0], pairs[:, 0], side="left")
    chunks[has] = (np.arange(len(pairs)) - first_of_rank)[inverse]
    return chunks
