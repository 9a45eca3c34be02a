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

Local worker processes die with the process that started them: each asks the kernel for SIGKILL
when its parent ends (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, Linux ``prctl(2)``), and a watchdog
thread exits the worker when its parent process changes (every platform, within
:data:`WATCH_INTERVAL_S`), so a parent killed with SIGKILL leaves no worker behind. Workers ignore
SIGINT (a terminal's Ctrl-C reaches the whole process group; the parent answers it); the parent
blocks SIGINT and SIGTERM while it starts them, so neither is handled halfway through a fork and
a worker takes its own dispositions before it sees one (POSIX ``pthread_sigmask``; skipped where
missing). When the caller stops early (an interruption, an error, the generator closed), the
workers are killed at once instead of finishing their candidates.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from simtrain.errors import SimulationError, SpecError
from simtrain.settings import EXECUTORS

T = TypeVar("T")
R = TypeVar("R")

INSTALL_HINT = "pip install 'simtrain[dist]'"
#: ``PR_SET_PDEATHSIG`` of ``<linux/prctl.h>``: the signal a process gets when its parent ends.
PR_SET_PDEATHSIG = 1
#: The signals that stop a command (:mod:`simtrain.cli.main`).
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})
#: How often (seconds) a worker's watchdog looks for a change of its parent process.
WATCH_INTERVAL_S = 0.2
#: dask.distributed's address schemes that reach a scheduler in another process
#: (``distributed.comm.registry``; ``inproc://`` addresses one inside this process only).
SCHEDULER_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")
#: How long (seconds) connecting to a ``--scheduler`` may take before it is an error.
CONNECT_TIMEOUT_S = 5


def check_executor(executor: str, scheduler: str | None) -> None:
    """One-line errors for an unknown executor, a scheduler without dask, or dask not installed."""
    if executor not in EXECUTORS:
        raise SpecError(f"--executor {executor}: unknown executor; valid: {', '.join(EXECUTORS)}")
    if scheduler is not None and executor != "dask":
        raise SpecError(f"--scheduler {scheduler}: only valid with --executor dask")
    if scheduler is not None:
        check_scheduler(scheduler)
    if executor == "dask":
        _distributed()


def check_scheduler(address: str) -> None:
    """A one-line error unless ``address`` is ``[SCHEME://]HOST:PORT`` with a scheme of
    :data:`SCHEDULER_SCHEMES` (tcp when none is given, as dask reads it), a host and a port from
    1 to 65535; nothing is connected to.

    >>> check_scheduler("tcp://10.0.0.5:8786"), check_scheduler("[::1]:8786")
    (None, None)
    """
    from simtrain.specs.strict import shown

    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    where = f"--scheduler {shown(address)}"
    if scheme not in SCHEDULER_SCHEMES:
        raise SpecError(f"{where}: unknown address scheme {shown(scheme)}; expected SCHEME://HOST:PORT with a scheme "
                        f"of {', '.join(SCHEDULER_SCHEMES)} (e.g. tcp://10.0.0.5:8786)"
                        + ("; inproc:// reaches only a scheduler inside this process" if scheme == "inproc" else ""))
    host, colon, port = rest.rpartition(":")
    if host.startswith("[") and host.endswith("]"):  # an IPv6 address
        host = host[1:-1]
    if not colon or not host or any(c.isspace() or c in "/[]" for c in host):
        raise SpecError(f"{where}: expected SCHEME://HOST:PORT (e.g. tcp://10.0.0.5:8786): no host and port")
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 1 <= int(port) <= 65535):
        raise SpecError(f"{where}: port {shown(port)} must be a whole number from 1 to 65535")


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
        yield from _run_pool(fn, todo, jobs)


def _run_pool(fn: Callable[[T], R], todo: list[T], jobs: int) -> Iterator[tuple[T, R]]:
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(todo)), initializer=worker_init, initargs=(os.getpid(),))
    try:
        blocked = _sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # no handler runs in a fork's hooks
        try:
            futures = {pool.submit(fn, item): item for item in todo}  # starts the workers
        finally:
            _sigmask(signal.SIG_SETMASK, blocked)
        for fut in as_completed(futures):
            yield futures[fut], fut.result()
    except BrokenProcessPool:
        stop_workers(pool)
        raise SimulationError(f"--jobs {jobs}: a worker process ended abruptly (killed, or out of memory); "
                              f"run again with fewer --jobs (a --results file keeps what finished)") from None
    except BaseException:  # interrupted, or the caller stopped early: do not finish the rest
        stop_workers(pool)
        raise
    pool.shutdown(wait=True)


def _sigmask(how: int, signals: Iterable[int]) -> Any:
    """``signal.pthread_sigmask`` where the platform has it (the previous mask), else nothing."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - Windows
        return set()
    return signal.pthread_sigmask(how, signals)


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and kill the pool's workers now (SIGKILL), then reap them and
    wait for the pool's manager thread."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        try:
            proc.kill()
        except (OSError, ValueError, AttributeError):
            pass
    for proc in processes:
        try:
            proc.join(timeout=5)
        except (OSError, ValueError, AssertionError):
            pass
    # the pool's manager thread closes its wake-up pipe as it ends: let it end now, or the
    # interpreter's exit hook may write into that pipe while it closes ("Bad file descriptor")
    manager = getattr(pool, "_executor_manager_thread", None)
    if manager is not None and manager is not threading.current_thread():
        manager.join(timeout=5)


def worker_init(creator: int | None = None) -> None:
    """Initializer of a local worker (module docstring): ignore SIGINT, take SIGTERM's default
    action (a forked worker inherits the parent's handlers), die with the parent; ``creator``
    is the process that started the pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked by the parent while it forked
    die_with_parent(creator)


def die_with_parent(creator: int | None = None) -> None:
    """End this process when its parent ends: SIGKILL from the kernel on Linux (guarded: a no-op
    elsewhere or without ``prctl``), and a daemon thread that exits when ``os.getppid()``
    changes (the parent ended and the process was adopted). ``creator``, the process that
    started the pool, must be the parent or the parent's parent (a fork server started the
    process); otherwise it ended before this process got here, and this one ends at once."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no libc prctl
            pass
    if os.getppid() != parent or _orphaned(parent, creator):
        os._exit(1)  # the parent ended before the request took effect
    threading.Thread(target=_watch_parent, args=(parent,), name="simtrain-watch-parent", daemon=True).start()


def _orphaned(parent: int, creator: int | None) -> bool:
    """Whether ``creator`` is neither ``parent`` nor its parent (read from ``/proc/PID/stat``,
    proc(5); where that is missing, whether ``creator`` is gone)."""
    if creator is None or parent == creator:
        return False
    try:
        with open(f"/proc/{parent}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[1]) != creator
    except (OSError, ValueError, IndexError):
        return not _alive(creator)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # pragma: no cover - alive, owned by another user
        return True
    return True


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_INTERVAL_S)
    os._exit(1)


def _run_dask(fn: Callable[[T], R], todo: list[T], jobs: int, scheduler: str | None) -> Iterator[tuple[T, R]]:
    distributed = _distributed()
    cluster = None
    try:
        if scheduler is None:
            cluster = distributed.LocalCluster(n_workers=max(1, min(jobs, len(todo))), threads_per_worker=1,
                                               processes=True, dashboard_address=None)
            client = distributed.Client(cluster)
        else:
            client = distributed.Client(scheduler, timeout=f"{CONNECT_TIMEOUT_S}s")
    except (OSError, TypeError, ValueError, ImportError) as exc:  # unreachable, TLS without certificates, no UCX
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
