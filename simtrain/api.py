"""The Python API: resolve a scenario, simulate it, write its outputs.

``simulate()`` is the product: a model, a cluster and a parallel layout in, the simulated step out
(timeline and report). The CLI is a thin layer over these functions. Only this module and
``outputs/`` touch the filesystem.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any


from simtrain import budget, engine
from simtrain.api_types import check_choice, check_fields, check_instance, check_path, check_settings
from simtrain.energy import power_draw
from simtrain.errors import SimtrainError, SpecError
from simtrain.topology.mesh import build_mesh
from simtrain.metrics import Report, run_report
from simtrain.outputs.html import SideBySide
from simtrain.outputs.view import ChartOptions
from simtrain.outputs.words import counted
from simtrain.network.algorithms import check_forced
from simtrain.network.analytic import AnalyticNetwork
from simtrain.network.models import MODELS as NETWORK_MODELS
from simtrain.costs import Shape, pp_activation_bytes
from simtrain.costs.calibration import check_peaks, read_calibration
from simtrain.workload.moe_routing import Routing
from simtrain import perturbed
from simtrain.specs.perturbation import Perturbations
from simtrain.topology.faults import check_links, perturb_links
from simtrain.workload.jitter import apply_jitter, jitter_of
from simtrain.schedules import REGISTRY as SCHEDULES, load_schedule, validate
from simtrain.specs.applies import check_applies
from simtrain.specs.gpu import GpuSpec
from simtrain.specs.model import ModelSpec, load_model
from simtrain.specs.parallel import ParallelSpec, resolve_parallel, validate_parallel
from simtrain.settings import OUTPUTS, SETTINGS, complete, defaults_note, setting
from simtrain.scenario import RunOptions, Scenario, given_settings, recorded, scenario_config
from simtrain.specs.strict import Table, read_toml
from simtrain.finite import check_finite, check_timeline
from simtrain.timeline import Timeline
from simtrain.topology.build import paused_gc
from simtrain.topology.cluster import Cluster, cluster_for
from simtrain.topology.routes import Router
from simtrain.workload.stages import chunk_pass_times, split_layers
from simtrain.workload.lower import lower
from simtrain.workload.memory import memory_plan
from simtrain.workload.options import WorkloadOptions
from simtrain.units import GiB


@dataclass(frozen=True)
class SimResult:
    """What :func:`simulate` returns: the timeline, its report and what the outputs draw."""

    scenario: Scenario
    timeline: Timeline
    report: Report  # JSON-ready metrics and configuration (deterministic: no wall time)
    wall_s: float
    rank_labels: dict[int, str]
    static_bytes: dict[int, float]  # static memory per simulated rank
    link_series: dict = field(default_factory=dict)  # "u->v" -> [(time_s, utilisation)] (flow fidelity)


def load_config(path: str | Path) -> dict[str, Any]:
    """Read an experiment TOML: a flat table whose keys are the settings
    (:data:`simtrain.settings.SETTINGS`) and the output settings (:data:`~simtrain.settings.OUTPUTS`:
    ``out``, ``plot``, ``json``, ``require_fit``), each checked as :func:`resolve` checks it."""
    source = str(check_path("load_config", "path", path))
    table = Table(read_toml(path), source)
    out = {}
    for name, entry in {**SETTINGS, **OUTPUTS}.items():
        value = table.get(name, entry.kind, None)
        if value is not None:
            out[name] = entry.validate(value, source)
    table.done()
    return out


def resolve(settings: dict[str, Any] | None = None, recompute_rule: str = "memory", *,
            strict: bool = True) -> Scenario:
    """Resolve user settings (names, numbers) into a validated :class:`Scenario`.

    Each setting given replaces one value of the default scenario
    (:data:`~simtrain.settings.DEFAULT_SCENARIO`); the others keep theirs, and ``nodes``, ``dp``
    and ``etp`` are derived when not given (:func:`simtrain.settings.complete`). Output settings
    (``out``, ...) are ignored. An impossible combination raises a one-line
    :class:`~simtrain.errors.SpecError` that names the values that clash, the default values
    among them the caller did not set, and the flags that override those.
    ``recompute="auto"`` takes the fewest recomputed layers per chunk with which the simulated
    peak memory fits (``recompute_rule="memory"``) or the closed form's memory estimate fits
    (``"ledger"``, what ``simtrain analytic`` and ``compare`` use so both sides recompute the same
    layers). With ``strict`` (the default) a setting that acts on other runs only is refused
    (:mod:`simtrain.specs.applies`); a layout search resolves its candidates without it.

    >>> sc = resolve({"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2, "pp": 2,
    ...               "seq": 2048, "gbs": 16})
    >>> sc.parallel.dp, sc.parallel.num_microbatches
    (4, 4)
    >>> resolve({"gbs": 64}).parallel.tp, resolve({"gbs": 64}).parallel.pp  # the default's tp, pp
    (8, 4)
    >>> resolve({"gpus": 100})
    Traceback (most recent call last):
    ...
    simtrain.errors.SpecError: gpus=100 is not divisible by tp*cp*pp=32 (tp=8, cp=1, pp=4); dp cannot be
    derived; valid tp with cp=1, pp=4: 1, 5, 25; defaults in use: tp=8, pp=4 (override with --tp, --pp)
    """
    settings = check_settings("resolve", settings)
    check_choice("resolve", "recompute_rule", recompute_rule, ("memory", "ledger"))
    s = complete(settings)
    given = {k for k, v in settings.items() if v is not None}
    try:
        scenario = _resolve(s, recompute_rule)
        if strict:
            check_applies(scenario.model, scenario.parallel, s)
        return recorded(scenario, s, given)
    except SimtrainError as exc:
        note = defaults_note(str(exc), given)
        if not note:
            raise
        raise type(exc)(f"{exc}{note}") from None


def _resolve(s: dict[str, Any], recompute_rule: str) -> Scenario:
    """:func:`resolve` of completed settings ``s`` (which it fills with the derived values), not yet
    recorded (:func:`simtrain.scenario.recorded`)."""
    model = load_model(s["model"])
    if s["mtp_layers"] is not None:
        model = replace(model, mtp_layers=s["mtp_layers"])
    cluster = cluster_for(s["topology"], s["gpus"], s["nodes"])
    gpu = cluster.gpu if s["efficiency"] is None else cluster.gpu.with_efficiency(s["efficiency"])
    # every field of ParallelSpec is the setting of its name; the degrees and gbs are passed on their own
    par_kw = {f.name: s[f.name] for f in fields(ParallelSpec) if f.name not in ("tp", "cp", "pp", "dp", "gbs")}
    if s["fp8"] and gpu.peak_fp8_flops is None:
        raise SpecError(f"--fp8: gpu {gpu.name} has no FP8 tensor cores (Hopper or later has)")
    calibration = read_calibration(s["calibration"]) if s["calibration"] else None
    if calibration is not None:
        check_peaks(calibration, gpu)
    par = resolve_parallel(s["gpus"], tp=s["tp"], cp=s["cp"], pp=s["pp"], dp=s["dp"], gbs=s["gbs"], **par_kw)
    validate_parallel(par, model, s["gpus"])
    SCHEDULES.check_vpp(par.schedule, par.vpp)
    s["dp"] = par.dp
    s["recompute"] = par.recompute
    routing = Routing(skew=s["routing_skew"], seed=s["routing_seed"])
    if par.recompute == "auto":
        if recompute_rule == "ledger":
            n = ledger_recompute(model, cluster, gpu, par)
        else:
            n = auto_recompute(Scenario(model=model, cluster=cluster, gpu=gpu, parallel=par,
                                        network=s["network"], collective_algo=None, fold=s["fold"],
                                        max_events=s["max_events"], routing=routing, calibration=calibration))
        par = replace(par, recompute=str(n))
        s["recompute_layers"] = n
    if s["collective_algo"] is not None:
        from simtrain.network.algorithms import check_algorithm

        check_algorithm(s["collective_algo"])
    perturbations = perturbed.from_texts(**{k: s[k] for k in perturbed.KEYS}, seed=s["seed"])
    perturbations.check(s["gpus"], cluster.num_nodes)
    check_links(cluster, perturbations.degraded_links, perturbations.failed_links)
    options = RunOptions(**{f.name: s[f.name] for f in fields(RunOptions)})
    return Scenario(model=model, cluster=cluster, gpu=gpu, parallel=par, network=s["network"],
                    collective_algo=s["collective_algo"], fold=s["fold"], max_events=s["max_events"],
                    routing=routing, calibration=calibration, perturbations=perturbations,
                    jitter=jitter_of(s["jitter"], s["seed"], s["slow_steps"]), options=options)


def auto_recompute(scenario: Scenario) -> int:
    """``--recompute auto``: the fewest fully recomputed layers per chunk with which every
    pipeline rank's simulated peak memory (:func:`~simtrain.workload.memory.memory_plan`, exact
    for the schedule's order) fits the GPU's usable memory."""
    par, model = scenario.parallel, scenario.model
    opts = WorkloadOptions(fold=scenario.fold, routing=scenario.routing, calibration=scenario.calibration)
    schedule = build_schedule(scenario, opts)
    chunks = split_layers(model, par, scenario.gpu, schedule.chain_length, opts)
    most = max(len(c) for c in chunks)
    capacity = scenario.gpu.usable_memory_bytes

    def peak(n: int) -> float:
        return max(memory_plan(model, par, scenario.gpu, schedule, n, opts))

    if peak(most) > capacity:
        raise SpecError(f"--recompute auto: even recomputing all {most} layers of each chunk needs "
                        f"{peak(most) / GiB:.1f} GiB on some pipeline rank, more than the "
                        f"{capacity / GiB:.1f} GiB usable; raise tp, pp or cp, or use ZeRO-3")
    lo, hi = 0, most  # peak(hi) fits; find the smallest n that fits
    while lo < hi:
        mid = (lo + hi) // 2
        if peak(mid) <= capacity:
            hi = mid
        else:
            lo = mid + 1
    return lo


def ledger_recompute(model: ModelSpec, cluster: Cluster, gpu: GpuSpec, par: ParallelSpec) -> int:
    """The closed form's rule: the fewest fully recomputed layers per stage with which its memory
    estimate (:mod:`simtrain.analytic`: weights, gradients, ZeRO-sharded optimizer state and
    Korthikanti et al. 2022's activations) fits the GPU. A schedule without a closed form
    (zb-auto, a schedule file) has no estimate: a one-line :class:`SpecError` names it."""
    from simtrain.analytic.model import analytic_report

    est = analytic_report(model, cluster, replace(par, recompute="auto"), gpu=gpu)
    return int(est["recompute_layers"][0])


def simulate(scenario: Scenario, options: WorkloadOptions | None = None, *,
             perturbation_costs: bool = True) -> SimResult:
    """Simulate one training step of ``scenario``: the timeline of every (representative) rank and
    the report (step time, MFU, breakdown, memory; keys in docs/report.md).

    >>> result = simulate(resolve({"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2,
    ...                            "pp": 2, "seq": 2048, "gbs": 16}))
    >>> round(result.report["step_time_s"], 4), round(result.report["mfu"], 3)
    (0.2973, 0.325)
    >>> abs(sum(result.report["breakdown_s"].values()) - result.report["step_time_s"]) < 1e-9
    True
    """
    check_instance("simulate", "scenario", scenario, Scenario, "make one with simtrain.api.resolve({...})")
    check_instance("simulate", "options", options, (WorkloadOptions, type(None)))
    t0 = time.perf_counter()
    par, model = scenario.parallel, scenario.model
    mesh = build_mesh(par.tp, par.cp, par.dp, par.pp, ep=par.ep, etp=par.etp, order=par.order,
                      gpus_per_node=scenario.cluster.gpus_per_node)
    pert = scenario.perturbations
    cluster = perturb_links(scenario.cluster, pert.degraded_links, pert.failed_links)
    run = scenario.options
    opts = options or WorkloadOptions(fold=scenario.fold, routing=scenario.routing,
                                      calibration=scenario.calibration, steps=run.steps,
                                      optimizer_sync=run.optimizer_sync,
                                      **perturbed.workload_fields(pert, cluster, scenario.gpu, par.world))
    budget.check_operations(model.layers, par.num_microbatches, pipelines=1 if opts.fold else par.world // par.pp,
                            tp=par.tp if opts.tp_comm else 1, steps=opts.steps, max_events=scenario.max_events)
    schedule = build_schedule(scenario, opts)
    with paused_gc():  # hundreds of thousands of ops, none in a reference cycle
        program = lower(model, par, scenario.gpu, schedule, mesh, opts, max_ops=scenario.max_events)
    check_forced(scenario.collective_algo, program, cluster, scenario.network)  # as collective --algo
    router = _router(cluster, pert)
    perturbed.check_reachable(program, router, pert.failed_links)
    layer_size = par.tp * par.cp * (par.ep if model.num_experts > 1 else 1)
    slow_steps = apply_jitter(program, scenario.jitter, layer_size)
    network = NETWORK_MODELS[scenario.network].build(cluster, router, scenario.collective_algo)
    interference = run.comm_interference
    if interference is None:
        interference = scenario.gpu.comm_interference
    with paused_gc():  # the engine's events and spans: a collection would walk every op again
        result = engine.run(program, network, max_events=scenario.max_events, comm_interference=interference)
    check_timeline(result.timeline)
    links, link_series = network.link_report(result.timeline.end_s)
    report = run_report(result.timeline, program, model=model, gpu=scenario.gpu, par=par,
                        num_events=result.num_events, links=links, config=scenario_config(scenario),
                        interference=interference, slowdown_s=result.slowdown_s,
                        power=power_draw(scenario.cluster, scenario.gpu, par.world, train_tokens=run.train_tokens,
                                         price_per_gpu_hour_usd=run.price_per_gpu_hour_usd),
                        perturbations=_perturbation_costs(scenario, result.timeline.end_s) if
                        perturbation_costs and pert.any else {}, slow_steps=slow_steps)
    check_finite({"report": report, "link utilisation": link_series}, "simulation result")
    wall = time.perf_counter() - t0
    marks = perturbed.rank_marks(pert, opts)
    labels = {r: (f"stage {program.pipeline_rank_of[r]} (rank {r}, stands for {program.rank_weight[r]})"
                  if program.rank_weight[r] > 1 else f"rank {r} (stage {program.pipeline_rank_of[r]})")
                 + marks.get(r, "") for r in program.ranks}
    return SimResult(scenario, result.timeline, report, wall, labels, dict(program.static_bytes), link_series)


def _router(cluster: Cluster, pert: Perturbations) -> Router:
    """Routes on ``cluster``: searched on the graph where a link failed (the fabric's arithmetic
    routes assume every link), else from the fabric's structure."""
    return Router(cluster, structural=not pert.failed_links)


def _perturbation_costs(scenario: Scenario, step_s: float) -> dict[str, Any]:
    """The report's ``perturbations`` section (:func:`simtrain.perturbed.cost_report`): the
    scenario simulated again without perturbations and with each perturbing setting alone."""
    def step_with(perturbations: Perturbations) -> float:
        other = replace(scenario, perturbations=perturbations)
        return simulate(other, perturbation_costs=False).report["step_time_s"]

    return perturbed.cost_report(scenario.perturbations, step_s, scenario.parallel.world,
                                 scenario.cluster.gpus_per_node, step_with)


def build_schedule(scenario: Scenario, opts: WorkloadOptions | None = None):
    """The pipeline schedule of ``scenario`` (validated where it comes from a file: replaying a
    built-in generator's output at 8,192 micro-batches takes a second, and
    ``tests/schedules/test_validate.py`` validates every generator); a schedule planned for given costs
    (zb-auto) plans with the real per-stage costs and the real stage-to-stage transfer time."""
    par, model = scenario.parallel, scenario.model
    opts = opts or WorkloadOptions()
    params: dict[str, Any] = {"vpp": par.vpp, "combined_1f1b": par.overlap_moe_expert_parallel_comm}
    record = SCHEDULES.get(par.schedule)
    if record is not None and record.takes("costs"):
        chunks = split_layers(model, par, scenario.gpu, par.pp, opts)
        per_stage = chunk_pass_times(model, par, scenario.gpu, chunks, opts)
        net = AnalyticNetwork(scenario.cluster, Router(scenario.cluster))
        nodes = scenario.cluster.gpus_per_node
        comm = max(net.p2p_time(0, min(par.world - 1, stride), pp_activation_bytes(model, Shape.of(par)))
                   for stride in (par.tp * par.cp * par.dp, nodes)) if par.pp > 1 else 0.0
        params.update(costs=tuple(tuple(c[k] for c in per_stage) for k in range(3)), comm=comm)
    schedule = load_schedule(par.schedule, par.pp, par.num_microbatches, **params)
    if record is None:  # a user's file; the built-in generators are validated by their tests
        validate(schedule)
    return schedule


def write_outputs(result: SimResult, out_dir: str | Path, plot: bool = True, *, html: bool = False,
                  chart: ChartOptions | None = None, comparison: SideBySide | None = None) -> dict[str, str]:
    """Write report.json, trace.json, (unless ``plot`` is false) timeline.png showing what
    ``chart`` selects and (with ``html``) report.html, with ``comparison`` in it, into ``out_dir``."""
    from simtrain.metrics import memory_timeline
    from simtrain.outputs.files import final_paths, output_set
    from simtrain.outputs.formats import FORMATS, OutputRun
    from simtrain.outputs.trace import run_counters

    check_instance("write_outputs", "result", result, SimResult, "the result of simtrain.api.simulate")
    check_path("write_outputs", "out_dir", out_dir)
    sc = result.scenario
    memory = memory_timeline(result.timeline, result.static_bytes)
    title = (f"{sc.model.name} on {sc.parallel.world} x {sc.gpu.name}: TP{sc.parallel.tp} "
             f"CP{sc.parallel.cp} PP{sc.parallel.pp} DP{sc.parallel.dp}, {sc.parallel.schedule}, "
             f"{counted(sc.parallel.num_microbatches, 'micro-batch')}")
    run = OutputRun(result, plot, html, chart or ChartOptions(), comparison, memory,
                    run_counters(memory, result.link_series), title)
    paths: dict[str, str] = {}
    with output_set(out_dir) as out:  # a folder of this run's own, moved into place as one set
        for fmt in FORMATS:
            if fmt.wanted(run):
                paths[fmt.name] = str(out / fmt.file)
                fmt.write(run, paths[fmt.name])
    return final_paths(out_dir, paths)


def with_settings(scenario: Scenario, **changes) -> Scenario:
    """``scenario`` with some of its fields replaced (each of its type; its report's ``config``
    shows the new values: :func:`simtrain.scenario.scenario_config`); a setting such as ``tp`` is
    resolved again instead: :func:`resolve_with`."""
    check_instance("with_settings", "scenario", scenario, Scenario, "make one with simtrain.api.resolve({...})")
    check_fields("with_settings", Scenario, changes, "a setting is resolved again: simtrain.api.resolve_with("
                 "scenario, NAME=VALUE)")
    return replace(scenario, **changes)


def resolve_with(scenario: Scenario, *, recompute_rule: str = "memory", strict: bool = True, **changes) -> Scenario:
    """``scenario`` resolved again with some settings changed: :func:`resolve` of the settings it
    was resolved from (:func:`simtrain.scenario.given_settings`) with ``changes`` over them, each
    the name of a setting of :data:`~simtrain.settings.SETTINGS` (a misspelt one is a SpecError).

    >>> sc = resolve({"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2, "pp": 2, "gbs": 16})
    >>> wider = resolve_with(sc, tp=4)
    >>> wider.parallel.tp, wider.parallel.dp, wider.parallel.gbs
    (4, 2, 16)
    """
    check_instance("resolve_with", "scenario", scenario, Scenario, "make one with simtrain.api.resolve({...})")
    for name in changes:
        setting(name)
    return resolve({**given_settings(scenario), **changes}, recompute_rule, strict=strict)
