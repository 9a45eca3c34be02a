"""The Python API: resolve a scenario, simulate it, write its outputs.

``simulate()`` is the product: a model, a cluster and a parallel layout in, the simulated step out
(timeline and report). The CLI is a thin layer over these functions. Only this module and
``outputs/`` touch the filesystem.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from simtrain import engine
from simtrain.errors import SpecError
from simtrain.topology.mesh import DEFAULT_ORDER, build_mesh
from simtrain.metrics import summarize
from simtrain.network.analytic import AnalyticNetwork, FreeNetwork
from simtrain.costs import Shape, pp_activation_bytes
from simtrain.workload.moe_routing import Routing
from simtrain.schedules import load_schedule, validate
from simtrain.specs.gpu import GpuSpec
from simtrain.specs.model import ModelSpec, load_model
from simtrain.specs.parallel import ParallelSpec, resolve_parallel, validate_parallel
from simtrain.specs.strict import Table, check_value, read_toml
from simtrain.timeline import Timeline
from simtrain.topology.cluster import Cluster, Router, load_topology
from simtrain.workload.stages import chunk_pass_times, split_layers
from simtrain.workload.lower import WorkloadOptions, lower, memory_plan

NETWORKS = ("analytic", "flow", "none")

#: The scenario ``simtrain run`` simulates with no arguments: the course notes' Llama-3-70B on 64
#: H100s (their ``parallel_plan.py`` constants) with the textbook TP=8 x PP=4 x DP=2 layout and a
#: small global batch, so the step shows pipeline bubbles, gradient reductions overlapped with
#: the backward, and the last stage's LM head as stage imbalance.
DEFAULT_SCENARIO: dict[str, Any] = {
    "model": "llama3-70b", "topology": "seed-h100", "gpus": 64, "tp": 8, "pp": 4, "cp": 1,
    "seq": 8192, "mbs": 1, "gbs": 32, "schedule": "1f1b",
}

#: Settings that describe a scenario (model, cluster, layout, batch); when none is given, the other
#: settings (network, schedule, recompute, ...) apply to :data:`DEFAULT_SCENARIO`.
SCENARIO_KEYS = ("model", "topology", "nodes", "gpus", "tp", "cp", "pp", "dp", "ep", "etp", "vpp", "seq",
                 "mbs", "gbs")

#: Every setting a run takes (flags and --config keys), with its type and default.
SETTINGS: dict[str, tuple[type | tuple[type, ...], Any]] = {
    "model": (str, DEFAULT_SCENARIO["model"]),
    "topology": (str, DEFAULT_SCENARIO["topology"]),
    "nodes": (int, None),
    "gpus": (int, None),
    "tp": (int, 1), "cp": (int, 1), "pp": (int, 1), "dp": (int, None), "ep": (int, 1),
    "etp": (int, None), "vpp": (int, 1),
    "schedule": (str, "1f1b"),
    "seq": (int, 4096), "mbs": (int, 1), "gbs": (int, None),
    "zero": (int, 1), "sp": (bool, True), "recompute": ((str, int), "none"),
    "order": (str, DEFAULT_ORDER),
    "first_stage_layers": (int, None), "last_stage_layers": (int, None), "balance_stages": (bool, False),
    "network": (str, "analytic"),
    "collective_algo": (str, None),
    "routing_skew": (float, 0.0), "routing_seed": (int, 0),
    "efficiency": (float, None),
    "fold": (bool, True),
    "max_events": (int, engine.DEFAULT_MAX_EVENTS),
}


@dataclass(frozen=True)
class Scenario:
    """Everything one simulation needs, resolved and validated."""

    model: ModelSpec
    cluster: Cluster
    gpu: GpuSpec  # the cluster's GPU with any efficiency override
    parallel: ParallelSpec
    network: str  # analytic | flow | none (zero-cost communication)
    collective_algo: str | None  # force one collective algorithm (flow fidelity); None = tuner
    fold: bool
    max_events: int
    routing: Routing = Routing()  # MoE token routing
    settings: dict = field(default_factory=dict)  # the settings as resolved, for the report


@dataclass(frozen=True)
class SimResult:
    scenario: Scenario
    timeline: Timeline
    report: dict  # JSON-ready metrics and configuration (deterministic: no wall time)
    wall_s: float
    rank_labels: dict[int, str]
    static_bytes: dict[int, float]  # static memory per simulated rank
    link_series: dict = field(default_factory=dict)  # "u->v" -> [(time_s, utilisation)] (flow fidelity)


def load_config(path: str | Path) -> dict[str, Any]:
    """Read an experiment TOML: a flat table of the same keys as the ``simtrain run`` flags."""
    table = Table(read_toml(path), str(path))
    out = {}
    for key, (kind, _) in SETTINGS.items():
        value = table.get(key, kind, None)
        if value is not None:
            out[key] = value
    table.done()
    return out


def resolve(settings: dict[str, Any] | None = None, recompute_rule: str = "memory") -> Scenario:
    """Resolve user settings (names, numbers) into a validated :class:`Scenario`.

    Missing keys take the defaults of :data:`SETTINGS`; with no settings at all the
    :data:`DEFAULT_SCENARIO` runs. Impossible layouts raise :class:`~simtrain.errors.SpecError`.
    ``recompute="auto"`` takes the fewest recomputed layers per chunk with which the simulated
    peak memory fits (``recompute_rule="memory"``) or the course notes' ledger fits (``"ledger"``,
    what ``simtrain analytic`` and ``compare`` use so both sides recompute the same layers).

    >>> sc = resolve({"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2, "pp": 2,
    ...               "seq": 2048, "gbs": 16})
    >>> sc.parallel.dp, sc.parallel.num_microbatches
    (4, 4)
    """
    settings = dict(settings or {})
    if not (set(settings) & set(SCENARIO_KEYS)):  # only options given: they modify the default scenario
        settings = {**DEFAULT_SCENARIO, **settings}
    given = settings
    unknown = sorted(set(given) - set(SETTINGS))
    if unknown:
        raise SpecError(f"unknown setting {unknown[0]!r} (valid: {', '.join(SETTINGS)})")
    s = {k: (given[k] if given.get(k) is not None else default) for k, (_, default) in SETTINGS.items()}
    for key, (kind, _) in SETTINGS.items():
        if s[key] is not None:
            s[key] = check_value(key, s[key], kind)
    if s["network"] not in NETWORKS:
        check_value("network", s["network"], str, choices=NETWORKS)
    model = load_model(s["model"])
    nodes = s["nodes"]
    probe = load_topology(s["topology"], nodes=nodes if nodes else None)
    if s["gpus"] is None:
        s["gpus"] = probe.num_gpus
    if s["gpus"] < 1:
        raise SpecError(f"gpus={s['gpus']}: must be >= 1")
    if nodes is None:
        need = -(-s["gpus"] // probe.gpus_per_node)
        cluster = probe if need == probe.num_nodes else load_topology(s["topology"], nodes=need)
    else:
        cluster = probe
    if s["gpus"] > cluster.num_gpus:
        raise SpecError(f"gpus={s['gpus']} exceeds the {cluster.num_gpus} GPUs of topology "
                        f"{cluster.name} with {cluster.num_nodes} nodes; raise --nodes")
    gpu = cluster.gpu if s["efficiency"] is None else cluster.gpu.with_efficiency(s["efficiency"])
    par_kw = {k: s[k] for k in ("ep", "etp", "vpp", "mbs", "seq", "zero", "sp", "recompute", "schedule", "order",
                                "first_stage_layers", "last_stage_layers", "balance_stages")}
    dp = s["dp"]
    inner = s["tp"] * s["cp"] * s["pp"]
    gbs = s["gbs"]
    if gbs is None:  # one micro-batch per pipeline stage and replica... at least pp of them
        dp_guess = dp if dp else max(1, s["gpus"] // max(inner, 1))
        gbs = dp_guess * s["mbs"] * max(s["pp"], 1) * 2
        s["gbs"] = gbs
    par = resolve_parallel(s["gpus"], tp=s["tp"], cp=s["cp"], pp=s["pp"], dp=dp, gbs=gbs, **par_kw)
    validate_parallel(par, model, s["gpus"])
    s["dp"] = par.dp
    s["recompute"] = par.recompute
    if par.recompute == "auto":
        if recompute_rule == "ledger":
            n = ledger_recompute(model, cluster, gpu, par)
        else:
            n = auto_recompute(Scenario(model=model, cluster=cluster, gpu=gpu, parallel=par,
                                        network=s["network"], collective_algo=None, fold=s["fold"],
                                        max_events=s["max_events"],
                                        routing=Routing(skew=s["routing_skew"], seed=s["routing_seed"])))
        par = replace(par, recompute=str(n))
        s["recompute_layers"] = n
    if s["collective_algo"] is not None:
        from simtrain.network.algorithms import check_algorithm

        check_algorithm(s["collective_algo"])
        if s["network"] != "flow":
            raise SpecError(f"--collective-algo {s['collective_algo']} needs --network flow (the analytic "
                            f"network charges ring collectives)")
    return Scenario(model=model, cluster=cluster, gpu=gpu, parallel=par, network=s["network"],
                    collective_algo=s["collective_algo"], fold=s["fold"], max_events=s["max_events"],
                    routing=Routing(skew=s["routing_skew"], seed=s["routing_seed"]), settings=s)


def auto_recompute(scenario: Scenario) -> int:
    """``--recompute auto``: the fewest fully recomputed layers per chunk with which every
    pipeline rank's simulated peak memory (:func:`~simtrain.workload.memory_plan`, exact for the
    schedule's order) fits the GPU's usable memory."""
    par, model = scenario.parallel, scenario.model
    mesh = build_mesh(par.tp, par.cp, par.dp, par.pp, ep=par.ep, etp=par.etp, order=par.order,
                      gpus_per_node=scenario.cluster.gpus_per_node)
    opts = WorkloadOptions(fold=scenario.fold, routing=scenario.routing)
    schedule = build_schedule(scenario, opts)
    chunks = split_layers(model, par, scenario.gpu, schedule.chain_length, opts)
    most = max(len(c) for c in chunks)
    capacity = scenario.gpu.usable_memory_bytes

    def peak(n: int) -> float:
        return max(memory_plan(model, par, scenario.gpu, schedule, mesh, n, opts))

    if peak(most) > capacity:
        raise SpecError(f"--recompute auto: even recomputing all {most} layers of each chunk needs "
                        f"{peak(most) / 2**30:.1f} GiB on some pipeline rank, more than the "
                        f"{capacity / 2**30:.1f} GiB usable; raise tp, pp or cp, or use ZeRO-3")
    lo, hi = 0, most  # peak(hi) fits; find the smallest n that fits
    while lo < hi:
        mid = (lo + hi) // 2
        if peak(mid) <= capacity:
            hi = mid
        else:
            lo = mid + 1
    return lo


def ledger_recompute(model: ModelSpec, cluster: Cluster, gpu: GpuSpec, par: ParallelSpec) -> int:
    """The course notes' rule: the fewest fully recomputed layers per stage with which their
    memory ledger (:mod:`simtrain.analytic`) fits the GPU."""
    from simtrain.analytic.model import analytic_report

    est = analytic_report(model, cluster, replace(par, recompute="auto"), schedule=_analytic_schedule(par),
                          gpu=gpu)
    return int(est["recompute_layers"][0])


def _analytic_schedule(par: ParallelSpec) -> str:
    from simtrain.analytic.model import ANALYTIC_SCHEDULES

    return par.schedule if par.schedule in ANALYTIC_SCHEDULES else "1f1b"


def simulate(scenario: Scenario, options: WorkloadOptions | None = None) -> SimResult:
    """Simulate one training step of ``scenario``: the timeline of every (representative) rank and
    the report (step time, MFU, breakdown, memory; keys in the README).

    >>> result = simulate(resolve({"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2,
    ...                            "pp": 2, "seq": 2048, "gbs": 16}))
    >>> round(result.report["step_time_s"], 4), round(result.report["mfu"], 3)
    (0.2291, 0.421)
    >>> abs(sum(result.report["breakdown_s"].values()) - result.report["step_time_s"]) < 1e-9
    True
    """
    t0 = time.perf_counter()
    par, model = scenario.parallel, scenario.model
    mesh = build_mesh(par.tp, par.cp, par.dp, par.pp, ep=par.ep, etp=par.etp, order=par.order,
                      gpus_per_node=scenario.cluster.gpus_per_node)
    opts = options or WorkloadOptions(fold=scenario.fold, routing=scenario.routing)
    schedule = build_schedule(scenario, opts)
    program = lower(model, par, scenario.gpu, schedule, mesh, opts)
    if scenario.network == "none":
        network = FreeNetwork()
    elif scenario.network == "flow":
        from simtrain.network.algorithms import FlowNetwork

        network = FlowNetwork(scenario.cluster, Router(scenario.cluster), algo=scenario.collective_algo)
    else:
        network = AnalyticNetwork(scenario.cluster, Router(scenario.cluster))
    result = engine.run(program, network, max_events=scenario.max_events)
    metrics = summarize(result.timeline, model=model, gpu=scenario.gpu, num_gpus=par.world,
                        seq=par.seq, gbs=par.gbs, rank_weight=program.rank_weight,
                        rank_stage=program.rank_stage, static_bytes=program.static_bytes)
    wall = time.perf_counter() - t0
    labels = {r: (f"stage {program.rank_stage[r]} (rank {r}, stands for {program.rank_weight[r]})"
                  if program.rank_weight[r] > 1 else f"rank {r} (stage {program.rank_stage[r]})")
              for r in program.ranks}
    links, link_series = ({}, {}) if result.flows is None else link_report(scenario.cluster, result.flows,
                                                                            result.timeline.end_s)
    report = {
        **metrics,
        "links": links,
        "num_events": result.num_events,
        "simulated_ranks": len(program.ranks),
        "num_microbatches": par.num_microbatches,
        "config": _config(scenario),
    }
    return SimResult(scenario, result.timeline, report, wall, labels, dict(program.static_bytes), link_series)


def build_schedule(scenario: Scenario, opts: WorkloadOptions | None = None):
    """The validated pipeline schedule of ``scenario``; zb-auto plans with the real per-stage costs
    and the real stage-to-stage transfer time."""
    par, model = scenario.parallel, scenario.model
    opts = opts or WorkloadOptions()
    params: dict[str, Any] = {"vpp": par.vpp}
    if par.schedule == "zb-auto":
        chunks = split_layers(model, par, scenario.gpu, par.pp, opts)
        per_stage = chunk_pass_times(model, par, scenario.gpu, chunks, opts.embedding, opts.lm_head)
        net = AnalyticNetwork(scenario.cluster, Router(scenario.cluster))
        nodes = scenario.cluster.gpus_per_node
        comm = max(net.p2p_time(0, min(par.world - 1, stride), pp_activation_bytes(model, Shape.of(par)))
                   for stride in (par.tp * par.cp * par.dp, nodes)) if par.pp > 1 else 0.0
        params.update(costs=tuple(tuple(c[k] for c in per_stage) for k in range(3)), comm=comm)
    schedule = load_schedule(par.schedule, par.pp, par.num_microbatches, **params)
    validate(schedule)
    return schedule


def link_report(cluster: Cluster, flows, step_s: float, top: int = 10) -> tuple[dict, dict]:
    """The ``links`` section (flow fidelity): per directed link that carried traffic, its bytes,
    busy time and mean utilisation over the step; the ``top`` most utilised listed first, and
    their utilisation over time for the trace's counter tracks."""
    stats = flows.link_stats()
    rows = []
    for (u, v), st in stats.items():
        bw = cluster.graph.edges[u, v]["bandwidth_Bps"]
        rows.append({"link": f"{u}->{v}", "tier": cluster.graph.edges[u, v]["tier"], "bytes": st["bytes"],
                     "busy_s": st["busy_s"], "utilisation": st["bytes"] / (bw * step_s) if step_s > 0 else 0.0,
                     "peak_utilisation": st["peak_utilisation"], "_edge": (u, v), "_bw": bw})
    rows.sort(key=lambda r: (-r["utilisation"], r["link"]))
    raw = flows.link_series([r["_edge"] for r in rows[:top]])
    series = {r["link"]: [(t, rate / r["_bw"]) for t, rate in raw[r["_edge"]]] for r in rows[:top]}
    for r in rows:
        del r["_edge"], r["_bw"]
    by_tier: dict[str, float] = {}
    for r in rows:
        by_tier[r["tier"]] = by_tier.get(r["tier"], 0.0) + r["bytes"]
    everything = {r["link"]: r["utilisation"] for r in sorted(rows, key=lambda r: r["link"])}
    return {"top": rows[:top], "links_used": len(rows), "bytes_by_tier": by_tier,
            "utilisation_by_link": everything}, series


def _config(sc: Scenario) -> dict:
    out = dict(sc.settings)
    out["model"] = sc.model.name
    out["topology"] = sc.cluster.name
    out["nodes"] = sc.cluster.num_nodes
    out["gpu"] = sc.gpu.name
    out["efficiency"] = sc.gpu.efficiency
    return out


LINK_PID_BASE = 1_000_000  # trace process ids of link-utilisation counter tracks


def write_outputs(result: SimResult, out_dir: str | Path, plot: bool = True) -> dict[str, str]:
    """Write report.json, trace.json and (unless ``plot`` is false) timeline.png into ``out_dir``."""
    from simtrain.outputs.trace import write_json_atomic, write_trace

    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"--out {out}: cannot create the folder ({exc.strerror})") from None
    from simtrain.metrics import memory_timeline
    from simtrain.outputs.trace import counter_events, rank_pid

    paths = {"report": str(out / "report.json"), "trace": str(out / "trace.json")}
    write_json_atomic(result.report, paths["report"])
    memory = memory_timeline(result.timeline, result.static_bytes)
    counters = [e for rank, (t, level) in sorted(memory.items())
                for e in counter_events("memory", rank_pid(rank), list(zip(t, level / 2**30)), key="GiB")]
    for i, (link, samples) in enumerate(sorted(result.link_series.items())):
        pid = LINK_PID_BASE + i
        counters.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"link {link}"}})
        counters += counter_events(f"link {link}", pid, samples, key="utilisation")
    write_trace(result.timeline, paths["trace"], rank_labels=result.rank_labels, counters=counters)
    if plot:
        from simtrain.outputs.gantt import draw_gantt

        paths["timeline"] = str(out / "timeline.png")
        sc = result.scenario
        title = (f"{sc.model.name} on {sc.parallel.world} x {sc.gpu.name}: TP{sc.parallel.tp} "
                 f"CP{sc.parallel.cp} PP{sc.parallel.pp} DP{sc.parallel.dp}, {sc.parallel.schedule}, "
                 f"{sc.parallel.num_microbatches} micro-batches")
        draw_gantt(result.timeline, paths["timeline"], title=title, rank_labels=result.rank_labels,
                   memory=memory, memory_capacity_bytes=sc.gpu.usable_memory_bytes)
    return paths


def with_settings(scenario: Scenario, **changes) -> Scenario:
    return replace(scenario, **changes)
