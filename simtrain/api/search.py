"""Search: rank the layouts of a model on a cluster by simulated step time, the closed form's
rank beside each (:func:`simtrain.layout_search.simulated.simulated_search`).

The closed form estimates every layout first (:mod:`simtrain.analytic`); candidates then run in
its order, and with ``top`` one is skipped only where a lower bound of its step proves it cannot
enter the top ``top`` (:mod:`simtrain.workload.bound`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from simtrain.errors import SimtrainError, unknown_name
from simtrain.layout_search.executors import check_executor
from simtrain.schedules import REGISTRY
from simtrain.layout_search.simulated import simulated_search
from simtrain.settings import SETTINGS
from simtrain.specs.model import load_model
from simtrain.specs.parallel import SEARCH_DEGREES
from simtrain.topology.cluster import load_topology

#: The degrees a search tries by default, as its keywords (:data:`simtrain.specs.parallel.SEARCH_DEGREES`).
DEGREES = {f"{dim}s": values for dim, values in SEARCH_DEGREES.items()}


def search(model: str, topology: str, *, gpus: int, seq: int, gbs: int, nodes: int | None = None,
           top: int | None = None, jobs: int = 1, results: str | Path | None = None, resume: bool = False,
           progress: Callable[[int, int, str], None] | None = None, executor: str = "local",
           scheduler: str | None = None, schedules: Sequence[str] = ("1f1b",), vpps: Sequence[int] = (1,),
           mbss: Sequence[int] = (1,), zeros: Sequence[int] = (1,), recomputes: Sequence[str] = ("auto",),
           tps: Sequence[int] = DEGREES["tps"], cps: Sequence[int] = DEGREES["cps"],
           pps: Sequence[int] = DEGREES["pps"], eps: Sequence[int] | None = None,
           etps: Sequence[int] | None = None, dispatchers: Sequence[str] | None = None) -> dict[str, Any]:
    """The ranking of ``model``'s layouts on ``gpus`` GPUs of ``topology`` (``nodes``: the fewest
    that hold them) at ``seq`` and ``gbs``: every combination of the degree lists, schedules,
    ``vpps``, micro-batch sizes ``mbss``, ZeRO stages and recompute settings that makes a layout
    (MoE: ``eps``, ``etps`` and ``dispatchers``, None: every valid one). ``results`` appends each
    finished candidate to a JSON-lines file (``resume`` skips those already there); ``executor``
    ``"dask"`` runs candidates on a dask.distributed cluster. Each value is checked as the setting
    of its name is; the result's keys: ``ranking``, ``candidates_enumerated``, ``candidates_fit``,
    ``candidates_simulated``, ``candidates_bounded``, ``failed``, ``spearman``.

    >>> out = search("llama3-8b", "seed-h100", gpus=8, seq=8192, gbs=64, top=2)
    >>> [r["simulated_rank"] for r in out["ranking"][:2]]
    [1, 2]
    """
    load_model(model)
    for name in schedules:
        if name not in REGISTRY:
            raise unknown_name("schedule", name, list(REGISTRY))
    for name, values in (("vpp", vpps), ("mbs", mbss), ("zero", zeros), ("recompute", recomputes)):
        for value in values:  # each value to try, checked as run checks its flag
            SETTINGS[name].validate(value)
    for vpp in vpps:  # a vpp no schedule to try takes would be skipped unseen
        if vpp > 1 and not any(REGISTRY.record(name).takes("vpp") for name in schedules):
            REGISTRY.check_vpp(schedules[0], vpp)
    cluster = load_topology(topology, nodes=nodes or None)
    base = {"model": model, "topology": topology, "nodes": nodes or -(-gpus // cluster.gpus_per_node),
            "seq": seq, "gbs": gbs}
    if resume and results is None:
        raise SimtrainError("--resume needs --results FILE (the file an earlier search appended to)")
    check_executor(executor, scheduler)
    return simulated_search(base, gpus=gpus, gpus_per_node=cluster.gpus_per_node, top=top, jobs=jobs,
                            results=Path(results) if results is not None else None, resume=resume,
                            progress=progress, executor=executor, scheduler=scheduler, schedules=tuple(schedules),
                            vpps=tuple(vpps), mbss=tuple(mbss), zeros=tuple(zeros), recomputes=tuple(recomputes),
                            tps=tps, cps=cps, pps=pps, eps=eps, etps=etps, dispatchers=dispatchers)
