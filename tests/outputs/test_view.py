"""What a chart shows: rows by rank and stream, representative subsets, refused ranks and streams,
time windows in seconds or micro-batches, chart options as given on the command line, chunk
shades; the distinct (rank, stream) and (rank, stage) pairs found on one 1-D key as
``np.unique(..., axis=0)`` finds them, the row pairs once per timeline."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import add_span, assert_user_error, two_rank_timeline
from simtrain import api
from simtrain.errors import SimtrainError
from simtrain.outputs.view import (ChartOptions, Window, chart_options, chunk_index, gantt_rows, parse_window,
                                   plan_rows, rank_streams, row_of_spans, unique_pairs, window_bounds)
from simtrain.engine.timeline import TimelineBuilder
from simtrain.units import MS


def many_rank_timeline(n_ranks: int, streams=("compute", "tp")):
    b = TimelineBuilder()
    for r in range(n_ranks):
        for s in streams:
            kind = "F" if s == "compute" else s[:2]
            add_span(b, r, s, kind, f"{s}.op", r * 1e-4, r * 1e-4 + 1e-3, mb=r % 4)
    return b.build()


# ---------------------------------------------------------------- rows


@pytest.mark.quick
def test_rows_ordered_by_rank_then_stream_order():
    tl = two_rank_timeline()
    assert gantt_rows(tl, False, None, None, 64) == [
        (0, "compute"), (0, "tp"), (0, "pp_send"), (0, "pp_recv"),
        (1, "compute"), (1, "pp_send"), (1, "pp_recv"),
    ]


@pytest.mark.quick
def test_rows_textbook_one_per_rank_and_filters():
    tl = two_rank_timeline()
    assert gantt_rows(tl, True, None, None, 64) == [(0, "compute"), (1, "compute")]
    assert gantt_rows(tl, False, [1], None, 64) == [(1, "compute"), (1, "pp_send"), (1, "pp_recv")]
    assert gantt_rows(tl, True, [1], None, 64) == [(1, "compute")]
    assert gantt_rows(tl, False, None, ["tp", "compute"], 64) == [
        (0, "compute"), (0, "tp"), (1, "compute")]
    with pytest.raises(SimtrainError, match="unknown stream.*nvlink.*known: compute"):
        gantt_rows(tl, False, None, ["nvlink"], 64)


@pytest.mark.quick
def test_row_of_spans_maps_each_span_to_its_row():
    tl = two_rank_timeline()
    rows = [(1, "compute"), (0, "tp")]
    got = row_of_spans(tl, rows)
    for i in range(len(tl)):
        span = tl.span(i)
        assert got[i] == (rows.index((span.rank, span.stream)) if (span.rank, span.stream) in rows else -1)
    assert (row_of_spans(tl, []) == -1).all()


@pytest.mark.quick
def test_a_rank_the_timeline_does_not_hold_is_refused_naming_the_ones_it_does():
    with pytest.raises(SimtrainError, match=r"--ranks 1,5: rank\(s\) 5 not in the timeline; it holds ranks 0, 1"):
        plan_rows(two_rank_timeline(), ranks=[5, 1])


@pytest.mark.quick
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
    assert len(plan_rows(tl, max_rows=None).rows) == 200
    with pytest.raises(SimtrainError, match="max_rows=0"):
        gantt_rows(tl, False, None, None, 0)


def test_gantt_rows_cover_every_simulated_rank():
    result = api.simulate(api.resolve(None))
    rows = gantt_rows(result.timeline)
    assert sorted({rank for rank, _ in rows}) == result.timeline.ranks
    assert len(result.timeline.ranks) == result.report["simulated_ranks"] == 4


# ---------------------------------------------------------------- windows


@pytest.mark.quick
def test_parse_window_seconds_and_micro_batches():
    assert parse_window("0.5:1.25") == Window("s", 0.5, 1.25, "0.5:1.25")
    assert parse_window("mb:2:4") == Window("mb", 2.0, 4.0, "mb:2:4")
    assert parse_window("MB:0:1").describe() == "micro-batch 0"
    assert parse_window("mb:0:4").describe() == "micro-batches 0 to 3"
    assert parse_window("0:2e-3").describe() == "0 s to 0.002 s"
    for bad, words in [("1", "expected START:END"), ("a:b", "expected START:END"), ("2:1", "START < END"),
                       ("-1:1", "START < END"), ("mb:3:3", "A < B"), ("mb:x:2", "mb:A:B"), ("0:inf", "START < END")]:
        with pytest.raises(ValueError, match=words):
            parse_window(bad)


@pytest.mark.quick
def test_window_bounds_on_a_timeline():
    tl = two_rank_timeline()
    assert window_bounds(tl, parse_window("0.001:0.002")) == (0.001, 0.002)
    # micro-batch 1: from its first F (2 ms) to the end of its last span (F on rank 1, 5.7 ms)
    assert window_bounds(tl, parse_window("mb:1:2")) == pytest.approx((2 * MS, 5.7 * MS))
    # micro-batch 0 includes its backward, which ends the step at 11 ms
    assert window_bounds(tl, parse_window("mb:0:1")) == pytest.approx((0.0, 11 * MS))
    with pytest.raises(SimtrainError, match="--window mb:5:9: no span of micro-batches 5 to 8; the timeline "
                                            "holds micro-batches 0 to 1"):
        window_bounds(tl, parse_window("mb:5:9"))
    with pytest.raises(SimtrainError, match=r"--window 1:2: starts after the step's end \(0.011 s\)"):
        window_bounds(tl, parse_window("1:2"))


@pytest.mark.quick
def test_chart_options_check_what_the_user_gave():
    assert chart_options() == ChartOptions()
    opts = chart_options("0, 16", "tp,compute", "mb:0:2")
    assert opts.ranks == (0, 16) and opts.streams == ("compute", "tp") and opts.window.unit == "mb"
    for args, words in [(("a",), "--ranks a: expected rank numbers"), (("-1",), "--ranks -1"),
                        ((None, "gpu"), "--streams gpu: unknown stream"),
                        ((None, None, "3"), "--window: invalid window '3'")]:
        with pytest.raises(SimtrainError, match=words):
            chart_options(*args)


def test_bad_chart_flags_fail_before_simulating_in_one_line(tmp_path):
    assert_user_error("run", "--window", "mb:2:1", "--out", tmp_path, contains="--window")
    assert_user_error("run", "--streams", "compute,nvlink", "--out", tmp_path, contains=("--streams", "nvlink"))
    assert_user_error("run", "--ranks", "1", "--out", tmp_path, contains=("--ranks 1", "0, 16, 32, 48"))
    assert not (tmp_path / "timeline.png").exists()


# ---------------------------------------------------------------- chunks


@pytest.mark.quick
def test_chunk_index_counts_a_ranks_stages_from_its_lowest():
    b = TimelineBuilder()
    for rank, stages in ((0, (0, 3, 4, 7, 8)), (1, (1, 2))):
        for s in stages:
            add_span(b, rank, "compute", "F", "f", s * 1.0, s + 0.5, stage=s)
    add_span(b, 0, "compute", "opt", "optimizer", 9.0, 9.5, stage=-1)
    tl = b.build()
    chunks = dict(zip(zip(tl["rank"].tolist(), tl["stage"].tolist()), chunk_index(tl).tolist()))
    assert chunks == {(0, 0): 0, (0, 3): 1, (0, 4): 2, (0, 7): 3, (0, 8): 4, (1, 1): 0, (1, 2): 1, (0, -1): 0}
    assert chunk_index(TimelineBuilder().build()).tolist() == []
    assert np.all(chunk_index(many_rank_timeline(3)) == 0)


# ---------------------------------------------------------------- pairs on a 1-D key


def unique_rows_reference(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pairs, inverse = np.unique(np.stack([a, b], axis=1).astype(np.int64), axis=0, return_inverse=True)
    return pairs, np.asarray(inverse).reshape(-1)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("low, high", [(0, 4), (-1, 3), (-50, 50), (-3, 200_000)])
def test_unique_pairs_match_unique_rows(seed, low, high):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 2_000))
    a = rng.integers(low, high, n).astype(np.int32)
    b = rng.integers(-1, 9, n).astype(np.int32)  # stage-like: -1 where there is none
    pairs, inverse = unique_pairs(a, b)
    want_pairs, want_inverse = unique_rows_reference(a, b)
    assert pairs.dtype == np.int64 and pairs.shape == want_pairs.shape
    assert np.array_equal(pairs, want_pairs)
    assert np.array_equal(inverse, want_inverse)
    assert np.array_equal(pairs[inverse], np.stack([a, b], axis=1))


def test_unique_pairs_edge_cases():
    empty = np.zeros(0, dtype=np.int32)
    pairs, inverse = unique_pairs(empty, empty)
    assert pairs.shape == (0, 2) and inverse.shape == (0,)
    one = np.array([-1], dtype=np.int32)
    assert unique_pairs(one, one)[0].tolist() == [[-1, -1]]
    big = np.array([-2 ** 31, 2 ** 31 - 1, 0, -2 ** 31], dtype=np.int64)
    wide = np.array([2 ** 31 - 1, -2 ** 31, 5, 2 ** 31 - 1], dtype=np.int64)  # the key would overflow
    for got, want in zip(unique_pairs(big, wide), unique_rows_reference(big, wide)):
        assert np.array_equal(got, want)


def test_chunk_index_matches_unique_rows_on_random_stages():
    rng = np.random.default_rng(7)
    b = TimelineBuilder()
    for i in range(400):
        add_span(b, int(rng.integers(0, 16)), "compute", "F", "f", i * 1e-3, i * 1e-3 + 5e-4,
                 stage=int(rng.integers(-1, 12)))
    tl = b.build()
    rank, stage = tl["rank"].astype(np.int64), tl["stage"].astype(np.int64)
    has = stage >= 0
    pairs, inverse = unique_rows_reference(rank[has], stage[has])
    first = np.searchsorted(pairs[:, 0], pairs[:, 0], side="left")
    want = np.zeros(len(tl), dtype=np.int64)
    want[has] = (np.arange(len(pairs)) - first)[inverse]
    assert np.array_equal(chunk_index(tl), want)


def test_row_pairs_are_computed_once_per_timeline():
    b = TimelineBuilder()
    for r, s in ((1, "tp"), (0, "compute"), (1, "compute"), (0, "pp_send")):
        add_span(b, r, s, "F", "f", 0.0, 1.0)
    tl = b.build()
    first = rank_streams(tl)
    assert rank_streams(tl) is first  # kept on the timeline
    assert plan_rows(tl, max_rows=None).rows == [(0, "compute"), (0, "pp_send"), (1, "compute"), (1, "tp")]
    assert plan_rows(tl, ranks=[1], streams=["tp"]).rows == [(1, "tp")]
    tl.cols = dict(tl.cols, rank=np.zeros(len(tl), dtype=np.int32))  # other columns: planned afresh
    assert plan_rows(tl, max_rows=None).rows == [(0, "compute"), (0, "tp"), (0, "pp_send")]  # STREAMS order
