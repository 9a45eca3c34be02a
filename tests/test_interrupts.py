"""Interruption and concurrency in real processes: SIGINT and SIGTERM end run, search and whatif
with one line and 128 + the signal number; SIGKILL of a search leaves no worker behind; two runs
into one --out leave one run's whole set; a results file cut off mid-write is repaired on resume,
and a results file or path the search cannot use is a one-line error before any candidate runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import assert_user_error, cli
from simtrain.errors import SpecError
from simtrain.layout_search.simulated import load_results

ROOT = Path(__file__).resolve().parents[1]
SEARCH = ("search", "--model", "llama3-8b", "--topology", "seed-h100", "--gpus", "8", "--seq", "8192",
          "--gbs", "64")
WHATIF = ("whatif", "--model", "llama3-8b", "--topologies", "seed-h100,h100-ib", "--gpus", "8",
          "--train-tokens", "1000000000", "--no-plot", "--json")
SMALL_RUN = ("run", "--gpus", "8", "--tp", "8", "--pp", "1", "--no-plot")


def _start(args, cwd):
    """``python -m simtrain ARGS`` in ``cwd``, SIGINT at its default (a shell's background job
    would start it ignored), in a session of its own."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "simtrain", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for(condition, what, timeout_s=90.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _catches_sigterm(pid):
    """Whether the process has a handler for SIGTERM (the command line is running): bit 15 of
    SigCgt in /proc/PID/status (proc(5))."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(int(line.split()[1], 16) for line in text.splitlines() if line.startswith("SigCgt:"))
    return bool(mask & (1 << (signal.SIGTERM - 1)))


def _descendants(pid):
    """Every process below ``pid``, from /proc/PID/task/TID/children (proc(5))."""
    found, todo = [], [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                kids = [int(x) for x in (task / "children").read_text().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def _running_with(text):
    """Processes whose command line holds ``text`` (a folder of the test's own: forked workers
    keep their parent's command line) that are alive and not zombies."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes() and _running(int(cmdline.parent.name)):
                found.append(int(cmdline.parent.name))
        except (OSError, ValueError):
            continue
    return found


def _running(pid):
    """Alive and not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")


@pytest.mark.parametrize("args, signum, workers", [
    (("run", "--out", "{tmp}/o"), signal.SIGINT, 0),
    (("run", "--out", "{tmp}/o"), signal.SIGTERM, 0),
    ((*SEARCH, "--jobs", "2", "--results", "{tmp}/r.jsonl"), signal.SIGTERM, 2),
    ((*WHATIF, "--jobs", "2", "--out", "{tmp}/o"), signal.SIGINT, 2),
], ids=["run-SIGINT", "run-SIGTERM", "search-SIGTERM", "whatif-SIGINT"])
def test_a_signal_ends_a_command_with_one_line(tmp_path, args, signum, workers):
    proc = _start([a.format(tmp=tmp_path) for a in args], tmp_path)
    try:
        _wait_for(lambda: _catches_sigterm(proc.pid) or proc.poll() is not None, "the command line to start")
        if workers:
            _wait_for(lambda: len(_descendants(proc.pid)) >= workers or proc.poll() is not None, "the workers")
        kids = _descendants(proc.pid)
        os.killpg(proc.pid, signum)  # the whole group, as a terminal's Ctrl-C does
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signum, (proc.returncode, err)
    assert err == f"simtrain: interrupted by {signal.Signals(signum).name}\n"
    try:
        _wait_for(lambda: not [k for k in kids if _running(k)] and not _running_with(str(tmp_path)),
                  "the workers to end", timeout_s=20)
    finally:
        for pid in _running_with(str(tmp_path)):
            os.kill(pid, signal.SIGKILL)
    out_dir = tmp_path / "o"
    assert not out_dir.exists() or not list(out_dir.glob(".simtrain-run.*"))  # no staging folder left


def test_a_search_killed_with_sigkill_leaves_no_worker(tmp_path):
    proc = _start((*SEARCH, "--jobs", "2", "--results", str(tmp_path / "r.jsonl")), tmp_path)
    try:
        _wait_for(lambda: len(_descendants(proc.pid)) >= 2 or proc.poll() is not None, "the workers")
        workers = _descendants(proc.pid)
        assert proc.poll() is None and len(workers) >= 2, proc.communicate()
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    try:
        _wait_for(lambda: not [w for w in workers if _running(w)] and not _running_with(str(tmp_path)),
                  "the orphaned workers to die", timeout_s=20)
    finally:
        for pid in _running_with(str(tmp_path)):  # a failing run leaves nothing behind either
            os.kill(pid, signal.SIGKILL)


def test_concurrent_runs_into_one_out_leave_one_runs_set(tmp_path):
    procs = [_start((*SMALL_RUN, "--gbs", str(gbs), "--out", "o", "--json"), tmp_path) for gbs in (8, 16)]
    steps = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        steps.append(json.loads(out)["step_time_s"])
    assert steps[0] != steps[1]
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    trace = json.loads((tmp_path / "o" / "trace.json").read_text())
    assert report["step_time_s"] in steps
    assert trace["otherData"]["step_time_s"] == report["step_time_s"]  # both files from one run
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [".simtrain.lock", "report.json", "trace.json"]


def test_a_run_killed_while_writing_leaves_no_mixed_set_and_the_next_run_cleans_up(tmp_path):
    out = tmp_path / "o"
    first = _start((*SMALL_RUN, "--gbs", "8", "--out", str(out)), tmp_path)
    assert first.wait(timeout=240) == 0, first.communicate()
    for _ in range(5):  # kill it while its staging folder exists (it may finish first: try again)
        proc = _start((*SMALL_RUN, "--gbs", "16", "--html", "--out", str(out)), tmp_path)
        # killed once its staging folder is locked (a folder killed before its lock is left alone
        # for files.UNLOCKED_STAGE_S: its writer might only be descheduled)
        _wait_for(lambda: list(out.glob(".simtrain-run.*/.simtrain.lock")) or proc.poll() is not None,
                  "the outputs")
        proc.kill()
        proc.communicate(timeout=60)
        if list(out.glob(".simtrain-run.*/.simtrain.lock")):
            break
    else:
        pytest.skip("every run finished before it could be killed while writing")
    if (out / "report.json").exists():  # a whole set, of one run
        trace = json.loads((out / "trace.json").read_text())
        assert trace["otherData"]["step_time_s"] == json.loads((out / "report.json").read_text())["step_time_s"]
    again = _start((*SMALL_RUN, "--gbs", "8", "--out", str(out)), tmp_path)
    assert again.wait(timeout=240) == 0, again.communicate()
    assert sorted(p.name for p in out.iterdir()) == [".simtrain.lock", "report.json", "trace.json"]


# ---- results files -----------------------------------------------------------------------------

KEY = json.dumps({"cp": 1, "dp": 8, "gpus": 8, "mbs": 1, "pp": 1, "recompute": "auto", "schedule": "1f1b",
                  "tp": 1, "vpp": 1, "zero": 1}, sort_keys=True)
ROW = {"key": KEY, "report": {"step_time_s": 2.5, "mfu": 0.4, "fits_in_memory": True, "config": {}}}


def _line(row):
    return json.dumps(row, sort_keys=True) + "\n"


@pytest.mark.quick
def test_resume_cuts_off_a_torn_last_line_and_says_which_candidate(tmp_path):
    path = tmp_path / "r.jsonl"
    other = {**ROW, "key": KEY.replace('"tp": 1', '"tp": 2')}
    whole = _line(ROW)
    path.write_text(whole + _line(other)[:-30])  # killed during the second append
    notes = []
    done = load_results(path, notes.append)
    assert list(done) == [KEY]
    assert path.read_text() == whole
    assert notes == [f"simtrain: --results {path}: line 2 was cut off mid-write; dropped it, candidate "
                     f"TP=2 CP=1 PP=1 DP=8 1f1b mbs=1 ZeRO-1 rc=auto runs again"]
    path.write_text(whole + _line(ROW)[:-1])  # whole but for its newline: the append did not finish
    assert list(load_results(path, notes.append)) == [KEY] and path.read_text() == whole
    path.write_text(whole + whole[:9] + whole)  # an earlier resume appended onto a torn line
    assert list(load_results(path, notes.append)) == [KEY] and path.read_text() == whole
    assert len(notes) == 3


@pytest.mark.quick
@pytest.mark.parametrize("text, problem", [
    (b"\x7fELF\x02\x01\x00\x00\n\xff\xfe\n", "line 1: not a JSON object"),
    (_line({"key": KEY}).encode(), 'line 1: its "report" is missing'),
    (_line({**ROW, "report": [1, 2]}).encode(), 'line 1: its "report" is missing or not an object'),
    (_line({**ROW, "report": {**ROW["report"], "step_time_s": "2.5"}}).encode(),
     'line 1: its report\'s "step_time_s" is "2.5", not a finite number'),
    (_line(ROW).encode() + _line({**ROW, "key": [1]}).encode(), 'line 2: its "key" is missing or not a string'),
    (_line(ROW).encode() + b"[" * 100_000 + b"\n" + _line(ROW).encode(), "line 2: not a JSON object"),
    (_line(ROW).encode() + b"{broken\n", "line 2: not a JSON object"),
], ids=["binary", "no-report", "list-report", "string-step", "list-key", "deep", "not-a-row-last"])
def test_a_results_line_search_did_not_write_is_one_line(tmp_path, text, problem):
    path = tmp_path / "r.jsonl"
    path.write_bytes(text)
    with pytest.raises(SpecError) as info:
        load_results(path)
    message = str(info.value)
    assert message.startswith(f"--results {path}: {problem}") and "\n" not in message
    assert path.read_bytes() == text  # left as it was


@pytest.mark.quick
def test_a_bad_results_file_or_path_stops_search_before_any_candidate(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\x00\x01binary\n")
    assert_user_error(*SEARCH, "--results", str(bad), "--resume", contains=(str(bad), "line 1: not a JSON object"))
    assert_user_error(*SEARCH, "--results", str(tmp_path / "missing" / "r.jsonl"),
                      contains=("missing/r.jsonl", "does not exist"))
    assert_user_error(*SEARCH, "--results", str(tmp_path), contains=(str(tmp_path), "is a folder"))
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert_user_error(*SEARCH, "--results", str(locked / "r.jsonl"), contains="not writable")


def test_search_resume_repairs_a_torn_line_and_runs_its_candidate_again(tmp_path):
    path = tmp_path / "r.jsonl"
    argv = (*SEARCH, "--top", "1", "--jobs", "1", "--json", "--results", str(path))
    code, out, err = cli(*argv)
    assert code == 0, err
    line = path.read_text().splitlines()[0]
    path.write_text(line[: len(line) // 2])  # the first candidate's row, cut off mid-write
    code, out, err = cli(*argv, "--resume")
    assert code == 0, err
    assert "line 1 was cut off mid-write; dropped it, candidate TP=" in err and len(err.splitlines()) == 1
    again = path.read_text().splitlines()  # the candidate ran again, on a line of its own, then the rest
    assert json.loads(again[0])["key"] == json.loads(line)["key"]
    assert len(again) == json.loads(out)["candidates_simulated"]
