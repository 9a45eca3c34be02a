"""The phases collectives run as on one cluster, with the tuner's choice of algorithm cached.

The flow fidelity runs these phases as flows; the ``collective`` command times them alone or
with concurrent groups.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from simtrain.network.algorithms import (REGISTRY, CollectiveAlgorithm, uncontended_time, check_algorithm,
                                         phases, select_algorithm)
from simtrain.network.phases import Phase
from simtrain.topology.cluster import Cluster
from simtrain.topology.routes import Router


class Planner:
    """Algorithm, uncontended time and phases per (collective, group, bytes) on ``cluster``.
    ``algo`` forces an algorithm where it applies (elsewhere the tuner decides); ``nvls`` enables
    NVLink SHARP; ``registry`` is the set of algorithms to choose from."""

    def __init__(self, cluster: Cluster, router: Router | None = None, *, algo: str | None = None,
                 nvls: bool = False, registry: Mapping[str, CollectiveAlgorithm] = REGISTRY) -> None:
        self.cluster = cluster
        self.router = router if router is not None else Router(cluster)
        self.registry = registry
        self.algo = check_algorithm(algo, registry) if algo is not None else None
        self.nvls = nvls
        self._algos: dict[tuple, str] = {}
        self._times: dict[tuple, float] = {}
        self._plans: dict[tuple, list[Phase]] = {}

    def algorithm(self, op: str, gpus: Sequence[int], nbytes: float) -> str:
        """The algorithm that runs ``op`` on ``gpus``: the forced one where it applies, else the
        tuner's (:func:`~simtrain.network.algorithms.select_algorithm`)."""
        key = (op, tuple(gpus), nbytes)
        algo = self._algos.get(key)
        if algo is None:
            algo = self._algos[key] = select_algorithm(op, key[1], nbytes, self.cluster, self.router,
                                                       self.algo, self.nvls, False, self.registry)
        return algo

    def collective_time(self, op: str, gpus: tuple[int, ...], nbytes: float) -> float:
        """Uncontended seconds of ``op`` on ``gpus`` under :meth:`algorithm` (its closed form)."""
        key = (op, tuple(gpus), nbytes)
        t = self._times.get(key)
        if t is None:
            t = self._times[key] = uncontended_time(op, self.algorithm(op, gpus, nbytes), key[1], nbytes,
                                                 self.router, self.cluster, self.registry)
        return t

    def p2p_time(self, src: int, dst: int, nbytes: float) -> float:
        """Uncontended seconds of a transfer from GPU ``src`` to GPU ``dst``."""
        return self.collective_time("p2p", (src, dst), nbytes)

    def phases(self, op: str, gpus: Sequence[int], nbytes: float) -> list[Phase]:
        """The phases of one group under :meth:`algorithm`."""
        return phases(op, gpus, nbytes, self.router, self.algorithm(op, gpus, nbytes), self.registry)

    def plan(self, op: str, groups: Sequence[Sequence[int]], nbytes: float) -> list[Phase]:
        """Phases for several groups at once (``(src, dst)`` pairs for p2p): phase ``i`` holds the
        flows of every group's phase ``i`` so that they contend, with the largest latency. A
        folded representative must list every group it stands for here."""
        key = (op, tuple(tuple(g) for g in groups), nbytes)
        plan = self._plans.get(key)
        if plan is None:
            per_group = [self.phases(op, g, nbytes) for g in key[1]]
            plan = []
            for i in range(max((len(p) for p in per_group), default=0)):
                parts = [p[i] for p in per_group if i < len(p)]
                plan.append(Phase(tuple(f for p in parts for f in p.flows),
                                  max(p.latency_s for p in parts), parts[0].name))
            self._plans[key] = plan
        return plan
