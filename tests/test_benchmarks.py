"""The scale benchmark's quick form runs every scenario to the end (no timing is asserted: the
point is that the benchmark never rots)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_scale.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_scale", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_scale_benchmark_runs_every_scenario(capsys):
    bench = _bench()
    rows = bench.main(["--quick", "--jobs", "1"])
    out = capsys.readouterr().out
    assert [r["scenario"] for r in rows] == list(bench.SCENARIOS)
    assert not [r for r in rows if "error" in r], out
    by = {r["scenario"]: r for r in rows}
    for r in rows:
        assert r["operations"] > 0 and r["peak_rss_mib"] > 0 and r["bare_simpy_per_s"] > 0
        assert r["engine_over_bare"] == r["ops_per_s"] / r["bare_simpy_per_s"]
        assert f"{r['operations']:,}" in out
        if r["scenario"] != "S4":  # the search's engines run in its workers
            assert 0 < r["engine_phase_s"] <= r["wall_s"] and 0 <= r["engine_load_s"] < r["wall_s"]
            assert r["engine_phase_over_bare"] == r["operations"] / r["engine_phase_s"] / r["bare_simpy_per_s"]
            assert r["engine_phase_over_bare"] >= r["engine_over_bare"]
    # columns, not an object per op: well under the 400 bytes an op object with its list took
    assert 0 < by["S1"]["program_bytes_per_op"] <= 200, by["S1"]
    # the network model prices operations, it does not add or remove them
    assert by["S2"]["operations"] == by["S2-flow"]["operations"]
    assert by["S6"]["operations"] == by["S6-analytic"]["operations"]
    # four times the micro-batches, about four times the operations; their per-op cost is printed
    assert 3 * by["S1-run"]["operations"] < by["S1-2048"]["operations"] <= 4 * by["S1-run"]["operations"]
    assert "per-op cost at gbs 2,048 over gbs 512" in out


@pytest.mark.quick
def test_a_repeated_scenario_keeps_its_run_of_least_cpu_time():
    bench = _bench()
    runs = [{"scenario": "S1", "cpu_s": 2.0, "wall_s": 2.1}, {"scenario": "S1", "cpu_s": 1.5, "wall_s": 3.0},
            {"scenario": "S1", "cpu_s": 1.5, "wall_s": 1.6}, {"scenario": "S1", "cpu_s": 1.7, "wall_s": 1.7}]
    best = bench.least_cpu(runs)
    assert best["cpu_s"] == 1.5 and best["wall_s"] == 3.0  # the first of equals: a row of one run, whole
    assert best["runs"] == 4 and best["cpu_s_runs"] == [2.0, 1.5, 1.5, 1.7]
    assert "runs" not in runs[1]  # the runs' own rows are left as they were
    with pytest.raises(SystemExit) as refused:  # argparse's one line and exit status 2
        bench.main(["--repeat", "0"])
    assert refused.value.code == 2


@pytest.mark.quick
def test_bare_simpy_rate_counts_its_events():
    assert _bench().bare_simpy_rate(1000) > 0


EDGES = BENCH.parent / "bench_edges.py"


def test_quick_edge_benchmark_refuses_every_cheap_command(capsys):
    spec = importlib.util.spec_from_file_location("bench_edges", EDGES)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.main(["--quick", "--limit", "60"])
    out = capsys.readouterr().out
    cheap = [name for name, (is_cheap, _) in bench.COMMANDS.items() if is_cheap]
    assert [r["name"] for r in rows] == cheap, out
    for r in rows:  # each a user error: exit 2 and one line, not a timeout or a traceback
        assert r["rc"] == "2" and r["stderr"].startswith("simtrain: error: "), r
        assert r["peak_rss_mib"] > 0 and r["command"] in out


def test_the_compiled_loops_load_is_timed_once_and_apart_from_the_phase():
    """In a fresh process the first compiled run's load (the loop's saved machine code, loaded
    without numba) is timed apart, inside the engine's time."""
    import json
    import subprocess
    import sys

    from simtrain.engine import loop_code

    assert loop_code.LOOP.run_loop.prepare(loop_code.ARGS)  # saved (built now where it was not)
    script = f"""
import json, sys, importlib.util
spec = importlib.util.spec_from_file_location("bench_scale", {str(BENCH)!r})
bench = importlib.util.module_from_spec(spec); spec.loader.exec_module(bench)
from simtrain import api
from simtrain.engine import simulator
simulator.COMPILED_MIN_OPS = 0  # this small run takes the compiled loop
engine, load = [0.0], [0.0]
with bench._engine_timed(engine), bench._load_timed(load):
    api.simulate(api.resolve(bench.SCENARIOS["S1-run"][3]))
print(json.dumps([engine[0], load[0], simulator.loop_loaded(), "numba" in sys.modules]))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    engine_s, load_s, compiled, numba = json.loads(out.strip().splitlines()[-1])
    assert 0 < load_s < engine_s
    assert compiled and not numba
