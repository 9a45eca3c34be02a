"""Wall time, operations, rate and peak memory of six standard scenarios, small to 131,072 GPUs.

Run: python benchmarks/bench_scale.py [--quick] [--only S1,S5] [--jobs 2] [--repeat 3]

S1 also prints the bytes its lowered program holds per operation. Each scenario runs in a fresh
process, so its peak RSS is its own; ``cpu s`` is the process's
CPU time over the same span (the search's is its own, not its workers'), steadier than the wall
time on a shared machine. In that process a bare SimPy
loop of timeouts is timed first (the best of three): ``engine/bare`` is the simulator's operations per second over
that loop's events per second, a machine-independent measure of the engine's overhead, and
``phase/bare`` the same for the engine's phase alone (its runs' operations per second of their own
time: the event loop, the timeline's columns and the span check; "-" for the search, whose engines
run in its workers). As the bare loop's time leaves out SimPy's import, the phase leaves out the
compiled loop's one-time load (llvmlite's load of its saved machine code, on a process's first
compiled run); ``load s`` prints it with the flow model's (its compiled functions' load, at the first
flow model); ``cpu s`` and ``wall s`` include both. Not a test: machines
are noisy; compare rows of one machine, as ratios.

S1  the 70B example of docs/commands.md (64 GPUs, TP8 PP4 DP2, gbs 512, 1F1B) with every output written
S1-run, S1-2048  the same run without outputs at gbs 512 and at gbs 2,048 (4x the operations): the
    CPU seconds per operation of the second over the first is printed after the table
S2  Llama-3-405B on 16,384 H100s, TP8 PP16 DP128, interleaved 1F1B (vpp 2), gbs 2048 (analytic,
    then flow)
S3  Llama-3-70B on 1,024 GPUs, TP8 PP8 DP16, gbs 512, 1F1B, every rank simulated (--no-fold)
S4  the course notes' 70B / 64-GPU search over every schedule
S5  Llama-3-405B on 131,072 GPUs, TP8 PP16 DP1024, gbs 16384 (analytic)
S6  Mixtral 8x7B, TP8 x EP8 across nodes on a 2:1 oversubscribed fabric, flow network (and the
    same run analytic, for the ratio)
``--quick`` runs each at a reduced size (a few seconds each); the test suite runs it.
``--repeat N`` runs each scenario N times, each in a fresh process, and prints the run of least CPU
time (the others' CPU seconds are in its row's ``cpu_s_runs``): on a shared machine other work only
adds time, so the least is the nearest to an idle machine's.
Each scenario's process has NumPy's huge-page advice set as the command line sets it
(:mod:`simtrain.cli.pages`: off where ``NUMPY_MADVISE_HUGEPAGE`` is unset); run with
``NUMPY_MADVISE_HUGEPAGE=1`` to measure with NumPy's own default.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from simtrain.cli.pages import VARIABLE, small_pages_unless_set

L405 = dict(model="llama3-405b", topology="h100-ib", tp=8, pp=16, seq=8192)
MIXTRAL = dict(model="mixtral-8x7b", topology="h100-ib-2to1", gpus=64, tp=8, ep=8, pp=1,
               order="tp-cp-dp-ep-pp", seq=4096, gbs=64)

#: name -> (what, kind, full settings, quick settings)
SCENARIOS: dict[str, tuple[str, str, dict, dict]] = {
    "S1": ("70B 64 GPUs gbs 512, all outputs", "outputs",
           dict(model="llama3-70b", topology="seed-h100", gpus=64, tp=8, pp=4, dp=2, seq=8192, gbs=512,
                schedule="1f1b"),
           dict(model="llama3-70b", topology="seed-h100", gpus=64, tp=8, pp=4, dp=2, seq=8192, gbs=16,
                schedule="1f1b")),
    "S1-run": ("S1 without outputs, gbs 512", "run",
               dict(model="llama3-70b", topology="seed-h100", gpus=64, tp=8, pp=4, dp=2, seq=8192, gbs=512,
                    schedule="1f1b"),
               dict(model="llama3-70b", topology="seed-h100", gpus=64, tp=8, pp=4, dp=2, seq=8192, gbs=16,
                    schedule="1f1b")),
    "S1-2048": ("S1 without outputs, gbs 2,048", "run",
                dict(model="llama3-70b", topology="seed-h100", gpus=64, tp=8, pp=4, dp=2, seq=8192, gbs=2048,
                     schedule="1f1b", max_events=20_000_000),
                dict(model="llama3-70b", topology="seed-h100", gpus=64, tp=8, pp=4, dp=2, seq=8192, gbs=64,
                     schedule="1f1b")),
    "S2": ("405B 16,384 GPUs interleaved, analytic", "run",
           dict(L405, gpus=16384, dp=128, schedule="interleaved-1f1b", vpp=2, first_stage_layers=3,
                last_stage_layers=3, gbs=2048),
           dict(L405, gpus=256, pp=4, dp=8, schedule="interleaved-1f1b", vpp=2, gbs=32)),
    "S2-flow": ("405B 16,384 GPUs interleaved, flow", "run",
                dict(L405, gpus=16384, dp=128, schedule="interleaved-1f1b", vpp=2, first_stage_layers=3,
                     last_stage_layers=3, gbs=2048, network="flow"),
                dict(L405, gpus=64, pp=4, dp=2, schedule="interleaved-1f1b", vpp=2, gbs=8, network="flow")),
    "S3": ("70B 1,024 GPUs 1F1B --no-fold", "run",
           dict(model="llama3-70b", topology="h100-ib", gpus=1024, tp=8, pp=8, dp=16, seq=8192, gbs=512,
                schedule="1f1b", fold=False, max_events=10_000_000),  # 5.4M operations
           dict(model="llama3-70b", topology="h100-ib", gpus=64, tp=8, pp=4, dp=2, seq=8192, gbs=16,
                schedule="1f1b", fold=False)),
    "S4": ("70B 64 GPUs search, all schedules", "search",
           dict(base=dict(model="llama3-70b", topology="seed-h100", nodes=8, seq=8192, gbs=512), gpus=64,
                top=None, schedules=None),
           dict(base=dict(model="llama3-70b", topology="seed-h100", nodes=8, seq=8192, gbs=16), gpus=64,
                top=1, schedules=("1f1b",))),
    "S5": ("405B 131,072 GPUs, analytic", "run",
           dict(L405, gpus=131072, dp=1024, gbs=16384),
           dict(L405, gpus=4096, pp=4, dp=128, gbs=512)),
    "S6": ("Mixtral TP8 EP8 2:1 fabric, flow", "run", dict(MIXTRAL, network="flow"),
           dict(MIXTRAL, network="flow", gbs=8, seq=1024)),
    "S6-analytic": ("Mixtral TP8 EP8 2:1 fabric, analytic", "run", dict(MIXTRAL), dict(MIXTRAL, gbs=8, seq=1024)),
}


def bare_simpy_rate(events: int = 200_000, tries: int = 3) -> float:
    """Events per second of a SimPy loop that only waits on timeouts: the ceiling of any
    SimPy-based engine on this machine and interpreter (the best of ``tries`` loops, as one loop
    of a fraction of a second is easily slowed by the machine's other work)."""
    import simpy

    def loop(env: simpy.Environment):
        for _ in range(events):
            yield env.timeout(1.0)

    best = 0.0
    for _ in range(tries):
        env = simpy.Environment()
        env.process(loop(env))
        t0 = time.perf_counter()
        env.run()
        best = max(best, events / (time.perf_counter() - t0))
    return best


def run_one(name: str, quick: bool, jobs: int) -> dict:
    """Run scenario ``name`` in this process; its row (JSON-ready)."""
    from simtrain import api

    what, kind, full, small = SCENARIOS[name]
    settings = small if quick else full
    bare = bare_simpy_rate(50_000, tries=1) if quick else bare_simpy_rate(200_000)
    t0 = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = usage.ru_utime + usage.ru_stime
    engine_s = [0.0]  # seconds inside the engine's runs (this process only: not the search's workers)
    load_s = [0.0]  # of which the compiled loop's one-time load
    flow_load_s = [0.0]  # the flow model's compiled loop's one-time load (at the network's construction)
    if kind == "search":
        ops = _search(settings, jobs)
    else:
        with _engine_timed(engine_s), _load_timed(load_s), _flow_load_timed(flow_load_s):
            result = api.simulate(api.resolve(settings))
        ops = result.report["num_events"]
        if kind == "outputs":
            with tempfile.TemporaryDirectory() as out:
                api.write_outputs(result, out, plot=True)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime - cpu0
    rss = usage.ru_maxrss / 1024  # KiB on Linux
    if kind == "search":  # candidates ran in child processes: add their peak
        rss = max(rss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
    row = {"scenario": name, "what": what, "wall_s": wall, "cpu_s": cpu, "operations": ops, "ops_per_s": ops / wall,
           "peak_rss_mib": rss, "bare_simpy_per_s": bare, "engine_over_bare": ops / wall / bare}
    if engine_s[0] > 0:  # the engine phase alone: its operations per second over the bare loop's events
        row["engine_load_s"] = load_s[0]
        row["engine_phase_s"] = engine_s[0] - load_s[0]
        row["engine_phase_over_bare"] = ops / row["engine_phase_s"] / bare
    if flow_load_s[0] > 0:
        row["flow_load_s"] = flow_load_s[0]
    if name == "S1":  # after the timed run: tracing allocations slows what it traces
        row["program_bytes_per_op"] = program_bytes_per_op(settings)
    return row


@contextmanager
def _engine_timed(total: list[float]):
    """Add the seconds spent in the engine's runs (``simtrain.engine.simulator.run`` as
    ``simtrain.api.simulate`` calls it: the event loop, the timeline's columns and the span check;
    wall time, as the bare loop's rate is) to ``total[0]``."""
    import importlib

    engine = importlib.import_module("simtrain.api.simulate").engine  # the module (the package exports a function)
    run = engine.run

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return run(*args, **kwargs)
        finally:
            total[0] += time.perf_counter() - t0

    engine.run = timed
    try:
        yield
    finally:
        engine.run = run


@contextmanager
def _load_timed(total: list[float]):
    """Add the seconds the compiled loop's one-time load takes (llvmlite's load of the loop's saved
    machine code, :mod:`simtrain.engine.loop_code`; where none is saved, numba's import, its
    compile and the saving; where none can be saved, numba's dispatcher) to ``total[0]``; timed at
    the first compiled run, which would otherwise spend it inside its own time."""
    import importlib

    simulator = importlib.import_module("simtrain.engine.simulator")
    run_compiled = simulator._run_compiled

    def loaded_first(run):
        if "simtrain.engine.priced" not in sys.modules:
            t0 = time.perf_counter()
            from simtrain.engine import loop_code

            loop_code.LOOP.run_loop.prepare(loop_code.ARGS)  # its machine code, or numba's dispatcher
            loop_code.RECORDS.fill.prepare(loop_code.FILL_ARGS)
            total[0] += time.perf_counter() - t0
        return run_compiled(run)

    simulator._run_compiled = loaded_first
    try:
        yield
    finally:
        simulator._run_compiled = run_compiled


@contextmanager
def _flow_load_timed(total: list[float]):
    """Add the seconds the flow model's compiled functions take to load (their saved machine code,
    :mod:`simtrain.network.flow_kernels`, or numba's import and cached code where none is saved),
    which the first flow model would otherwise spend inside its first events, to ``total[0]``:
    timed at the first flow model, by running a one-node model first."""
    from simtrain.network import solver

    init = solver.FlowModel.__init__
    loaded = []

    def first_loads(self, cluster, record=False):
        if not loaded:
            loaded.append(True)
            t0 = time.perf_counter()
            _warm_flow_model()
            total[0] += time.perf_counter() - t0
        init(self, cluster, record)

    first_loads.__wrapped__ = init  # type: ignore[attr-defined]
    solver.FlowModel.__init__ = first_loads
    try:
        yield
    finally:
        solver.FlowModel.__init__ = init


def _warm_flow_model() -> None:
    """Two transfers on one node's NVSwitch, through every call the model makes into its loop."""
    from simtrain.network import solver
    from simtrain.topology.cluster import build_topology

    node = build_topology({"gpu": "h100-sxm", "nodes": 1, "node": {"gpus": 2}}, "node")
    model = solver.FlowModel.__new__(solver.FlowModel)
    solver.FlowModel.__init__.__wrapped__(model, node, True)  # type: ignore[attr-defined]
    links = [("gpu0", "node0/nvswitch"), ("node0/nvswitch", "gpu1")]
    model.add(0.0, 0, [(links, 1e6)])
    model.add(0.0, 1, [], 1e-6)
    while (t := model.next_event_s()) is not None:
        model.advance(t)


def program_bytes_per_op(settings: dict) -> float:
    """Bytes the lowered program of ``settings`` holds per operation (live Python allocations
    made by the lowering, after a collection), measured by ``tracemalloc``."""
    import gc
    import tracemalloc

    from simtrain import api
    from simtrain.topology.mesh import build_mesh
    from simtrain.workload.lower import lower
    from simtrain.workload.options import WorkloadOptions

    sc = api.resolve(settings)
    par, opts = sc.parallel, WorkloadOptions()
    mesh = build_mesh(par.tp, par.cp, par.dp, par.pp, ep=par.ep, etp=par.etp, order=par.order,
                      gpus_per_node=sc.cluster.gpus_per_node)
    schedule = api.build_schedule(sc, opts)
    gc.collect()
    tracemalloc.start()
    try:
        program = lower(sc.model, par, sc.gpu, schedule, mesh, opts)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return held / len(program.ops)


def least_cpu(runs: list[dict]) -> dict:
    """The row of the run of least CPU time among ``runs`` of one scenario (the first of equals),
    with ``runs`` and ``cpu_s_runs`` (every run's CPU seconds, in order) added: another process
    on a shared machine only ever adds time, so the least is the closest to an idle machine's."""
    best = dict(min(runs, key=lambda r: r["cpu_s"]))
    best["runs"], best["cpu_s_runs"] = len(runs), [r["cpu_s"] for r in runs]
    return best


def _search(settings: dict, jobs: int) -> int:
    """Run the search; its operations are those of every simulated candidate."""
    from simtrain.schedules import REGISTRY
    from simtrain.layout_search.simulated import load_results, simulated_search

    schedules = settings["schedules"] or tuple(REGISTRY)
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "r.jsonl"
        simulated_search(settings["base"], gpus=settings["gpus"], gpus_per_node=8, top=settings["top"], jobs=jobs,
                         results=results, resume=False, schedules=schedules, vpps=(1, 2))
        return sum(row["report"].get("num_events", 0) for row in load_results(results).values())


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="reduced sizes, a few seconds each")
    ap.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    ap.add_argument("--jobs", type=int, default=2, help="processes of the search (S4)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each scenario, each in a fresh process; its row is the run of least CPU time")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # run one scenario here, print its row as JSON
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one, args.quick, args.jobs)))
        return []
    names = args.only.split(",")
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        ap.error(f"--only {unknown[0]}: unknown scenario; valid: {', '.join(SCENARIOS)}")
    if args.repeat < 1:
        ap.error(f"--repeat {args.repeat}: must be at least 1")
    head = (f"{'scenario':<12} {'what':<40} {'wall s':>8} {'cpu s':>8} {'operations':>11} {'ops/s':>9} {'peak RSS MiB':>12} "
            f"{'bare SimPy/s':>12} {'engine/bare':>11} {'load s':>6} {'phase/bare':>10}")
    env = dict(os.environ)  # each scenario's process as the command line runs (simtrain.cli.pages)
    small_pages_unless_set(env)
    print(f"(NumPy's huge-page advice: {'off' if env[VARIABLE] == '0' else 'on'}, {VARIABLE}={env[VARIABLE]}, "
          f"as the command line sets it where unset)")
    if args.repeat > 1:
        print(f"(each row: the least CPU time of {args.repeat} runs, each in a fresh process)")
    print(head)
    rows = []
    for name in names:
        cmd = [sys.executable, __file__, "--one", name, "--jobs", str(args.jobs)] + (["--quick"] if args.quick else [])
        runs = [subprocess.run(cmd, capture_output=True, text=True, env=env) for _ in range(args.repeat)]
        failed = [p for p in runs if p.returncode]
        if failed:
            print(f"{name:<12} failed: {(failed[0].stderr.strip().splitlines() or ['?'])[-1]}", flush=True)
            rows.append({"scenario": name, "error": failed[0].stderr})
            continue
        r = least_cpu([json.loads(p.stdout.strip().splitlines()[-1]) for p in runs])
        rows.append(r)
        print(f"{name:<12} {r['what']:<40} {r['wall_s']:>8.2f} {r['cpu_s']:>8.2f} {r['operations']:>11,} {r['ops_per_s']:>9,.0f} "
              f"{r['peak_rss_mib']:>12,.0f} {r['bare_simpy_per_s']:>12,.0f} {r['engine_over_bare']:>11.3f} "
              f"{_load(r):>6} {_phase(r):>10}", flush=True)
    by = {r["scenario"]: r for r in rows if "error" not in r}
    if "S1-run" in by and "S1-2048" in by:
        a, b = (by[k]["cpu_s"] / by[k]["operations"] for k in ("S1-run", "S1-2048"))
        print(f"per-op cost at gbs 2,048 over gbs 512 (S1-2048 over S1-run, CPU s per operation): {b / a:.2f}")
    if "S6" in by and "S6-analytic" in by:
        flow, analytic = by["S6"], by["S6-analytic"]
        fl = flow.get("flow_load_s", 0.0)
        print(f"S6 flow over its analytic run (CPU s): {flow['cpu_s'] / analytic['cpu_s']:.1f}, or "
              f"{(flow['cpu_s'] - fl) / analytic['cpu_s']:.1f} without the flow loop's load ({fl:.2f} s)")
    for r in rows:
        if "program_bytes_per_op" in r:
            print(f"{r['scenario']} program: {r['program_bytes_per_op']:.0f} bytes per operation (tracemalloc, the "
                  f"lowered program alone)")
    return rows


def _load(row: dict) -> str:
    """The compiled loops' load (the engine's and the flow model's), or "-" where the engine ran in
    other processes."""
    load = row.get("engine_load_s")
    return "-" if load is None else f"{load + row.get('flow_load_s', 0.0):.2f}"


def _phase(row: dict) -> str:
    """The engine phase's ratio to the bare loop, or "-" where the engine ran in other processes."""
    ratio = row.get("engine_phase_over_bare")
    return "-" if ratio is None else f"{ratio:.3f}"


if __name__ == "__main__":
    main()
