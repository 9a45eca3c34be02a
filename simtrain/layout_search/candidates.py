"""The layouts a search tries and their closed-form estimates.

:func:`enumerate_candidates` crosses the TP, CP and PP degrees of the course notes'
``parallel_plan.py`` (TP within a node, DP derived) and, for an MoE model, every valid EP and
expert-TP degree (:func:`simtrain.specs.parallel.expert_layouts`, on the checks a run's layout
passes) and each token dispatcher where EP > 1, with the schedules, micro-batch sizes, ZeRO
stages and recompute policies asked for; :func:`estimate_candidates` gives each its closed-form
estimate (:mod:`simtrain.analytic.model`), by which :mod:`simtrain.layout_search.simulated` ranks and prunes them.
"""

from __future__ import annotations

import itertools
import json
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from simtrain.errors import SimtrainError, SpecError
from simtrain.layout_search.executors import run_unordered
from simtrain.schedules import REGISTRY
from simtrain.settings import lookup, setting
from simtrain.specs.model import ModelSpec, load_model
from simtrain.specs.parallel import (MOE_DISPATCHERS, SEARCH_DEGREES, ParallelSpec, check_expert_layout,
                                     expert_layouts)


@dataclass(frozen=True)
class Candidate:
    """One layout to evaluate: the settings of a ``simtrain run``."""

    settings: tuple[tuple[str, object], ...]

    @classmethod
    def of(cls, settings: Mapping[str, object]) -> "Candidate":
        """The candidate of the settings ``settings``."""
        return cls(tuple(sorted(settings.items())))

    @property
    def key(self) -> str:
        return json.dumps(dict(self.settings), sort_keys=True)

    def as_dict(self) -> dict:
        return dict(self.settings)

    def get(self, name: str, default: Any = None) -> Any:
        """The candidate's value of setting ``name`` (``default`` where it gives none); a misspelt
        name is a :class:`~simtrain.errors.SpecError` (:func:`simtrain.settings.setting`)."""
        return lookup(dict(self.settings), name, default)

    def gives(self, name: str) -> bool:
        """Whether the candidate gives setting ``name`` (checked as by :meth:`get`)."""
        return setting(name).name in dict(self.settings)

    def value(self, name: str) -> Any:
        """The candidate's value of setting ``name`` (checked as by :meth:`get`); a KeyError where
        it gives none."""
        if not self.gives(name):
            raise KeyError(name)
        return self.get(name)

    def with_setting(self, name: str, value: object) -> "Candidate":
        """The candidate with setting ``name`` (checked as by :meth:`get`) given ``value``."""
        return Candidate.of({**dict(self.settings), setting(name).name: value})


def enumerate_candidates(base: dict, *, gpus: int, gpus_per_node: int, schedules=("1f1b",), vpps=(1,),
                         mbss=(1,), zeros=(1,), recomputes=("auto",), tps=SEARCH_DEGREES["tp"],
                         cps=SEARCH_DEGREES["cp"], pps=SEARCH_DEGREES["pp"], eps: tuple[int, ...] | None = None,
                         etps: tuple[int, ...] | None = None, dispatchers: tuple[str, ...] | None = None,
                         model: ModelSpec | None = None) -> list[Candidate]:
    """Every combination, in a fixed order (TP, CP, PP, EP, expert TP, dispatcher, schedule, vpp,
    mbs, ZeRO, recompute). An MoE model (``model``, default ``base["model"]`` loaded) adds the EP
    and expert-TP pairs :func:`~simtrain.specs.parallel.expert_layouts` accepts for each layout
    (from ``eps`` and ``etps``; default every valid one) and, where EP > 1, each of
    ``dispatchers`` (default :data:`MOE_DISPATCHERS`; at EP 1 no token leaves its rank, so only
    the first runs). A dense model's candidates have no EP keys: EP 1, as before."""
    model = model if model is not None else load_model(lookup(base, "model"))
    dispatchers = tuple(dispatchers or MOE_DISPATCHERS)
    out = []
    for tp, cp, pp in itertools.product(tps, cps, pps):
        if tp > gpus_per_node or gpus % (tp * cp * pp):
            continue
        experts: list[dict] = [{}]
        if model.is_moe:
            experts = [{"ep": ep, "etp": etp, "moe_dispatcher": d}
                       for ep, etp in expert_layouts(model, world=gpus, tp=tp, pp=pp, eps=eps, etps=etps)
                       for d in (dispatchers if ep > 1 else dispatchers[:1])]
        for expert, (sched, vpp, mbs, zero, rc) in itertools.product(
                experts, itertools.product(schedules, vpps, mbss, zeros, recomputes)):
            if vpp > 1 and (pp == 1 or not REGISTRY.record(sched).takes("vpp")):
                continue
            settings = {**base, "gpus": gpus, "tp": tp, "cp": cp, "pp": pp, "dp": gpus // (tp * cp * pp),
                        **expert, "schedule": sched, "vpp": vpp, "mbs": mbs, "zero": zero, "recompute": rc}
            out.append(Candidate.of(settings))
    return out


def check_expert_grid(model: ModelSpec, eps: tuple[int, ...] | None, etps: tuple[int, ...] | None,
                      dispatchers: tuple[str, ...] | None, tps: tuple[int, ...] = SEARCH_DEGREES["tp"]) -> None:
    """One-line errors for EP, expert-TP and dispatcher lists a search cannot use: any of them
    on a dense model (EP 1 alone is a dense model's layout), an EP that does not divide the
    experts (:func:`~simtrain.specs.parallel.check_expert_layout`), an expert TP above every TP
    tried, an unknown dispatcher."""
    if not model.is_moe:
        for flag, values in (("--ep", eps if eps not in (None, (1,)) else None), ("--etp", etps),
                             ("--moe-dispatchers", dispatchers)):
            if values is not None:
                raise SpecError(f"{flag} {','.join(map(str, values))}: {model.name} has no experts; --ep, --etp "
                                f"and --moe-dispatchers apply to MoE models")
        return
    def divides(ep: int) -> bool:
        try:
            check_expert_layout(ParallelSpec(ep=ep, dp=ep), model)
        except SpecError:
            return False
        return True

    for ep in eps or ():
        if not divides(ep):
            valid = ", ".join(str(e) for e in range(1, model.num_experts + 1) if divides(e))
            raise SpecError(f"--ep {ep}: does not divide the {model.num_experts} experts of {model.name}; "
                            f"valid: {valid}")
    for etp in etps or ():
        if etp > max(tps):
            raise SpecError(f"--etp {etp}: above every TP tried ({','.join(map(str, tps))}); expert TP runs "
                            f"from 1 to TP: use --etp {max(tps)} or less, or try a larger --tp")
    for name in dispatchers or ():
        if name not in MOE_DISPATCHERS:
            raise SpecError(f"--moe-dispatchers {','.join(dispatchers)}: unknown dispatcher {name!r}; valid: "
                            f"{', '.join(MOE_DISPATCHERS)}")


def analytic_estimate(candidate: Candidate, resolved: dict[str, str | None] | None = None) -> dict | None:
    """The closed-form estimate of a candidate, or None when it is invalid or does not fit. A
    schedule without a closed form is estimated with the one its record ranks it as (zb-auto:
    1F1B, an upper bound of its makespan). ``resolved`` (filled as it goes) keeps the recompute
    count ``auto`` resolved to per candidate with its dispatcher left out: the dispatcher moves no
    memory, so a candidate that differs from an earlier one only there takes its count (or its
    error) instead of finding it again."""
    from simtrain.api.resolve import resolve
    from simtrain.analytic.model import estimate

    sibling = _sibling(candidate)
    memo = resolved is not None and candidate.get("recompute") == "auto"
    if memo and sibling in resolved:
        if resolved[sibling] is None:
            return None
        candidate = candidate.with_setting("recompute", resolved[sibling])
    try:
        sc = resolve(candidate.as_dict(), strict=False)
    except SimtrainError:
        if memo:
            resolved.setdefault(sibling, None)
        return None
    if memo:
        resolved.setdefault(sibling, sc.parallel.recompute)
    sched = REGISTRY.ranking_schedule(sc.parallel.schedule)
    try:
        return estimate(sc.model, sc.cluster, sc.parallel, gpu=sc.gpu, schedule=sched, routing=sc.routing)
    except SimtrainError:
        return None


def _sibling(candidate: Candidate) -> str:
    """The key of a candidate without its dispatcher (:func:`analytic_estimate`)."""
    return json.dumps({k: v for k, v in candidate.settings if k != "moe_dispatcher"}, sort_keys=True)


def _estimate_group(group: tuple[Candidate, ...]) -> list[dict | None]:
    resolved: dict[str, str | None] = {}
    return [analytic_estimate(c, resolved) for c in group]


#: Fewest candidates whose estimates run in ``jobs`` processes (fewer: in this one, quicker than
#: starting the processes).
PARALLEL_ESTIMATES = 200


def estimate_candidates(candidates: list[Candidate], jobs: int = 1,
                        progress: Callable[[int, int, str], None] | None = None) -> list[dict | None]:
    """:func:`analytic_estimate` of every candidate, in their order: those that differ only in
    their dispatcher together, the groups over ``jobs`` local processes when there are at least
    :data:`PARALLEL_ESTIMATES` candidates; ``progress(done, total, "estimate")`` as they finish."""
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(candidates):
        groups.setdefault(_sibling(c), []).append(i)
    out: list[dict | None] = [None] * len(candidates)
    tasks = [tuple(candidates[i] for i in idx) for idx in groups.values()]
    where = {id(t): idx for t, idx in zip(tasks, groups.values())}
    done = 0
    if progress:
        progress(0, len(candidates), "estimate")
    with closing(run_unordered(_estimate_group, tasks, executor="local",
                               jobs=jobs if len(candidates) >= PARALLEL_ESTIMATES else 1)) as finishing:
        for task, ests in finishing:
            for i, est in zip(where[id(task)], ests):
                out[i] = est
            done += len(ests)
            if progress:
                progress(done, len(candidates), "estimate")
    return out


def label(c: Candidate) -> str:
    """A candidate's settings in one line: degrees (EP, ETP and the dispatcher for an MoE model), schedule, batch."""
    v = c.value
    extra = f" v{v('vpp')}" if c.get("vpp", 1) > 1 else ""
    expert = ""
    if c.gives("ep"):  # an MoE model's candidate
        expert = f" EP={v('ep')} ETP={v('etp')}" + (f" {v('moe_dispatcher')}" if v("ep") > 1 else "")
    return (f"TP={v('tp')} CP={v('cp')} PP={v('pp')} DP={v('dp')}{expert} {v('schedule')}{extra} mbs={v('mbs')} "
            f"ZeRO-{v('zero')} rc={v('recompute')}")
