"""Simulate: one training step of a scenario, its timeline and its report.

``simulate()`` is the product: a model, a cluster and a parallel layout in, the simulated step out
(timeline and report).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from simtrain.specs import budget
from simtrain.engine import simulator as engine
from simtrain.api import perturbations as perturbed
from simtrain.api.schedule import build_schedule
from simtrain.api.checks import check_instance
from simtrain.results.energy import power_draw
from simtrain.results.finite import check_finite, check_timeline
from simtrain.results.metrics import Report, run_report
from simtrain.network.algorithms import check_forced
from simtrain.network.interface import LinkSeries
from simtrain.network.models import MODELS as NETWORK_MODELS
from simtrain.scenario import Scenario, scenario_config
from simtrain.specs.perturbation import Perturbations
from simtrain.engine.timeline import Timeline
from simtrain.topology.build import paused_gc
from simtrain.topology.cluster import Cluster
from simtrain.topology.faults import perturb_links
from simtrain.topology.mesh import build_mesh
from simtrain.topology.routing.router import Router
from simtrain.workload.jitter import apply_jitter
from simtrain.workload.lower import lower
from simtrain.workload.options import WorkloadOptions


@dataclass(frozen=True)
class SimResult:
    """What :func:`simulate` returns: the timeline, its report and what the outputs draw."""

    scenario: Scenario
    timeline: Timeline
    report: Report  # JSON-ready metrics and configuration (deterministic: no wall time)
    wall_s: float
    rank_labels: dict[int, str]
    static_bytes: dict[int, float]  # static memory per simulated rank
    #: "u->v" -> (times in s, utilisation) arrays of the most utilised links (flow fidelity)
    link_series: LinkSeries = field(default_factory=dict)



def simulate(scenario: Scenario, options: WorkloadOptions | None = None, *,
             perturbation_costs: bool = True) -> SimResult:
    """Simulate one training step of ``scenario``: the timeline of every (representative) rank and
    the report (step time, MFU, breakdown, memory; keys in docs/report.md).

    >>> from simtrain import resolve
    >>> result = simulate(resolve({"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2,
    ...                            "pp": 2, "seq": 2048, "gbs": 16}))
    >>> round(result.report["step_time_s"], 4), round(result.report["mfu"], 3)
    (0.302, 0.32)
    >>> abs(sum(result.report["breakdown_s"].values()) - result.report["step_time_s"]) < 1e-9
    True
    """
    check_instance("simulate", "scenario", scenario, Scenario, "make one with simtrain.resolve({...})")
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
    # (multi-token prediction layers run like decoder layers: counted with them)
    budget.check_operations(model.total_layers, par.num_microbatches, pipelines=1 if opts.fold else par.world // par.pp,
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
    """The report's ``perturbations`` section (:func:`simtrain.api.perturbations.cost_report`): the
    scenario simulated again without perturbations and with each perturbing setting alone."""
    def step_with(perturbations: Perturbations) -> float:
        other = replace(scenario, perturbations=perturbations)
        return simulate(other, perturbation_costs=False).report["step_time_s"]

    return perturbed.cost_report(scenario.perturbations, step_s, scenario.parallel.world,
                                 scenario.cluster.gpus_per_node, step_with)

