"""The charts' distinct (rank, stream) and (rank, stage) pairs, found on one 1-D integer key, are
what ``np.unique(..., axis=0)`` finds (rows in the same order, the same inverse), negative and
wide-ranging values included; the row pairs are computed once per timeline."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import add_span
from simtrain.outputs.view import chunk_index, plan_rows, rank_streams, unique_pairs
from simtrain.timeline import TimelineBuilder


def reference(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
    want_pairs, want_inverse = reference(a, b)
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
    for got, want in zip(unique_pairs(big, wide), reference(big, wide)):
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
    pairs, inverse = reference(rank[has], stage[has])
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
