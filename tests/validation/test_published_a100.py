"""The simulator against the 18 published A100 runs (``published_a100.py``): every row runs, each
paper's mean |error| stays within 5% and no row beyond 10%."""

from __future__ import annotations

import pytest

from validation.published_a100 import MEAN_LIMIT_PCT, PAPERS, ROW_LIMIT_PCT, paper_errors, run_all


@pytest.fixture(scope="module")
def rows():
    return run_all()


def test_every_row_runs(rows):
    assert len(rows) == 18
    assert [r.name for r in rows if r.predicted_s is None] == []


@pytest.mark.parametrize("paper", list(PAPERS))
def test_mean_error_per_paper(rows, paper):
    mean, _, _ = paper_errors(rows)[paper]
    assert mean <= MEAN_LIMIT_PCT, f"{PAPERS[paper]}: mean |error| {mean:.1f}%"


def test_no_row_beyond_the_limit(rows):
    worst = {r.name: round(r.error_pct, 1) for r in rows if r.predicted_s is not None and abs(r.error_pct) > ROW_LIMIT_PCT}
    assert not worst, worst
