"""Atomic file writes: a file appears whole under its name or not at all.

So does the set of files one run writes into its output folder:

* :func:`atomic_open` writes a temporary ``.NAME.XXXX.tmp`` beside the file and renames it onto
  the name when the block ends (POSIX ``rename(2)`` replaces atomically within one file system).
  The writer holds a shared ``flock(2)`` on the temporary while it writes, so a cleaner can tell
  a live writer from one that was killed.
* :func:`output_set` gives a run a staging folder ``.simtrain-run.XXXX`` inside the output folder
  (held by an exclusive ``flock(2)`` on its own ``.simtrain.lock`` for the run's lifetime). When the block
  ends, the set moves into place under an exclusive lock on the folder's ``.simtrain.lock``: the
  old set's ``report.json`` is removed first, then the rest of the old set, then the new files
  are renamed in with ``report.json`` last. A folder that holds a ``report.json`` therefore holds
  the complete set of the run that wrote it, never a file of another run beside it; concurrent
  runs into one folder swap one after the other and the last leaves its whole set. A reader that
  holds a shared ``flock`` on the folder's ``.simtrain.lock`` sees no swap under way.
* Temporaries of killed runs (unlocked ``.NAME.XXXX.tmp`` files, unlocked staging folders) are
  removed by the next run that swaps into the folder. One modified less than
  :data:`STALE_AFTER_S` before that run reached its outputs is left: its writer may be between
  creating it and locking it.

Locks are advisory ``fcntl.flock`` (Linux and macOS); where ``fcntl`` is missing they are no-ops
and only the age decides.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from simtrain.errors import SpecError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

#: The files a run may write into its output folder; ``report.json`` marks a complete set.
OUTPUT_NAMES = ("report.json", "trace.json", "timeline.png", "step_times.png", "report.html")
MARKER = "report.json"
STAGING_PREFIX = ".simtrain-run."
LOCK_NAME = ".simtrain.lock"
#: Age (seconds, by modification time) under which an unlocked temporary is left alone.
STALE_AFTER_S = 2.0
#: Seconds a staging folder without its lock file is left alone: its writer may be descheduled
#: between creating the folder and locking it (a loaded machine stalls a process for seconds).
UNLOCKED_STAGE_S = 120.0


def _lock(fd: int, how: int) -> bool:
    """``flock(fd, how)``; False when it would block (``how`` with ``LOCK_NB``)."""
    if fcntl is None:  # pragma: no cover
        return True
    try:
        fcntl.flock(fd, how)
    except BlockingIOError:
        return False
    return True


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside ``path`` for writing (``mode`` ``"w"`` for text, ``"wb"``
    for bytes); when the block ends without an error it is renamed onto ``path``, otherwise
    removed. Readers never see a half-written file."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            _lock(fh.fileno(), fcntl.LOCK_SH if fcntl else 0)
            yield fh
            fh.flush()
            os.fchmod(fh.fileno(), 0o644)  # mkstemp creates 0600
            os.replace(tmp, path)  # still locked: a cleaner never takes a finished temporary
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json_atomic(obj: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Dump ``obj`` as compact JSON with sorted keys to ``path``, atomically. The text is encoded
    in one piece (``json.dumps``, the C encoder) and then written: ``json.dump`` to a file encodes
    chunk by chunk in Python, an order of magnitude slower on large objects."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    with atomic_open(path, "wb") as fh:  # encoded in one piece: a text file's encoder is slower
        fh.write(text.encode())


def _held(lock_path: str) -> bool:
    """Whether a live process holds a lock on ``lock_path`` (False when the file is gone)."""
    if fcntl is None:  # pragma: no cover
        return False
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: leave it
    try:
        return not _lock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def remove_stale(folder: str | os.PathLike, now_s: float) -> list[str]:
    """Remove the temporaries of killed writers in ``folder`` (module docstring): ``.NAME.XXXX.tmp``
    files and staging folders that no live process holds and that were last modified more than
    :data:`STALE_AFTER_S` before ``now_s`` (seconds since the epoch). Returns the names removed."""
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        try:
            if name.startswith(".") and name.endswith(".tmp") and entry.is_file(follow_symlinks=False):
                lock_path, is_dir = entry.path, False
            elif name.startswith(STAGING_PREFIX) and entry.is_dir(follow_symlinks=False):
                lock_path, is_dir = os.path.join(entry.path, LOCK_NAME), True
            else:
                continue
            mtime = entry.stat(follow_symlinks=False).st_mtime
            if is_dir and not os.path.exists(lock_path):  # a writer between creating and locking it
                young = mtime > now_s - UNLOCKED_STAGE_S
            else:
                young = not is_dir and mtime > now_s - STALE_AFTER_S
            if _held(lock_path) or young:
                continue  # a live writer, or one that may not have locked yet
            if is_dir:
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed.append(name)
        except OSError:
            continue  # gone meanwhile or not ours to remove
    return removed


@contextmanager
def output_set(out_dir: str | os.PathLike, flag: str = "--out", names: tuple[str, ...] = OUTPUT_NAMES,
               marker: str = MARKER) -> Iterator[Path]:
    """A staging folder inside ``out_dir`` (created if missing) to write one run's outputs into;
    when the block ends without an error, its files replace the folder's previous set as a whole
    (module docstring), otherwise the previous set is left as it was. Errors of the file system
    are one line naming ``flag`` and the folder. ``names`` are the files (or folders) of a set,
    ``marker`` the one moved in last (``simtrain whatif`` writes its own set)."""
    out = Path(out_dir)
    started_s = time.time()
    try:
        out.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out))
    except OSError as exc:
        raise SpecError(f"{flag} {out}: cannot create the folder or write into it ({exc.strerror})") from None
    try:
        # the lock file takes its name only once locked: a cleaner that sees it finds it held
        with open(stage / f"{LOCK_NAME}.new", "w") as held:
            _lock(held.fileno(), fcntl.LOCK_EX if fcntl else 0)
            os.replace(stage / f"{LOCK_NAME}.new", stage / LOCK_NAME)
            try:
                yield stage
                _swap(stage, out, started_s, names, marker)
            except OSError as exc:
                what = _output_name(exc.filename)
                raise SpecError(f"{flag} {out}: cannot write {what} ({exc.strerror}); the outputs already "
                                f"there are left as they were unless report.json is gone") from None
            finally:
                shutil.rmtree(stage, ignore_errors=True)  # still locked: no cleaner races the removal
    except FileNotFoundError:  # pragma: no cover - the staging folder removed under the run
        raise SpecError(f"{flag} {out}: the folder was removed while the outputs were written") from None


def _output_name(filename: Any) -> str:
    """The output a failed file operation was writing (``trace.json`` of ``.trace.json.ab12.tmp``)."""
    if not filename:
        return "the outputs"
    name = Path(str(filename)).name
    for known in OUTPUT_NAMES:
        if name == known or name.startswith(f".{known}."):
            return known
    return name


def _swap(stage: Path, out: Path, started_s: float, names: tuple[str, ...] = OUTPUT_NAMES,
          marker: str = MARKER) -> None:
    """Replace ``out``'s set by ``stage``'s files (and folders), under the folder lock (module
    docstring)."""
    new = sorted(n for n in os.listdir(stage) if n != LOCK_NAME and not n.endswith(".tmp"))
    with open(out / LOCK_NAME, "a") as lock:
        _lock(lock.fileno(), fcntl.LOCK_EX if fcntl else 0)  # waits for a concurrent swap
        remove_stale(out, started_s)
        for name in (marker, *(n for n in names if n != marker)):
            _remove(out / name, stage)
        for name in (*(n for n in new if n != marker), *(n for n in new if n == marker)):
            os.replace(stage / name, out / name)
        _fsync_folder(out)


def _remove(path: Path, stage: Path) -> None:
    """Remove the file or folder ``path`` if there is one: a folder is first renamed into
    ``stage`` (one rename, so no half-removed folder is ever seen under its name)."""
    try:
        if path.is_dir() and not path.is_symlink():
            gone = stage / f".old-{path.name}"
            os.replace(path, gone)
            shutil.rmtree(gone, ignore_errors=True)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _fsync_folder(folder: Path) -> None:
    """Make the renames durable (``fsync(2)`` of the directory; skipped where unsupported)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def final_paths(out_dir: str | os.PathLike, staged: Mapping[str, str]) -> dict[str, str]:
    """The paths in ``out_dir`` of files written under ``staged`` paths of its staging folder."""
    return {key: str(Path(out_dir) / Path(path).name) for key, path in staged.items()}
