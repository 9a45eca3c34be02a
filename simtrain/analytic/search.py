"""Enumerate TP x CP x PP layouts (with EP and expert TP for an MoE model) and rank them with the
closed-form model.

:func:`closed_form_search` follows the course notes' ``search``: every combination of the given degrees that passes the
script's rules (tp within a node, tp*cp*pp divides the GPUs, pp divides the layers, at least
``min_cp_chunk`` tokens per CP rank, gbs divisible by dp*mbs) and fits in memory, sorted by
MFU, best first.
"""

from __future__ import annotations

from itertools import product

from simtrain.analytic.model import MIN_CP_CHUNK, estimate
from simtrain.errors import SpecError
from simtrain.specs.gpu import GpuSpec
from simtrain.specs.model import ModelSpec
from simtrain.specs.parallel import SEARCH_DEGREES, ParallelSpec, expert_layouts
from simtrain.topology.cluster import Cluster
from simtrain.workload.moe_routing import Routing


def closed_form_search(model: ModelSpec, cluster: Cluster, *, gpus: int, seq: int, gbs: int,
                       tps=SEARCH_DEGREES["tp"], cps=SEARCH_DEGREES["cp"], pps=SEARCH_DEGREES["pp"], mbs: int = 1,
                       gpu: GpuSpec | None = None, schedule: str = "1f1b", min_cp_chunk: int = MIN_CP_CHUNK,
                       n_params: float | None = None, eps: tuple[int, ...] | None = None,
                       etps: tuple[int, ...] | None = None, dispatchers: tuple[str, ...] = ("alltoall",),
                       routing: Routing = Routing()) -> list[dict]:
    """Every layout that fits, as ``{"tp", "cp", "pp", "dp", **estimate}``, sorted by MFU
    descending (ties keep the enumeration order TP, then CP, then PP, as the script's stable
    sort does). The loops and defaults are the script's; the cluster's node count is not used
    (``gpus`` may exceed it: only per-GPU bandwidths and GPUs per node enter the model). An MoE
    model adds, per layout, every (EP, expert TP) pair of
    :func:`~simtrain.specs.parallel.expert_layouts` (from ``eps`` and ``etps``) and each of
    ``dispatchers`` where EP > 1, its rows ``"ep"``, ``"etp"`` and ``"moe_dispatcher"``; ``routing``
    is its token routing."""
    for name, value in (("gpus", gpus), ("seq", seq), ("gbs", gbs), ("mbs", mbs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"{name}={value!r}: must be an integer >= 1")
    found = []
    for tp, cp, pp in product(tps, cps, pps):
        if gpus % (tp * cp * pp):
            continue
        dp = gpus // (tp * cp * pp)
        experts: list[dict] = [{}]
        if model.is_moe:
            experts = [{"ep": ep, "etp": etp, "moe_dispatcher": d}
                       for ep, etp in expert_layouts(model, world=gpus, tp=tp, pp=pp, eps=eps, etps=etps)
                       for d in (dispatchers if ep > 1 else dispatchers[:1])]
        for expert in experts:
            par = ParallelSpec(tp=tp, cp=cp, pp=pp, dp=dp, mbs=mbs, gbs=gbs, seq=seq,
                               schedule=schedule, recompute="auto", **expert)
            est = estimate(model, cluster, par, gpu=gpu, min_cp_chunk=min_cp_chunk,
                           n_params=n_params, routing=routing)
            if est is not None:
                found.append({**est, "tp": tp, "cp": cp, "pp": pp, "dp": dp, **expert})
    found.sort(key=lambda e: -e["mfu"])
    return found


def rank_of(plans: list[dict], tp: int, cp: int, pp: int) -> int | None:
    """1-based position of the layout (tp, cp, pp) in a :func:`search` result, None if absent."""
    return next((i for i, e in enumerate(plans, 1) if (e["tp"], e["cp"], e["pp"]) == (tp, cp, pp)),
                None)


def format_plan(plan: dict) -> str:
    """One line in the notes' format: degrees, MFU, GiB per GPU, recompute, step shares >= 0.5%."""
    step = plan["step_time_s"]
    share = " ".join(f"{k} {v / step:.0%}" for k, v in plan["breakdown_s"].items()
                     if v / step >= 0.005)
    rc, layers = plan["recompute_layers"][0], plan["layers_per_stage"]
    rec = f", recompute {rc}/{layers} layers" if rc else ""
    expert = f" EP={plan['ep']} ETP={plan['etp']}" if "ep" in plan else ""
    return (f"TP={plan['tp']} CP={plan['cp']} PP={plan['pp']} DP={plan['dp']}{expert}: MFU "
            f"{plan['mfu']:.1%}, {plan['memory_gib']:.0f} GiB/GPU{rec} | {share}")
