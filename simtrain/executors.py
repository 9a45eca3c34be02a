"""Where a search's candidates run: on this machine or on a dask.distributed cluster.

:func:`run_unordered` applies a picklable function to items and yields ``(item, result)`` as each
finishes, in completion order:

* ``local``: in this process (``jobs`` = 1) or a pool of ``jobs`` processes
  (:class:`concurrent.futures.ProcessPoolExecutor`);
* ``dask``: tasks on a dask.distributed cluster (the ``dist`` extra, ``pip install
  'simtrain[dist]'``): the scheduler at ``scheduler`` (``tcp://host:8786``), or, without one, a
  ``LocalCluster`` of ``jobs`` single-threaded worker processes started for the call and shut
  down after it (dask.distributed documentation, "Quickstart" and ``distributed.LocalCluster``).

The function is deterministic, so a result does not depend on where it ran; the caller records
each result as it arrives (a search appends it to its results file).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

from simtrain.errors import SpecError
from simtrain.settings import EXECUTORS

T = TypeVar("T")
R = TypeVar("R")

INSTALL_HINT = "pip install 'simtrain[dist]'"


def check_executor(executor: str, scheduler: str | None) -> None:
    """One-line errors for an unknown executor, a scheduler without dask, or dask not installed."""
    if executor not in EXECUTORS:
        raise SpecError(f"--executor {executor}: unknown executor; valid: {', '.join(EXECUTORS)}")
    if scheduler is not None and executor != "dask":
        raise SpecError(f"--scheduler {scheduler}: only valid with --executor dask")
    if executor == "dask":
        _distributed()


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise SpecError(f"--executor dask: dask.distributed is not installed; {INSTALL_HINT}") from None
    return distributed


def run_unordered(fn: Callable[[T], R], items: Iterable[T], *, executor: str = "local", jobs: int = 1,
                  scheduler: str | None = None) -> Iterator[tuple[T, R]]:
    """``(item, fn(item))`` for every item as it finishes (module docstring)."""
    check_executor(executor, scheduler)
    todo = list(items)
    if not todo:
        return
    if executor == "dask":
        yield from _run_dask(fn, todo, jobs, scheduler)
    elif jobs <= 1:
        for item in todo:
            yield item, fn(item)
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo))) as pool:
            futures = {pool.submit(fn, item): item for item in todo}
            for fut in as_completed(futures):
                yield futures[fut], fut.result()


def _run_dask(fn: Callable[[T], R], todo: list[T], jobs: int, scheduler: str | None) -> Iterator[tuple[T, R]]:
    distributed = _distributed()
    cluster = None
    try:
        if scheduler is None:
            cluster = distributed.LocalCluster(n_workers=max(1, min(jobs, len(todo))), threads_per_worker=1,
                                               processes=True, dashboard_address=None)
            client = distributed.Client(cluster)
        else:
            client = distributed.Client(scheduler, timeout="20s")
    except OSError as exc:
        raise SpecError(f"--scheduler {scheduler}: cannot reach the dask scheduler ({exc}); start one with "
                        f"`dask scheduler` or leave --scheduler out for a local cluster") from None
    try:
        # pure=False: every candidate is its own task even if two compare equal
        futures = client.map(fn, todo, pure=False)
        index = {fut.key: i for i, fut in enumerate(futures)}
        for fut in distributed.as_completed(futures):
            yield todo[index[fut.key]], fut.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
