"""The scenario: everything one simulation needs, resolved and validated, each setting in a typed field.

:func:`simtrain.api.resolve` turns the user's settings (names, numbers) into a :class:`Scenario`
once; below it no code reads a setting by its name. Each setting has one field that holds it: the
model (``model``, ``mtp_layers``), the cluster and its GPU (``topology``, ``nodes``,
``efficiency``), the parallel layout (every field of
:class:`~simtrain.specs.parallel.ParallelSpec` is the setting of its name, ``gpus`` its world),
the network fields, the MoE routing, the perturbations, the jitter and the :class:`RunOptions`.

The report's ``config`` (:func:`scenario_config`) is read from those fields
(:func:`setting_values`). The :class:`SettingsRecord` kept from resolving adds the spelling the user
gave (``--straggler 5:0.8,17``, a derived ``etp`` left unset, ``recompute = "auto"`` beside the
layers it chose) to each setting whose fields still hold what they were resolved to; a setting whose
field has changed since (:func:`simtrain.api.with_settings`, ``dataclasses.replace``) shows the
value its field holds, so ``config`` says what the scenario runs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from collections.abc import Collection
from typing import Any, Mapping

from simtrain.costs.calibration import Calibration
from simtrain.settings import SETTINGS
from simtrain.specs.gpu import GpuSpec
from simtrain.specs.model import ModelSpec
from simtrain.specs.parallel import ParallelSpec
from simtrain.specs.perturbation import Perturbations
from simtrain.topology.cluster import Cluster
from simtrain.workload.jitter import Jitter
from simtrain.workload.moe_routing import Routing

#: The fields of :class:`~simtrain.specs.parallel.ParallelSpec` that are settings of their name.
LAYOUT_SETTINGS = tuple(f.name for f in fields(ParallelSpec) if f.name in SETTINGS)


@dataclass(frozen=True)
class RunOptions:
    """The settings of a run that describe neither the model, the cluster nor the layout."""

    steps: int = 1  # consecutive training steps simulated
    optimizer_sync: str = "grad-norm"  # how a step ends (simtrain.settings.OPTIMIZER_SYNCS)
    comm_interference: float | None = None  # compute slowdown beside communication; None: the GPU's
    price_per_gpu_hour_usd: float | None = None  # over the topology's [cost] table; None: the table's
    train_tokens: int | None = None  # tokens of a whole training run, for the time-to-train keys


@dataclass(frozen=True)
class SettingsRecord:
    """What the report's ``config`` keeps of the settings a scenario was resolved from: each
    setting's value as resolved (``dp`` and ``recompute`` filled in, ``recompute_layers`` where
    ``recompute`` was auto), :func:`setting_values` of the scenario then and the names of the
    settings the user gave (the others took their defaults or were derived). Pairs, not dicts: a
    record cannot change, and a scenario pickles as before."""

    values: tuple[tuple[str, Any], ...] = ()
    basis: tuple[tuple[str, Any], ...] = ()
    given: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scenario:
    """Everything one simulation needs, resolved and validated."""

    model: ModelSpec
    cluster: Cluster
    gpu: GpuSpec  # the cluster's GPU with any efficiency override
    parallel: ParallelSpec
    network: str  # analytic | flow | none (zero-cost communication)
    collective_algo: str | None  # force one collective algorithm where it applies; None = tuner
    fold: bool
    max_events: int
    routing: Routing = Routing()  # MoE token routing
    calibration: Calibration | None = None  # measured kernel times (--calibration)
    perturbations: Perturbations = Perturbations()  # stragglers, mixed GPUs, degraded/failed links
    jitter: Jitter = Jitter()  # noise on compute times (--jitter, --slow-steps)
    options: RunOptions = RunOptions()  # steps, step end, interference, price, training tokens
    record: SettingsRecord = SettingsRecord()  # the settings as resolved, for the report's config


def recorded(scenario: Scenario, values: Mapping[str, Any], given: Collection[str] = ()) -> Scenario:
    """``scenario`` with the record of the settings ``values`` it was resolved from, of which the
    user gave ``given``."""
    names = tuple(name for name in SETTINGS if name in given)
    return replace(scenario, record=SettingsRecord(tuple(values.items()), tuple(setting_values(scenario).items()),
                                                   names))


def _slow_steps(jitter: Jitter) -> str | None:
    return f"{jitter.slow_step_prob!r}:{jitter.slow_step_factor!r}" if jitter.slow_step_prob else None


def setting_values(sc: Scenario) -> dict[str, Any]:
    """Every setting's value as the fields of ``sc`` hold it (in the settings' own form: text for
    the perturbations, a count for ``recompute_layers``). ``seed`` is the jitter's, or the
    perturbations' where only they draw at random."""
    par, pert, jitter = sc.parallel, sc.perturbations, sc.jitter
    out: dict[str, Any] = {name: getattr(par, name) for name in LAYOUT_SETTINGS}
    out.update(recompute_modules=",".join(par.recompute_modules) or None, gpus=par.world, model=sc.model.name,
               mtp_layers=sc.model.mtp_layers, topology=sc.cluster.name, nodes=sc.cluster.num_nodes,
               efficiency=sc.gpu.efficiency, network=sc.network, collective_algo=sc.collective_algo, fold=sc.fold,
               max_events=sc.max_events, routing_skew=sc.routing.skew, routing_seed=sc.routing.seed,
               calibration=sc.calibration.source if sc.calibration is not None else None,
               seed=pert.seed if pert.any and not jitter.any else jitter.seed, jitter=jitter.cv,
               slow_steps=_slow_steps(jitter), **pert.setting_texts(),
               **{f.name: getattr(sc.options, f.name) for f in fields(RunOptions)})
    out["recompute_layers"] = int(par.recompute) if par.recompute.isdigit() else None
    return out


def _as_run(sc: Scenario) -> tuple[dict[str, Any], set[str]]:
    """The recorded settings of ``sc`` each as its field now holds it, in the spelling given
    where that still holds (module docstring), and the names of those whose field has changed."""
    now, basis, values = setting_values(sc), dict(sc.record.basis), dict(sc.record.values)
    changed = {name for name in values if basis.get(name) != now.get(name)}
    return {name: now[name] if name in changed else value for name, value in values.items()}, changed


def given_settings(sc: Scenario) -> dict[str, Any]:
    """The settings ``sc`` was resolved from, as its fields now hold them: those the user gave
    and those whose field has changed since (what :func:`simtrain.api.resolve_with` resolves)."""
    values, changed = _as_run(sc)
    return {name: value for name, value in values.items()
            if name in SETTINGS and (name in sc.record.given or name in changed)}


def scenario_config(sc: Scenario) -> dict[str, Any]:
    """The report's ``config``: the resolved settings (each as its field now holds it, in the
    spelling given where that still holds: module docstring), with the names of the model,
    topology and GPU, the node count and the GEMM efficiency the run used."""
    out, _ = _as_run(sc)
    out["model"] = sc.model.name
    out["topology"] = sc.cluster.name
    out["nodes"] = sc.cluster.num_nodes
    out["gpu"] = sc.gpu.name
    out["efficiency"] = sc.gpu.efficiency
    return out
