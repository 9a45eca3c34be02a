"""Resolve: user settings (names and numbers) into a validated, fully typed :class:`Scenario`.

:func:`resolve` is where every setting is checked once: later stages read the scenario's typed
fields, never a settings table by key.
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from simtrain.api import perturbations as perturbed
from simtrain.api.schedule import build_schedule
from simtrain.api.checks import check_choice, check_fields, check_instance, check_path, check_settings
from simtrain.costs.calibration import check_peaks, read_calibration
from simtrain.errors import SimtrainError, SpecError
from simtrain.schedules import REGISTRY as SCHEDULES
from simtrain.scenario import RunOptions, Scenario, given_settings, recorded
from simtrain.settings import OUTPUTS, SETTINGS, complete, defaults_note, setting
from simtrain.specs.applies import check_applies
from simtrain.specs.gpu import GpuSpec
from simtrain.specs.model import ModelSpec, load_model
from simtrain.specs.parallel import ParallelSpec, resolve_parallel, validate_parallel
from simtrain.specs.strict import Table, read_toml
from simtrain.topology.cluster import Cluster, cluster_for
from simtrain.topology.faults import check_links
from simtrain.units import GiB
from simtrain.workload.jitter import jitter_of
from simtrain.workload.memory import memory_planner
from simtrain.workload.moe_routing import Routing
from simtrain.workload.options import WorkloadOptions
from simtrain.workload.stages import split_layers


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

    plan = memory_planner(model, par, scenario.gpu, schedule, opts)

    def peak(n: int) -> float:
        return max(plan(n))

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



def with_settings(scenario: Scenario, **changes) -> Scenario:
    """``scenario`` with some of its fields replaced (each of its type; its report's ``config``
    shows the new values: :func:`simtrain.scenario.scenario_config`); a setting such as ``tp`` is
    resolved again instead: :func:`resolve_with`."""
    check_instance("with_settings", "scenario", scenario, Scenario, "make one with simtrain.resolve({...})")
    check_fields("with_settings", Scenario, changes, "a setting is resolved again: simtrain.resolve_with("
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
    check_instance("resolve_with", "scenario", scenario, Scenario, "make one with simtrain.resolve({...})")
    for name in changes:
        setting(name)
    return resolve({**given_settings(scenario), **changes}, recompute_rule, strict=strict)

