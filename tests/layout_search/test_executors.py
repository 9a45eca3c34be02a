"""Executors: local and dask give the same results as a plain loop; a search on a dask
LocalCluster ranks exactly as the local one and resumes from the same results file; one-line
errors for a missing dask, an unknown executor and a stray --scheduler."""

from __future__ import annotations

import re
import sys

import pytest

from helpers import assert_user_error, cli_json
from simtrain.errors import SpecError
from simtrain.layout_search.executors import check_executor, run_unordered

SEARCH = ("search", "--model", "llama3-8b", "--topology", "seed-h100", "--gpus", 8, "--seq", 8192,
          "--gbs", 64, "--top", 1)


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
    top = 1  # the proven top K; with more jobs a few more candidates may have run beside it
    assert remote["ranking"][:top] == local["ranking"][:top]
    lines = results.read_text().splitlines()
    assert len(lines) == remote["candidates_simulated"] >= 2
    results.write_text(lines[0] + "\n")  # one candidate done before an interruption
    resumed = cli_json(*SEARCH, "--executor", "dask", "--jobs", 2, "--results", results, "--resume")
    assert resumed["ranking"][:top] == local["ranking"][:top]
    assert len(results.read_text().splitlines()) == len(lines)


@pytest.mark.quick
@pytest.mark.parametrize("address, message", [
    ("notaurl", "--scheduler 'notaurl': expected SCHEME://HOST:PORT (e.g. tcp://10.0.0.5:8786): no host and port"),
    ("tcp://", "--scheduler 'tcp://': expected SCHEME://HOST:PORT"),
    ("tcp://localhost:abc", "--scheduler 'tcp://localhost:abc': port 'abc' must be a whole number from 1 to 65535"),
    ("foo://127.0.0.1:1", "--scheduler 'foo://127.0.0.1:1': unknown address scheme 'foo'; expected SCHEME://HOST:PORT "
                          "with a scheme of tcp, tls, ws, wss, ucx"),
    ("inproc://127.0.0.1/1/1", "inproc:// reaches only a scheduler inside this process"),
    ("tls://x", "--scheduler 'tls://x': expected SCHEME://HOST:PORT"),
    ("tcp://127.0.0.1:99999", "port '99999' must be a whole number from 1 to 65535"),
    ("tcp://127.0.0.1:0", "port '0' must be a whole number from 1 to 65535"),
    ("tcp://:8786", "no host and port"),
])
def test_a_scheduler_address_is_checked_before_connecting(address, message):
    """Each was a ValueError or TypeError from dask (port 99999 waited 20 s)."""
    with pytest.raises(SpecError, match=re.escape(message)):
        check_executor("dask", address)
    line = assert_user_error(*SEARCH, "--executor", "dask", "--scheduler", address, contains=message)
    assert len(line) < 300


@pytest.mark.quick
def test_good_scheduler_addresses_pass():
    from simtrain.layout_search.executors import check_scheduler

    for address in ("tcp://10.0.0.5:8786", "10.0.0.5:8786", "tls://sched.example:8786", "tcp://[::1]:8786",
                    "ws://h:1", "ucx://h:65535"):
        check_scheduler(address)


def test_an_unreachable_scheduler_is_one_line_within_seconds():
    pytest.importorskip("distributed")
    import socket
    import time

    with socket.socket() as free:  # a port nobody listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    started = time.monotonic()
    assert_user_error(*SEARCH, "--top", 1, "--executor", "dask", "--scheduler", f"tcp://127.0.0.1:{port}",
                      contains=f"--scheduler tcp://127.0.0.1:{port}: cannot reach the dask scheduler")
    assert time.monotonic() - started < 15
