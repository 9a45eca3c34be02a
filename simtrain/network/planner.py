"""The one price of a collective: the tuner's choice and its phases, cached per cluster.

Every user of the network asks a :class:`Planner`: the ``analytic`` network of ``simtrain run``
prices each op with :meth:`Planner.collective_time`, the ``flow`` network runs
:meth:`Planner.plan`, and ``simtrain collective`` reports both, so an uncontended collective costs
the same everywhere (same algorithm, protocol, channels and efficiencies).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from simtrain.network.algorithms import (REGISTRY, CollectiveAlgorithm, Price, candidates, check_algorithm, forced,
                                         normalize_op, price, scaled_phases, unit_phases)
from simtrain.network.phases import Phase
from simtrain.topology.cluster import Cluster
from simtrain.topology.routes import Router


class Planner:
    """Algorithm, protocol, uncontended time and phases per (collective, group, bytes) on
    ``cluster``. ``algo`` forces an algorithm where it applies (elsewhere the tuner decides);
    ``nvls`` enables or disables NVLink SHARP (None: as the topology says); ``registry`` is the
    set of algorithms to choose from."""

    def __init__(self, cluster: Cluster, router: Router | None = None, *, algo: str | None = None,
                 nvls: bool | None = None, registry: Mapping[str, CollectiveAlgorithm] = REGISTRY) -> None:
        self.cluster = cluster
        self.router = router if router is not None else Router(cluster)
        self.registry = registry
        self.algo = check_algorithm(algo, registry) if algo is not None else None
        self.nvls = cluster.nvls if nvls is None else nvls
        self._units: dict[tuple, list[Phase]] = {}
        self._prices: dict[tuple, Price] = {}
        self._plans: dict[tuple, list[Phase]] = {}

    def _unit(self, op: str, algo: str, gpus: tuple[int, ...]) -> list[Phase]:
        key = (op, algo, gpus)
        unit = self._units.get(key)
        if unit is None:
            unit = self._units[key] = unit_phases(op, algo, gpus, self.router, self.registry)
        return unit

    def price(self, op: str, gpus: Sequence[int], nbytes: float) -> Price:
        """The chosen algorithm's :class:`~simtrain.network.algorithms.Price`: the forced one where
        it applies, else the tuner's (the smallest time, ties in registry order)."""
        op = normalize_op(op)
        key = (op, tuple(gpus), nbytes)
        best = self._prices.get(key)
        if best is None:
            gpus = key[1]
            chosen = self.algo and forced(op, gpus, self.cluster, self.algo, self.nvls, False, self.registry)
            for algo in [chosen] if chosen else candidates(op, gpus, self.cluster, self.nvls, self.registry):
                cand = price(op, algo, gpus, nbytes, self.router, self.registry, self._unit(op, algo, gpus))
                if best is None or cand.time_s < best.time_s:
                    best = cand
            self._prices[key] = best
        return best

    def algorithm(self, op: str, gpus: Sequence[int], nbytes: float) -> str:
        """The algorithm that runs ``op`` on ``gpus`` (:meth:`price`)."""
        return self.price(op, gpus, nbytes).algorithm

    def collective_time(self, op: str, gpus: tuple[int, ...], nbytes: float) -> float:
        """Uncontended seconds of ``op`` on ``gpus`` (:meth:`price`)."""
        return self.price(op, gpus, nbytes).time_s

    def p2p_time(self, src: int, dst: int, nbytes: float) -> float:
        """Uncontended seconds of a transfer from GPU ``src`` to GPU ``dst``."""
        return self.collective_time("p2p", (src, dst), nbytes)

    def phases(self, op: str, gpus: Sequence[int], nbytes: float) -> list[Phase]:
        """The phases of one group under :meth:`price`, as the flow network runs them."""
        op, gpus = normalize_op(op), tuple(gpus)
        cost = self.price(op, gpus, nbytes)
        if cost.time_s == 0:
            return []
        return scaled_phases(self._unit(op, cost.algorithm, gpus), float(nbytes), cost)

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
