"""The work estimates (simtrain.specs.budget): exact graph sizes, lower bounds that hold, and inputs far
beyond them refused with one line naming the estimate and what to change, before anything large
is built."""

from __future__ import annotations

import pytest

from simtrain import api
from simtrain.specs.budget import (MAX_GRAPH_ELEMENTS, graph_size, most_nodes, operations_lower_bound,
                             schedule_cells)
from simtrain.errors import ScheduleError
from simtrain.schedules import generate
from simtrain.topology.cluster import list_topologies, load_topology, preset_table
from simtrain.topology.spec import parse_spec
from helpers import assert_user_error

BIG = str(10**18)


@pytest.mark.quick
@pytest.mark.parametrize("name", list_topologies())
def test_graph_size_counts_what_the_build_creates(name):
    for nodes in (1, 3, 37):  # 3 and 37 leave a leaf (and a pod) partly filled
        cluster = load_topology(name, nodes=nodes)
        assert graph_size(cluster.spec) == (cluster.graph.number_of_nodes(), cluster.graph.number_of_edges())


@pytest.mark.quick
def test_graph_size_of_a_million_h100_nodes_by_hand():
    # per node 8 GPUs + 1 NVSwitch + 8 NICs; 250,000 leaves of 4 nodes; 8 spines
    # links per node: 8 NVLink + 8 PCIe + 8 NIC-leaf; 8 per leaf to the spines; two directions
    spec = parse_spec(preset_table("h100-ib"), "h100-ib", 1_000_000)
    assert graph_size(spec) == (17 * 1_000_000 + 250_000 + 8, 2 * (24 * 1_000_000 + 8 * 250_000))


@pytest.mark.quick
def test_most_nodes_is_the_last_count_that_fits():
    # h100-ib: 4 nodes and their leaf = 4 x 17 + 1 vertices and 2 x (4 x 24 + 8) edges = 277
    # elements, plus the 8 spines: 277 * n / 4 + 8 <= 2,000,000 gives n = 28,880; node 28,881
    # opens a leaf: 17 + 1 vertices and 2 x (24 + 8) edges more, past the limit.
    spec = parse_spec(preset_table("h100-ib"), "h100-ib", 8)
    assert MAX_GRAPH_ELEMENTS == 2_000_000
    assert most_nodes(spec) == 28_880


@pytest.mark.quick
def test_topology_beyond_the_graph_limit_is_refused_with_its_size():
    assert_user_error("topology", "h100-ib", "--nodes", "1000000",
                      contains=("nodes = 1,000,000", "17,250,008 vertices", "52,000,000 directed links",
                                "at most 28,880 nodes"))


@pytest.mark.quick
def test_a_billion_spines_is_refused_before_building(tmp_path):
    path = tmp_path / "spines.toml"
    path.write_text('name = "many"\ngpu = "h100-sxm"\nnodes = 2\n[node]\ngpus = 8\nnic_gbps = 400\n'
                    '[fabric]\nkind = "fat-tree"\nnodes_per_leaf = 1\nspines = 1000000000\n', encoding="utf-8")
    # 2 x 17 + 2 leaves + 10**9 spines; links 2 x 24 + 2 x 10**9, both directions
    assert_user_error("topology", str(path), contains=("spines = 1,000,000,000", "1,000,000,036 vertices",
                                                       "4,000,000,096 directed links"))


@pytest.mark.quick
@pytest.mark.parametrize("flag", ["--gpus", "--nodes"])
def test_run_with_10_to_the_18_gpus_or_nodes_is_refused(flag, tmp_path):
    assert_user_error("run", flag, BIG, "--out", str(tmp_path), contains=("cluster graph would have",))
    assert not any(tmp_path.iterdir())


@pytest.mark.quick
def test_mesh_beyond_the_rank_limit_is_refused():
    assert_user_error("mesh", "--gpus", "100000000", "--tp", "8",
                      contains=("gpus=100000000", "100,000,000 ranks", "2,097,152", "fewer GPUs"))


@pytest.mark.quick
def test_collective_with_more_groups_than_gpus_is_refused_at_once():
    assert_user_error("collective", "all-reduce", "--size", "1M", "--gpus", "8", "--topology", "h100-ib",
                      "--concurrent-groups", BIG, contains=("--concurrent-groups", "do not fit in 64 GPUs"))


@pytest.mark.quick
@pytest.mark.parametrize("argv, cells", [
    (["interleaved-1f1b", "--pp", "4", "--microbatches", "8", "--vpp", BIG], 32 * 10**18),
    (["1f1b", "--pp", BIG, "--microbatches", "8"], 8 * 10**18),
    (["1f1b", "--pp", "4", "--microbatches", BIG], 4 * 10**18),
])
def test_schedule_beyond_the_cell_limit_is_refused(argv, cells):
    assert_user_error("schedule", *argv, contains=(f"{cells:,} cells", "fewer micro-batches"))


@pytest.mark.quick
def test_generate_checks_cells_before_building(monkeypatch):
    from simtrain.specs import budget

    assert schedule_cells(4, 8, 2) == 64
    monkeypatch.setattr(budget, "MAX_SCHEDULE_CELLS", 100)
    assert generate("1f1b", 2, 50).num_microbatches == 50  # 100 cells: at the limit, built
    with pytest.raises(ScheduleError, match="pp=2 x micro-batches=51 = 102 cells, more than the 100"):
        generate("1f1b", 2, 51)


@pytest.mark.quick
def test_run_past_max_events_is_refused_before_the_schedule(tmp_path):
    # llama3-8b (32 layers), TP8: 4 + 4 operations per layer and micro-batch at least;
    # gbs 100000 at mbs 1 and dp 1 is 100,000 micro-batches: 100,000 x 32 x 8 = 25,600,000
    assert_user_error("run", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", "8", "--tp", "8",
                      "--pp", "1", "--gbs", "100000", "--max-events", "1000", "--out", str(tmp_path),
                      contains=("max_events=1,000", "at least 25,600,000 operations", "100,000 micro-batches",
                                "raise --max-events"))


@pytest.mark.quick
@pytest.mark.parametrize("settings", [
    dict(gpus=8, tp=8, pp=1, gbs=4),
    dict(gpus=16, tp=1, pp=4, gbs=16, schedule="interleaved-1f1b", vpp=2),
    dict(gpus=16, tp=2, pp=2, gbs=8, fold=False),
])
def test_operations_lower_bound_holds(settings):
    sc = api.resolve(dict(model="llama3-8b", topology="h100-ib", seq=1024, **settings))
    par = sc.parallel
    bound = operations_lower_bound(sc.model.layers, par.num_microbatches,
                                   pipelines=1 if sc.fold else par.world // par.pp, tp=par.tp)
    assert bound <= api.simulate(sc, perturbation_costs=False).report["num_events"]


@pytest.mark.quick
def test_steps_and_unfolded_pipelines_name_their_settings(tmp_path):
    # llama3-8b on 16 GPUs TP2 PP2 DP4, gbs 16: 4 micro-batches; unfolded: 16 / 2 = 8 pipelines,
    # 4 x 32 x (4 + 4) x 8 = 8,192 operations; with 3 steps 24,576
    base = ("run", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", "16", "--tp", "2", "--pp", "2",
            "--gbs", "16", "--out", str(tmp_path), "--no-fold", "--max-events", "100")
    assert_user_error(*base, contains=("at least 8,192 operations", "x 8 unfolded pipelines", "drop --no-fold"))
    assert_user_error(*base, "--steps", "3", contains=("3 steps would run at least 24,576", "fewer --steps"))


def test_drawing_a_large_cluster_is_refused_before_its_bisection(tmp_path):
    # 1,000 h100-ib nodes: 17,000 + 250 leaves + 8 spines = 17,258 vertices and 2 x (24,000 + 2,000)
    # = 52,000 directed links; 288 nodes are 72 leaves of 277 elements + 8 spines = 19,952 <= 20,000
    png = tmp_path / "t.png"
    assert_user_error("topology", "h100-ib", "--nodes", "1000", "--draw", str(png),
                      contains=("69,258 vertices and directed links", "--nodes 288 or fewer"))
    assert not png.exists()


@pytest.mark.quick
def test_a_run_that_cannot_fit_in_memory_is_refused_before_the_schedule(tmp_path, monkeypatch):
    """25,600,000 operations at 300 bytes each at least: 7.2 GiB, against 4 GiB available."""
    from simtrain.specs import budget

    monkeypatch.setattr(budget, "available_memory_bytes", lambda: 4 * 2**30)
    argv = ("run", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", "8", "--tp", "8", "--pp", "1",
            "--gbs", "100000", "--out", str(tmp_path))
    assert_user_error(*argv, "--max-events", "100000000", contains=("at least 25,600,000 operations", "at least 7.2 GiB (300 bytes each)",
                                       "more than the 4.0 GiB of memory available", "fewer micro-batches"))
    monkeypatch.setattr(budget, "available_memory_bytes", lambda: None)  # unknown: only --max-events bounds it
    assert_user_error(*argv, "--max-events", "1000", contains=("max_events=1,000",))
    budget.check_operations(32, 100, pipelines=1, tp=8, steps=1, max_events=10**6)


@pytest.mark.quick
def test_available_memory_is_read_where_the_system_says():
    from pathlib import Path

    from simtrain.specs.budget import available_memory_bytes

    meminfo = Path("/proc/meminfo")
    if not meminfo.exists():
        assert available_memory_bytes() is None or available_memory_bytes() > 0
        return
    total = next(int(line.split()[1]) * 1024 for line in meminfo.read_text().splitlines()
                 if line.startswith("MemTotal:"))
    assert 0 < available_memory_bytes() <= total


@pytest.mark.quick
@pytest.mark.parametrize("argv", [
    ("zb-auto", "--pp", 64, "--microbatches", 4096), ("zb-h2", "--pp", 64, "--microbatches", 4096),
    ("dualpipev", "--pp", 64, "--microbatches", 4096), ("zb-v", "--pp", 64, "--microbatches", 4096),
    ("1f1b", "--pp", 64, "--microbatches", 15000), ("zb-auto", "--pp", 32, "--microbatches", 2048),
])
def test_a_schedule_whose_work_is_estimated_beyond_the_bound_is_refused_first(argv):
    """Its cells times the measured cost per cell of planning (zb-auto's search included) and
    replaying it, before the schedule is built."""
    line = assert_user_error("schedule", *argv, contains=("cells would take about", "to plan and replay",
                                                          "more than the 8 s a command takes on", "at most"))
    assert f"schedule {argv[0]}:" in line


@pytest.mark.quick
def test_the_schedule_estimate_counts_the_planner_and_the_replay():
    from simtrain.specs import budget

    # an estimate from the per-cell constants, not a timing: 8,192 cells at 140 us, at 10 + 70 us
    assert budget.schedule_seconds("zb-auto", 32, 256) == pytest.approx(32 * 256 * 140e-6)
    assert budget.schedule_seconds("1f1b", 32, 256, replay=True) == pytest.approx(32 * 256 * 80e-6)
    assert budget.schedule_seconds("zb-auto", 32, 256) > 10 * budget.schedule_seconds("1f1b", 32, 256)
    assert budget.schedule_seconds("1f1b", 32, 256, replay=True) > budget.schedule_seconds("1f1b", 32, 256)
    assert budget.schedule_seconds("interleaved-1f1b", 8, 64, vpp=2) == 2 * budget.schedule_seconds(
        "interleaved-1f1b", 8, 64)
    budget.check_schedule("zb-auto", 32, 256, replay=True)  # within the bound: no error


L8_16 = {"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2, "pp": 2, "seq": 2048, "gbs": 16}


@pytest.mark.quick
@pytest.mark.parametrize("settings", [dict(L8_16, steps=3),
                                      dict(L8_16, gpus=8, pp=4, dp=1, gbs=8, first_stage_layers=5),
                                      dict(L8_16, schedule="interleaved-1f1b", vpp=2, recompute="full")])
def test_the_lowered_estimate_counts_every_layer_and_step(settings, monkeypatch):
    """The estimate made after the first rank's first step (its operations / its share of the
    layer passes x steps) is the run's operation count: exact where every rank emits alike,
    within 5% where the stages differ (the first stage here holds 5 of 32 layers)."""
    from simtrain.specs import budget

    seen = []
    real = budget.check_lowered
    monkeypatch.setattr(budget, "check_lowered", lambda first, **kw: seen.append((first, kw)) or real(first, **kw))
    report = api.simulate(api.resolve(settings)).report
    (first, kw), partial = seen[-1], seen[:-1]
    assert not kw["partial"] and all(k["partial"] for _, k in partial)
    estimate = round(first / kw["share"]) * kw["steps"]
    for f, k in partial:  # from an eighth and half of the first rank's actions: mostly low
        assert round(f / k["share"]) * k["steps"] <= 1.05 * report["num_events"]
    assert kw["steps"] == settings.get("steps", 1) and kw["ranks"] == report["simulated_ranks"]
    assert abs(estimate - report["num_events"]) <= 0.05 * report["num_events"], (estimate, report["num_events"])
    if "first_stage_layers" not in settings:
        assert estimate == report["num_events"]


@pytest.mark.quick
def test_steps_beyond_the_budget_are_refused_after_the_first_step(tmp_path):
    """The issue's ``--steps 1000`` on 16 GPUs: 2,160,000 operations, over the 2,000,000 default,
    which the up-front lower bound (1,024 per step) cannot see; refused after 1,080 are lowered."""
    argv = ("run", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", "16", "--tp", "2", "--pp", "2",
            "--seq", "2048", "--gbs", "16", "--out", str(tmp_path))
    assert_user_error(*argv, "--steps", "1000",
                      contains=("max_events=2,000,000", "about 2,160,000 operations", "x 1,000 steps",
                                "GiB", "s of CPU", "raise --max-events", "fewer --steps"))
    assert_user_error(*argv, "--steps", "3", "--max-events", "5000", contains=("about 6,480 operations",))
    assert api.simulate(api.resolve({**L8_16, "steps": 3, "max_events": 6480})).report["num_events"] == 6480
    assert not list(tmp_path.iterdir())  # refused before any output


@pytest.mark.quick
def test_a_run_beyond_the_memory_available_is_refused_after_the_first_step(monkeypatch):
    from simtrain.specs import budget
    from simtrain.errors import SpecError

    monkeypatch.setattr(budget, "available_memory_bytes", lambda: 1_500_000)  # 5,000 operations at 300 B
    with pytest.raises(SpecError, match=r"about 6,480 operations .* more than the 0\.0 GiB of memory available"):
        api.simulate(api.resolve({**L8_16, "steps": 3}))


@pytest.mark.quick
def test_a_run_of_one_simulated_rank_is_refused_before_most_of_it_is_built(monkeypatch):
    """With PP 1 the first rank is the whole run: the estimate from an eighth of its actions
    refuses it (here 4,214 operations against 2,000) after about 550 are lowered."""
    from simtrain.specs import budget
    from simtrain.errors import SpecError

    seen = []
    real = budget.check_lowered
    monkeypatch.setattr(budget, "check_lowered", lambda first, **kw: seen.append(first) or real(first, **kw))
    settings = dict(L8_16, gpus=8, pp=1, dp=4, gbs=32, max_events=3000)
    with pytest.raises(SpecError, match=r"max_events=3,000: the run would simulate about [0-9,]+ operations \(\d+ in "
                                        r"12\.5% of the layer passes of a step\)"):
        api.simulate(api.resolve(settings))
    assert seen and seen[-1] < 1000


@pytest.mark.quick
@pytest.mark.parametrize("command", ["run", "compare", "analytic"])
def test_a_huge_mtp_layer_count_is_refused_in_one_line(command):
    """Multi-token prediction layers count with the decoder layers in the step's operation bound and
    the parameter sums, so 2**63 - 1 of them is refused at once (the lowering used to walk them
    one by one, and the closed form summed their parameters layer by layer)."""
    out = ["--no-plot", "--out", "unused"] if command == "run" else []
    line = assert_user_error(command, "--mtp-layers", str(2**63 - 1), *out)
    assert ("9,223,372,036,854,775,887 layers" in line) if command == "run" else ("no recompute count fits" in line)
