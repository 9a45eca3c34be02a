"""Executors: local and dask give the same results as a plain loop; a search on a dask
LocalCluster ranks exactly as the local one and resumes from the same results file; one-line
errors for a missing dask, an unknown executor and a stray --scheduler."""

from __future__ import annotations

import sys

import pytest

from helpers import assert_user_error, cli_json
from simtrain.errors import SpecError
from simtrain.executors import check_executor, run_unordered

SEARCH = ("search", "--model", "llama3-8b", "--topology", "seed-h100", "--gpus", 8, "--seq", 8192,
          "--gbs", 64, "--top", 3)


def square(x: int) -> int:
    return x * x


@pytest.mark.quick
def test_local_serial_and_pool_give_every_result():
    items = list(range(7))
    assert sorted(run_unordered(square, items, jobs=1)) == [(x, x * x) for x in items]
    assert sorted(run_unordered(square, items, jobs=2)) == [(x, x * x) for x in items]
    assert list(run_unordered(square, [], jobs=2)) == []


@pytest.mark.quick
def test_errors_name_the_flag_and_the_fix(monkeypatch):
    with pytest.raises(SpecError, match=r"--executor mpi: unknown executor; valid: local, dask"):
        check_executor("mpi", None)
    with pytest.raises(SpecError, match=r"--scheduler tcp://h:8786: only valid with --executor dask"):
        check_executor("local", "tcp://h:8786")
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed
    with pytest.raises(SpecError, match=r"dask.distributed is not installed; pip install 'simtrain\[dist\]'"):
        check_executor("dask", None)


@pytest.mark.quick
def test_search_with_stray_scheduler_is_one_line():
    assert_user_error(*SEARCH, "--scheduler", "tcp://h:8786", contains="--scheduler tcp://h:8786")


def test_dask_local_cluster_search_equals_local_and_resumes(tmp_path):
    pytest.importorskip("distributed")
    local = cli_json(*SEARCH, "--jobs", 1)
    results = tmp_path / "r.jsonl"
    remote = cli_json(*SEARCH, "--executor", "dask", "--jobs", 2, "--results", results)
    assert remote["ranking"] == local["ranking"]
    assert remote["spearman"] == local["spearman"]
    lines = results.read_text().splitlines()
    assert len(lines) == 3
    results.write_text(lines[0] + "\n")  # one candidate done before an interruption
    resumed = cli_json(*SEARCH, "--executor", "dask", "--jobs", 2, "--results", results, "--resume")
    assert resumed["ranking"] == local["ranking"]
    assert len(results.read_text().splitlines()) == 3
