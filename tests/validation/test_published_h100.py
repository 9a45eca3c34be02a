"""The simulator against the 12 published H100 runs (``published_h100.py``): every case runs, and
each source set stays within its limits of :data:`~validation.published_h100.LIMITS`.

Rows are simulated once per session and shared by the test workers (``shared_rows``)."""

from __future__ import annotations

import pytest

from validation.published_h100 import LIMITS, SETS, Row, load_cases, run_case, set_errors
from validation.shared_rows import cached_row, shared_folder

CASES = load_cases()


@pytest.fixture(scope="session")
def shared(tmp_path_factory):
    return shared_folder(tmp_path_factory, "published_h100_rows")


def _row(shared, i: int) -> Row:
    return cached_row(shared, f"row{i}", lambda: run_case(CASES[i]), lambda d: Row(**d))


def test_twelve_cases_in_three_sets():
    assert len(CASES) == 12 and {c["set"] for c in CASES} == set(SETS) == set(LIMITS)


@pytest.mark.parametrize("i", range(len(CASES)), ids=[c["name"] for c in CASES])
def test_case_runs_within_its_sets_limit(shared, i):
    row = _row(shared, i)
    assert row.predicted_s is not None, row.pending
    limit = LIMITS[row.set][1]
    assert abs(row.error_pct) <= limit, f"{row.name}: {row.error_pct:+.1f}% (limit {limit}%)"


@pytest.mark.parametrize("key", list(SETS))
def test_mean_error_per_set(shared, key):
    rows = [_row(shared, i) for i, case in enumerate(CASES) if case["set"] == key]
    mean, _, pending = set_errors(rows)[key]
    assert pending == 0 and mean <= LIMITS[key][0], f"{SETS[key]}: mean |error| {mean:.1f}%"
