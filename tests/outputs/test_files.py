"""Atomic writes and output sets: a set replaces the previous one as a whole, a swap cut off midway
leaves no report.json beside another run's files, temporaries of killed writers go and those of
live writers stay, concurrent swaps into one folder leave one consistent set."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import time

import pytest

from simtrain.errors import SpecError
from simtrain.outputs import files
from simtrain.outputs.files import LOCK_NAME, STALE_AFTER_S, UNLOCKED_STAGE_S, atomic_open, output_set, remove_stale

pytestmark = pytest.mark.quick


def _write_set(folder, tag, names=("report.json", "trace.json")):
    for name in names:
        (folder / name).write_text(tag)


def _hidden(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and p.name != LOCK_NAME)


def test_a_new_set_replaces_the_old_one_whole(tmp_path):
    out = tmp_path / "out"
    with output_set(out) as stage:
        _write_set(stage, "old", ("report.json", "trace.json", "timeline.png"))
    with output_set(out) as stage:
        assert stage.parent == out and stage.name.startswith(".simtrain-run.")
        _write_set(stage, "new")
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["report.json", "trace.json"]
    assert (out / "report.json").read_text() == (out / "trace.json").read_text() == "new"
    assert _hidden(out) == []  # the staging folder is gone


def test_an_error_while_writing_leaves_the_previous_set(tmp_path):
    with output_set(tmp_path) as stage:
        _write_set(stage, "old")
    with pytest.raises(KeyboardInterrupt):
        with output_set(tmp_path) as stage:
            (stage / "report.json").write_text("new")
            raise KeyboardInterrupt
    assert (tmp_path / "report.json").read_text() == (tmp_path / "trace.json").read_text() == "old"
    assert _hidden(tmp_path) == []


def test_a_swap_cut_off_midway_leaves_no_report_beside_another_runs_files(tmp_path, monkeypatch):
    with output_set(tmp_path) as stage:
        _write_set(stage, "old", ("report.json", "trace.json", "timeline.png"))
    renames = []

    def cut_after_one(src, dst):
        if renames:
            raise KeyboardInterrupt  # as if killed between the two renames
        renames.append(dst)
        os.rename(src, dst)

    with pytest.raises(KeyboardInterrupt):
        with output_set(tmp_path) as stage:
            _write_set(stage, "new")
            monkeypatch.setattr(files.os, "replace", cut_after_one)
    monkeypatch.undo()
    assert [os.path.basename(d) for d in renames] == ["trace.json"]  # report.json moves last
    assert not (tmp_path / "report.json").exists() and not (tmp_path / "timeline.png").exists()
    with output_set(tmp_path) as stage:
        _write_set(stage, "again")
    assert (tmp_path / "report.json").read_text() == (tmp_path / "trace.json").read_text() == "again"


def test_temporaries_of_killed_writers_go_and_live_ones_stay(tmp_path):
    now = time.time()
    old = now - 10 * STALE_AFTER_S

    def make(name, *, folder=False, lock=False, mtime=old):
        path = tmp_path / name
        if folder:
            path.mkdir()
            if lock:
                (path / LOCK_NAME).write_text("")
        else:
            path.write_text("x")
        os.utime(path, (mtime, mtime))
        return path

    make(".trace.json.dead.tmp")
    make(".simtrain-run.dead", folder=True, lock=True, mtime=now)  # unlocked lock file: its run is gone
    make(".simtrain-run.nolock", folder=True, mtime=now - 2 * UNLOCKED_STAGE_S)
    make(".simtrain-run.stalled", folder=True)  # its writer may be descheduled before locking it
    make(".report.json.young.tmp", mtime=now)  # its writer may not have locked it yet
    make(".simtrain-run.younglock", folder=True, mtime=now)
    live = make(".trace.json.live.tmp")
    live_run = make(".simtrain-run.live", folder=True, lock=True)
    make("notes.tmp")  # not hidden: not ours
    with open(live) as a, open(live_run / LOCK_NAME) as b:
        fcntl.flock(a.fileno(), fcntl.LOCK_SH)
        fcntl.flock(b.fileno(), fcntl.LOCK_EX)
        removed = remove_stale(tmp_path, now)
    assert sorted(removed) == [".simtrain-run.dead", ".simtrain-run.nolock", ".trace.json.dead.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".report.json.young.tmp", ".simtrain-run.live", ".simtrain-run.stalled", ".simtrain-run.younglock",
        ".trace.json.live.tmp", "notes.tmp"]


def test_atomic_open_holds_a_lock_on_its_temporary_while_writing(tmp_path):
    with atomic_open(tmp_path / "a.json") as fh:
        fh.write("{}")
        (tmp,) = tmp_path.glob(".a.json.*.tmp")
        os.utime(tmp, (0, 0))  # long stale by its age: only the writer's lock keeps it
        assert remove_stale(tmp_path, 10 * UNLOCKED_STAGE_S) == []  # held: a live writer
    assert (tmp_path / "a.json").read_text() == "{}"
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_a_run_cleans_the_stale_temporaries_of_its_folder(tmp_path):
    stale = tmp_path / ".trace.json.k1ll.tmp"
    stale.write_text("{")
    os.utime(stale, (0, 0))
    with output_set(tmp_path) as stage:
        _write_set(stage, "new")
    assert not stale.exists()


def test_file_system_errors_are_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(SpecError, match=r"^--out .*file/sub: cannot create the folder or write into it"):
        with output_set(tmp_path / "file" / "sub"):
            pass
    with pytest.raises(SpecError, match=r"^--out .*: cannot write trace.json \(No space left on device\); "):
        with output_set(tmp_path) as stage:
            raise OSError(28, "No space left on device", str(stage / ".trace.json.ab12.tmp"))


def _swapper(folder: str, tag: str, rounds: int) -> None:
    from pathlib import Path

    for i in range(rounds):
        with output_set(Path(folder)) as stage:
            _write_set(stage, f"{tag}-{i}", ("trace.json", "timeline.png", "report.json"))


def test_concurrent_swaps_leave_one_consistent_set(tmp_path):
    """Three processes swap sets into one folder while a reader holding the folder lock shared
    checks that a report.json always has its own run's files beside it."""
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_swapper, args=(str(tmp_path), f"p{k}", 30)) for k in range(3)]
    for p in procs:
        p.start()
    seen, deadline = 0, time.monotonic() + 60
    while (any(p.is_alive() for p in procs) or seen == 0) and time.monotonic() < deadline:
        lock_path = tmp_path / LOCK_NAME
        if not lock_path.exists():
            time.sleep(0.001)
            continue
        with open(lock_path) as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_SH)
            if (tmp_path / "report.json").exists():
                tag = (tmp_path / "report.json").read_text()
                assert (tmp_path / "trace.json").read_text() == (tmp_path / "timeline.png").read_text() == tag
                seen += 1
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    final = {(tmp_path / n).read_text() for n in ("report.json", "trace.json", "timeline.png")}
    assert len(final) == 1 and final.pop().endswith("-29")
    assert _hidden(tmp_path) == []
