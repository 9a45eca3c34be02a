"""``simtrain schedule``: the Gantt chart, the JSON report, a null closed form, bad CSV files, example
files by name, ``--xlim``, the note on DualPipeV beside ZB-H1."""

from __future__ import annotations

import pytest

from helpers import assert_user_error, cli, cli_json, drawn_xlims

pytestmark = pytest.mark.quick


def test_schedule_command_gantt(tmp_path):
    png = tmp_path / "z.png"
    code, out, err = cli("schedule", "zb-h1", "--pp", 4, "--microbatches", 8, "--gantt", png)
    assert code == 0, err
    assert "makespan 27" in out and "closed form 27" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_schedule_command_json():
    rep = cli_json("schedule", "1f1b", "--pp", 4, "--microbatches", 8, "--costs", "1,2,1")
    for key in ("makespan", "idle_per_rank", "bubble_ratio", "closed_form_makespan",
                "peak_inflight_microbatches", "actions"):
        assert key in rep
    assert rep["makespan"] == pytest.approx((8 + 3) * 4)
    assert rep["closed_form_makespan"] == pytest.approx((8 + 3) * 4)
    assert rep["peak_inflight_microbatches"] == [4, 3, 2, 1]
    assert rep["actions"]["3"][:2] == ["3F0", "3B0"]


def test_no_closed_form_is_null():
    rep = cli_json("schedule", "zb-auto", "--pp", 4, "--microbatches", 8, "--comm", "0.5")
    assert rep["closed_form_makespan"] is None


@pytest.mark.parametrize("rows, needle", [
    ("0F0,0F1,0B0,0B1\n1F0,1B0,1F1\n", "rank 1 (line 2), cell 3: missing action 1B1"),
    ("0F0,0F1,0B0,0B1,0B1\n1F0,1B0,1F1,1B1\n", "duplicate"),
    ("0F0,0B0,0F1,0B1\n1F0,1F1,1B0,1B1\n", "deadlock"),
    ("0F0,0F1,0B0,0X1\n1F0,1B0,1F1,1B1\n", "cell 3"),
])
def test_bad_csv_is_one_clear_error(tmp_path, rows, needle):
    path = tmp_path / "s.csv"
    path.write_text(rows)
    code, out, err = cli("schedule", path, "--pp", 2, "--microbatches", 2)
    assert code == 2
    first = err.splitlines()[0]
    assert first.startswith("simtrain: error: ") and needle in first, err
    assert "Traceback" not in err


def test_example_schedule_files_by_name():
    names = {row["name"] for row in cli_json("list", "schedules")}
    assert {"hand-4x4", "zb-h1-4x8", "interleaved-4x8-v2"} <= names
    rep = cli_json("schedule", "zb-h1-4x8", "--pp", 4, "--microbatches", 8)
    assert rep["makespan"] == 27
    code, _, err = cli("schedule", "hand-4x4", "--pp", 2, "--microbatches", 4)
    assert code == 2 and "pp=2" in err


def test_interleaved_closed_form_is_the_schedule_run():
    """The closed form printed is the one of the schedule actually built: vpp is required for
    interleaved-1f1b, refused for a schedule without chunks, and used by the closed form."""
    rep = cli_json("schedule", "interleaved-1f1b", "--pp", 4, "--microbatches", 8, "--vpp", 2)
    assert rep["makespan"] == pytest.approx(28.5) and rep["closed_form_makespan"] == pytest.approx(28.5)
    code, _, err = cli("schedule", "interleaved-1f1b", "--pp", 4, "--microbatches", 8)
    assert code == 2 and "--vpp 2" in err
    code, _, err = cli("schedule", "1f1b", "--pp", 4, "--microbatches", 8, "--vpp", 2)
    assert code == 2 and "only interleaved-1f1b takes --vpp" in err


def test_xlim_draws_schedules_of_different_makespans_on_one_axis(tmp_path, monkeypatch):
    limits = drawn_xlims(monkeypatch)
    for name in ("1f1b", "zb-h1"):  # makespans 33 and 27
        code, out, err = cli("schedule", name, "--pp", "4", "--microbatches", "8", "--gantt", tmp_path / f"{name}.png",
                             "--xlim", "33")
        assert code == 0, err
        assert (tmp_path / f"{name}.png").stat().st_size > 0
    assert limits == [(0.0, 33.0), (0.0, 33.0)]
    assert_user_error("schedule", "zb-h1", "--pp", "4", "--microbatches", "8", "--gantt", tmp_path / "z.png",
                      "--xlim", "20", contains=("--xlim 20: the timeline ends at 27", "--window"))
    assert_user_error("schedule", "zb-h1", "--pp", "4", "--microbatches", "8", "--gantt", tmp_path / "z.png",
                      "--xlim", "30", "--window", "0:3", contains="both set the time axis; give one")
    assert_user_error("schedule", "zb-h1", "--pp", "4", "--microbatches", "8", "--xlim", "30",
                      contains="give --gantt OUT.png too")
    assert_user_error("run", "--xlim", "0", contains=("--xlim", "must be a finite number > 0"))


@pytest.mark.quick
def test_dualpipev_says_why_it_equals_zb_h1_with_equal_costs():
    code, out, err = cli("schedule", "dualpipev", "--pp", "4", "--microbatches", "8")
    assert code == 0, err
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert notes == ["note: the same makespan as zb-h1 (27): with W = F DualPipeV's bubble, (p-1)(F+2B-3W)/2, equals "
                     "ZB-H1's, (p-1)(F+I-W), and an overlapped F&B pair costs F + B here (a schedule alone has no "
                     "communication to hide); --costs 1,1,0.5 gives 23.75 against ZB-H1's 24.5"]
    code, out, err = cli("schedule", "dualpipev", "--pp", "4", "--microbatches", "8", "--costs", "1,1,0.5")
    assert code == 0 and "makespan 23.75" in out and "note:" not in out
    code, out, err = cli("schedule", "zb-h1", "--pp", "4", "--microbatches", "8")
    assert code == 0 and "note:" not in out
