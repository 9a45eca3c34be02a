"""The progress bar: silent before its delay and off a terminal, one line rewritten in place with
count, rate and time left, erased at the end."""

from __future__ import annotations

import io

import pytest

from simtrain.outputs.progress import Progress, format_duration, progress_line, wanted

pytestmark = pytest.mark.quick


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_wanted_only_on_a_terminal_and_not_with_json():
    tty, pipe = FakeTty(), io.StringIO()
    assert wanted("auto", tty, json_output=False)
    assert not wanted("auto", tty, json_output=True)
    assert wanted("on", tty, json_output=True)
    assert not wanted("off", tty, json_output=False)
    assert not wanted("auto", pipe, json_output=False)
    assert not wanted("on", pipe, json_output=False)


def test_line_rate_and_eta_by_hand():
    # 30 of 120 candidates in 12 s: 2.5/s, 90 left -> 36 s
    line = progress_line("search", 30, 120, 12.0, "candidates", width=12)
    assert line == "search [###         ] 30/120 candidates  2.5/s  ETA 0:36"
    # 250,000 operations in 2 s: 125,000/s, no total
    assert progress_line("simulate", 250_000, None, 2.0, "operations") == \
        "simulate 250,000 operations  125,000/s  0:02"
    assert format_duration(3599.6) == "1:00:00"


def test_silent_before_the_delay_then_draws_and_erases():
    tty, clock = FakeTty(), Clock()
    bar = Progress(tty, clock=clock, delay_s=2.0, interval_s=0.5)
    bar.phase("search", total=10, unit="candidates")
    clock.now += 1.0
    bar.update(3)
    assert tty.getvalue() == ""  # a short command stays silent
    clock.now += 1.5  # 2.5 s in: 4 done -> 1.6/s, 6 left -> 3.75 s
    bar.update(4)
    out = tty.getvalue()
    assert out.startswith("\r") and "4/10 candidates" in out and "1.6/s" in out and "ETA 0:04" in out
    clock.now += 0.1  # within interval_s: no redraw
    bar.update(5)
    assert tty.getvalue() == out
    clock.now += 0.5
    bar.update(10)
    assert "10/10" in tty.getvalue()
    width = len(tty.getvalue().rsplit("\r", 1)[1])
    bar.close()
    assert tty.getvalue().endswith("\r" + " " * width + "\r")


def test_disabled_writes_nothing():
    tty, clock = FakeTty(), Clock()
    bar = Progress(tty, clock=clock, enabled=False)
    bar.phase("simulate")
    clock.now += 10
    bar.update(1000)
    bar.close()
    assert tty.getvalue() == ""


def test_background_thread_redraws_a_silent_phase():
    import time

    tty = FakeTty()
    bar = Progress(tty, delay_s=0.0, interval_s=0.01, background=True)
    bar.phase("simulate")
    deadline = time.monotonic() + 5
    while tty.getvalue().count("\r") < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    bar.close()
    assert tty.getvalue().count("simulate") >= 2


def test_run_command_bar_follows_progress_and_json():
    from contextlib import redirect_stderr

    from simtrain.cli.run import run_progress

    with redirect_stderr(FakeTty()):
        assert run_progress({"progress": "auto", "json": False}).enabled
        assert not run_progress({"progress": "auto", "json": True}).enabled
        assert run_progress({"progress": "on", "json": True}).enabled
        assert not run_progress({"progress": "off", "json": False}).enabled
    with redirect_stderr(io.StringIO()):
        assert not run_progress({"progress": "on", "json": False}).enabled


def test_bad_progress_value_is_one_line():
    from helpers import assert_user_error

    assert_user_error("run", "--progress", "loud", contains=("progress = 'loud'", "auto"))
    assert_user_error("search", "--model", "llama3-8b", "--topology", "seed-h100", "--gpus", "8", "--seq", "8192",
                      "--gbs", "64", "--progress", "loud", contains=("progress = 'loud'", "auto"))


def test_schedule_command_shows_its_phases_on_a_terminal(monkeypatch):
    """``simtrain schedule`` (up to about 8 s of planning and replay) names its phase on a
    terminal, and draws nothing with --json."""
    from contextlib import redirect_stderr, redirect_stdout

    from simtrain.cli.main import main
    from simtrain.outputs import progress

    real = progress.Progress.__init__

    def eager(self, stream, **kw):  # draw at once: the command is short here
        real(self, stream, **{**kw, "delay_s": 0.0})

    monkeypatch.setattr(progress.Progress, "__init__", eager)
    for extra, drawn in (((), True), (("--json",), False)):
        tty = FakeTty()
        with redirect_stderr(tty), redirect_stdout(io.StringIO()):
            assert main(["schedule", "zb-auto", "--pp", "4", "--microbatches", "8", *extra]) == 0
        assert ("plan zb-auto" in tty.getvalue() and "replay" in tty.getvalue()) is drawn, tty.getvalue()
