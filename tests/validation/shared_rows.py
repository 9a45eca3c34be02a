"""One simulated row per published case per test session, shared by the parallel test workers,
and the per-set error summary of the published tables.

A row is kept as JSON in a folder every worker of the session sees (the session's base folder
under pytest-xdist); the first worker to need it simulates it under a lock file, the others wait
for the file (at most :data:`WAIT_S`, then simulate it themselves)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
WAIT_S = 900  # longest wait for a row another worker simulates before simulating it here


def shared_folder(tmp_path_factory: Any, name: str) -> Path:
    """A folder every worker of this session sees."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    folder.mkdir(exist_ok=True)
    return folder


def cached_row(folder: Path, key: str, run: Callable[[], T], load: Callable[[dict[str, Any]], T]) -> T:
    """The row ``key``: read from ``folder``, or made by ``run`` (once per session) and stored."""
    done, lock = folder / f"{key}.json", folder / f"{key}.lock"
    deadline = time.monotonic() + WAIT_S
    while not done.exists():
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            if time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            return run()
        try:
            row = run()
            tmp = folder / f"{key}.tmp"
            tmp.write_text(json.dumps(asdict(row)), encoding="utf-8")  # type: ignore[call-overload]
            tmp.replace(done)
            return row
        finally:
            os.close(fd)
    return load(json.loads(done.read_text(encoding="utf-8")))


def group_errors(rows: Iterable[Any], groups: Iterable[str], group_of: Callable[[Any], str]) -> dict[str, tuple[float, float, int]]:
    """Per group: (mean |error| %, largest |error| %, rows that do not run) of ``rows``, each a
    row with ``predicted_s`` (None: it does not run) and ``error_pct``."""
    rows = list(rows)
    out = {}
    for key in groups:
        done = [abs(r.error_pct) for r in rows if group_of(r) == key and r.predicted_s is not None]
        pending = sum(1 for r in rows if group_of(r) == key and r.predicted_s is None)
        out[key] = (sum(done) / len(done) if done else float("nan"), max(done, default=0.0), pending)
    return out
