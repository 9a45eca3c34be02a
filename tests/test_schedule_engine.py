"""Schedules with fixed costs (`simtrain schedule`) against hand-computed cases and the closed
forms; CSV files and every schedule in simulated runs."""

from __future__ import annotations

import json

import pytest

from helpers import cli, cli_json
from simtrain.errors import ScheduleError
from simtrain.metrics import memory_timeline
from simtrain.schedules import REGISTRY, Action, Schedule, generate, replay, scaled_costs
from simtrain.workload.fixed_cost import run_schedule

UNIT = (1.0, 1.0, 1.0)


def spans(run, stream: str) -> list[tuple]:
    """(rank, name, stage, mb, start, end) of the spans on ``stream``, by rank and start."""
    rows = [(s.rank, s.name, s.stage, s.mb, s.start_s, s.end_s)
            for s in run.timeline.spans(run.timeline.mask(stream=stream))]
    return sorted(rows, key=lambda row: (row[0], row[4], row[5]))


def test_two_stages_two_microbatches():
    """1F1B, p = 2, m = 2, F = I = W = 1 (B = 2), by hand: rank 0 runs F0 [0,1] F1 [1,2], waits for
    rank 1's B0 [2,4], runs B0 [4,6], waits for B1 [5,7], runs B1 [7,9]; rank 1 F0 [1,2] B0 [2,4]
    F1 [4,5] B1 [5,7]."""
    run = run_schedule(generate("1f1b", 2, 2))
    assert spans(run, "compute") == [(0, "F", 0, 0, 0, 1), (0, "F", 0, 1, 1, 2), (0, "B", 0, 0, 4, 6),
                                     (0, "B", 0, 1, 7, 9), (1, "F", 1, 0, 1, 2), (1, "B", 1, 0, 2, 4),
                                     (1, "F", 1, 1, 4, 5), (1, "B", 1, 1, 5, 7)]
    assert run.makespan == run.closed_form == 9  # (m + p - 1)(F + B)
    assert run.idle_per_rank == [3, 3] and run.bubble_ratio == 6 / 18
    assert run.peak_inflight == [2, 1]
    # zero-length transfers at each producer's end: activations down, gradients up
    assert spans(run, "pp_send") == [(0, "send", 0, 0, 1, 1), (0, "send", 0, 1, 2, 2),
                                     (1, "send", 1, 0, 4, 4), (1, "send", 1, 1, 7, 7)]
    times, level = memory_timeline(run.timeline, {0: 0.0, 1: 0.0})[0]
    assert times.tolist() == [0, 0, 1, 6, 9] and level.tolist() == [0, 1, 2, 1, 0]


def test_two_stages_with_latency():
    """The same with a p2p latency of 0.5: each transfer adds 0.5 (F0 reaches rank 1 at 1.5, its
    B0 ends at 4.5 and reaches rank 0 at 5, B1 ends at 7.5 and reaches rank 0 at 8)."""
    run = run_schedule(generate("1f1b", 2, 2), comm=0.5)
    assert spans(run, "compute") == [(0, "F", 0, 0, 0, 1), (0, "F", 0, 1, 1, 2), (0, "B", 0, 0, 5, 7),
                                     (0, "B", 0, 1, 8, 10), (1, "F", 1, 0, 1.5, 2.5),
                                     (1, "B", 1, 0, 2.5, 4.5), (1, "F", 1, 1, 4.5, 5.5),
                                     (1, "B", 1, 1, 5.5, 7.5)]
    assert run.makespan == 10 and run.closed_form is None  # closed forms assume free communication
    sends = [(0, "send", 0, 0, 1, 1.5), (0, "send", 0, 1, 2, 2.5), (1, "send", 1, 0, 4.5, 5),
             (1, "send", 1, 1, 7.5, 8)]
    assert spans(run, "pp_send") == sends
    recvs = [(1 - r, "recv", 1 - st, mb, t0, t1) for r, _, st, mb, t0, t1 in sends]
    assert spans(run, "pp_recv") == sorted(recvs, key=lambda row: (row[0], row[4]))


def test_overlapped_pair_is_two_spans_back_to_back():
    """One rank holding both stages of a chain (chunks of half a stage: F = I = W = 0.5); the
    pair 0F1&1B0 runs its forward half, then its backward half."""
    rows = ((Action(0, "F", 0), Action(1, "F", 0), Action(0, "FB", 1, 1, 0), Action(1, "F", 1),
             Action(1, "B", 1), Action(0, "B", 0), Action(0, "B", 1)),)
    run = run_schedule(Schedule("pair", 1, 2, (0, 0), rows))
    assert spans(run, "compute") == [(0, "F", 0, 0, 0, 0.5), (0, "F", 1, 0, 0.5, 1), (0, "F", 0, 1, 1, 1.5),
                                     (0, "B", 1, 0, 1.5, 2.5), (0, "F", 1, 1, 2.5, 3),
                                     (0, "B", 1, 1, 3, 4), (0, "B", 0, 0, 4, 5), (0, "B", 0, 1, 5, 6)]
    assert run.makespan == 6 and run.idle_per_rank == [0] and spans(run, "pp_send") == []
    assert run.peak_inflight == [1.5]  # three half-stage activations after the pair's forward


@pytest.mark.parametrize("name", [n for n in REGISTRY if REGISTRY[n].closed_form is not None])
def test_runs_match_closed_forms(name):
    """With F = I = W = 1 and free communication every built-in schedule runs in its closed form
    wherever that applies; the bubble ratio is 1 - 3m / makespan and the peaks are the replay's."""
    for p in range(1, 6):
        for m in range(p, 3 * p + 3):
            for v in ((1, 2, 3) if REGISTRY[name].takes("vpp") else (1,)):
                try:
                    sched = generate(name, p, m, vpp=v)
                except ScheduleError:
                    continue  # outside the generator's range
                run = run_schedule(sched)
                if run.closed_form is not None:
                    assert run.makespan == pytest.approx(run.closed_form), (p, m, v)
                assert run.bubble_ratio == pytest.approx(1 - 3 * m / run.makespan), (p, m, v)
                ref = replay(sched, scaled_costs(sched, *UNIT))
                assert run.peak_inflight == pytest.approx(list(ref.peak_inflight)), (p, m, v)


def test_closed_form_uses_the_schedules_own_vpp():
    sched = generate("interleaved-1f1b", 4, 8)  # vpp 2 by default
    assert run_schedule(sched).closed_form == 28.5 == run_schedule(sched).makespan
    assert run_schedule(generate("interleaved-1f1b", 4, 8, vpp=4)).closed_form == 26.25


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


def test_csv_schedule_in_run(tmp_path):
    csv = tmp_path / "mine.csv"
    cli("schedule", "zb-h1", "--pp", 2, "--microbatches", 4)  # warm import
    from simtrain.schedules import schedule_to_csv

    csv.write_text(schedule_to_csv(generate("zb-h1", 2, 4)))
    code, out, err = cli("run", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", 16, "--tp", 8,
                         "--pp", 2, "--gbs", 4, "--seq", 2048, "--schedule", csv, "--no-plot", "--json",
                         "--out", tmp_path / "o")
    assert code == 0, err
    by_csv = json.loads(out)
    by_name = json.loads(cli("run", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", 16, "--tp", 8,
                             "--pp", 2, "--gbs", 4, "--seq", 2048, "--schedule", "zb-h1", "--no-plot", "--json",
                             "--out", tmp_path / "p")[1])
    assert by_csv["step_time_s"] == pytest.approx(by_name["step_time_s"], rel=1e-12)


@pytest.mark.parametrize("schedule, extra", [
    ("gpipe", ()), ("1f1b", ()), ("interleaved-1f1b", ("--vpp", 2)), ("zb-h1", ()), ("zb-h2", ()),
    ("zb-v", ()), ("dualpipe", ()), ("dualpipev", ()), ("zb-auto", ()),
])
def test_every_schedule_runs_on_real_costs(tmp_path, schedule, extra):
    code, out, err = cli("run", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", 32, "--tp", 4,
                         "--pp", 4, "--gbs", 16, "--seq", 2048, "--schedule", schedule, *extra,
                         "--no-plot", "--json", "--out", tmp_path)
    assert code == 0, err
    rep = json.loads(out)
    assert rep["breakdown_s"]["imbalance"] > 0  # the LM head makes the last stage heavier
    assert sum(rep["breakdown_s"].values()) == pytest.approx(rep["step_time_s"], rel=1e-9)


def test_memory_order_between_schedules(tmp_path):
    """GPipe holds all micro-batches, ZB-H2 more than ZB-H1, interleaved more than 1F1B."""
    peak = {}
    for schedule, extra in (("gpipe", ()), ("1f1b", ()), ("zb-h1", ()), ("zb-h2", ()),
                            ("interleaved-1f1b", ("--vpp", 2))):
        code, out, err = cli("run", "--model", "llama3-70b", "--topology", "seed-h100", "--gpus", 64,
                             "--tp", 8, "--pp", 4, "--gbs", 16, "--seq", 8192, "--schedule", schedule, *extra,
                             "--no-plot", "--json", "--out", tmp_path)
        assert code == 0, err
        peak[schedule] = max(json.loads(out)["peak_memory_gib"])
    assert peak["gpipe"] > peak["1f1b"]
    assert peak["zb-h2"] > peak["zb-h1"]
    assert peak["interleaved-1f1b"] > peak["1f1b"]


def test_example_schedule_files_by_name():
    names = cli_json("list", "schedules")
    assert {"hand-4x4", "zb-h1-4x8", "interleaved-4x8-v2"} <= set(names)
    rep = cli_json("schedule", "zb-h1-4x8", "--pp", 4, "--microbatches", 8)
    assert rep["makespan"] == 27
    code, _, err = cli("schedule", "hand-4x4", "--pp", 2, "--microbatches", 4)
    assert code == 2 and "pp=2" in err
