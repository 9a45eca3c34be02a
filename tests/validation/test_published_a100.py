"""The simulator against the 18 published A100 runs (``published_a100.py``): every row runs, each
paper's mean |error| stays within 5% and no row beyond 10%.

Each row is one test, so parallel test workers share the rows; a row's result is kept in a
folder the workers of one session share (each row simulated once, under a lock file), and the
per-paper means read the rows from there."""

from __future__ import annotations

import pytest

from validation.published_a100 import (MEAN_LIMIT_PCT, PAPERS, ROW_LIMIT_PCT, Row, load_cases, paper_errors,
                                       run_case)
from validation.shared_rows import cached_row, shared_folder

CASES = load_cases()


@pytest.fixture(scope="session")
def shared(tmp_path_factory):
    return shared_folder(tmp_path_factory, "published_a100_rows")


def _row(shared, i: int) -> Row:
    return cached_row(shared, f"row{i}", lambda: run_case(CASES[i]), lambda d: Row(**d))


@pytest.mark.quick  # the data's shape; the rows' simulations are minutes
def test_eighteen_cases():
    assert len(CASES) == 18


@pytest.mark.parametrize("i", range(len(CASES)), ids=[c["name"] for c in CASES])
def test_row_runs_within_the_limit(shared, i):
    row = _row(shared, i)
    assert row.predicted_s is not None, row.pending
    assert abs(row.error_pct) <= ROW_LIMIT_PCT, f"{row.name}: {row.error_pct:+.1f}%"


@pytest.mark.parametrize("paper", list(PAPERS))
def test_mean_error_per_paper(shared, paper):
    rows = [_row(shared, i) for i, case in enumerate(CASES) if case["set"] == paper]
    mean, _, pending = paper_errors(rows)[paper]
    assert pending == 0 and mean <= MEAN_LIMIT_PCT, f"{PAPERS[paper]}: mean |error| {mean:.1f}%"
