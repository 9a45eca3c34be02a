"""Schedules in the engine: equal to the fixed-cost replay, `simtrain schedule`, CSV files in runs."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from helpers import cli, cli_json
from simtrain.workload.fixed_cost import run_schedule
from simtrain.schedules import generate, replay, scaled_costs

CASES = st.sampled_from([
    ("gpipe", {}), ("1f1b", {}), ("interleaved-1f1b", {"vpp": 2}), ("interleaved-1f1b", {"vpp": 3}),
    ("zb-h1", {}), ("zb-h2", {}), ("zb-v", {}), ("dualpipe", {}), ("dualpipev", {}), ("zb-auto", {}),
])


@settings(max_examples=40, deadline=None)
@given(case=CASES, p=st.integers(1, 8), k=st.integers(1, 4),
       costs=st.tuples(st.floats(0.2, 3), st.floats(0.2, 3), st.floats(0.2, 3)),
       comm=st.sampled_from([0.0, 0.1]))
def test_engine_matches_replay(case, p, k, costs, comm):
    name, params = case
    if name.startswith("dualpipe") or name in ("zb-h2", "zb-v"):
        p = max(2, p - p % 2)
        m = 2 * p * k
    elif name == "interleaved-1f1b":
        m = p * k
    else:
        m = p + k
    if name == "zb-auto":
        params = {"costs": costs, "comm": comm}
    sched = generate(name, p, m, **params)
    run = run_schedule(sched, *costs, comm=comm)
    ref = replay(sched, scaled_costs(sched, *costs), comm=comm)
    if comm == 0:
        assert run.makespan == pytest.approx(ref.makespan, rel=1e-9)
        assert run.peak_inflight == pytest.approx(list(ref.peak_inflight))
    else:
        # the engine sends one transfer at a time per rank (its pp_send stream) where the replay
        # treats the latency as free of contention: serialising can only delay
        assert run.makespan >= ref.makespan - 1e-9


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
