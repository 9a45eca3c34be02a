"""Gantt charts on small hand-built timelines: rows, representative subsets, PNG and SVG, refused
suffixes; a simulated run has a row for every simulated rank."""

from __future__ import annotations

import struct

import pytest

from helpers import add_span, two_rank_timeline
from simtrain import api
from simtrain.outputs.gantt import draw_gantt, gantt_rows, plan_rows
from simtrain.timeline import TimelineBuilder


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def many_rank_timeline(n_ranks: int, streams=("compute", "tp")):
    b = TimelineBuilder()
    for r in range(n_ranks):
        for s in streams:
            kind = "F" if s == "compute" else s[:2]
            add_span(b, r, s, kind, f"{s}.op", r * 1e-4, r * 1e-4 + 1e-3, mb=r % 4)
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


def test_gantt_rows_cover_every_simulated_rank(tmp_path):
    result = api.simulate(api.resolve(None))
    rows = gantt_rows(result.timeline)
    assert sorted({rank for rank, _ in rows}) == result.timeline.ranks
    assert len(result.timeline.ranks) == result.report["simulated_ranks"] == 4


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
