"""The one price of a collective: the tuner's choice and its phases, cached per cluster.

Every user of the network asks a :class:`Planner`: the ``analytic`` network of ``simtrain run``
prices each op with :meth:`Planner.collective_time`, the ``flow`` network runs
:meth:`Planner.plan`, and ``simtrain collective`` reports both, so an uncontended collective costs
the same everywhere (same algorithm, protocol, channels and efficiencies).
"""

from __future__ import annotations

from typing import Mapping, Sequence, cast

import numpy as np

from simtrain.network.algorithms import (REGISTRY, CollectiveAlgorithm, Price, candidates, check_algorithm, forced,
                                         hop_cost, normalize_op, price, scaled_phases, tuning_shape, unit_cost,
                                         unit_phases)
from simtrain.network.phases import Phase
from simtrain.network.nccl_protocols import GroupShape, latency_s, protocols
from simtrain.network.shapes import GroupShapes, NodeKey, ring_learned, same_node_key
from simtrain.topology.cluster import Cluster
from simtrain.topology.routing.router import Router


class Planner:
    """Algorithm, protocol, uncontended time and phases per (collective, group, bytes) on
    ``cluster``. ``algo`` forces an algorithm where it applies (elsewhere the tuner decides);
    ``nvls`` enables or disables NVLink SHARP (None: as the topology says); ``registry`` is the
    set of algorithms to choose from; ``by_shape`` prices the groups of one shape once
    (:mod:`simtrain.network.shapes`; off: every group alone, the same numbers)."""

    def __init__(self, cluster: Cluster, router: Router | None = None, *, algo: str | None = None,
                 nvls: bool | None = None, registry: Mapping[str, CollectiveAlgorithm] = REGISTRY,
                 by_shape: bool = True) -> None:
        self.cluster = cluster
        self.router = router if router is not None else Router(cluster)
        self.registry = registry
        self.algo = check_algorithm(algo, registry) if algo is not None else None
        self.nvls = cluster.nvls if nvls is None else nvls
        self.by_shape = GroupShapes(self.router) if by_shape and registry is REGISTRY else None
        self._units: dict[tuple[str, str, tuple[int, ...]], list[Phase]] = {}  # (op, algo, gpus) -> unit
        self._prices: dict[tuple[str, tuple[int, ...], float], Price] = {}  # (op, gpus, bytes) -> price
        self._plans: dict[tuple[str, tuple[tuple[int, ...], ...], float], list[Phase]] = {}  # (op, groups, bytes)
        self._costs: dict[tuple[str, str, tuple[int, ...]], tuple[float, float]] = {}  # -> unit_cost of its unit
        self._shapes: dict[tuple[int, ...], GroupShape] = {}
        self._choice: dict[tuple[str, tuple[int, ...]], tuple[list[str], list[float]]] = {}  # -> algorithms, bounds
        self._node_prices: dict[NodeKey, Price] = {}  # (op, bytes, node kind, local GPUs) -> price
        # the tuner's only choice for a send, with its builder: priced from the route's cost
        self._direct_p2p = [a for a in registry.values() if "p2p" in a.ops] == [REGISTRY["direct"]]

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
        if op == "p2p" and self._direct_p2p and len(gpus) == 2:
            return self._send_price(gpus[0], gpus[1], nbytes)
        key = (op, tuple(gpus), nbytes)
        best = self._prices.get(key)
        if best is None:
            gpus = key[1]
            same = same_node_key(self.router, self.registry, op, gpus, nbytes)
            best = self._node_prices.get(same) if same else None
            if best is not None:
                self._prices[key] = best
                return best
            algos, bounds = self._choices(op, gpus)
            if nbytes <= 0:
                bounds = [0.0] * len(algos)
            first = -1  # registry position of ``best`` (set with it): equal times go to the earlier algorithm
            for i in sorted(range(len(algos)), key=bounds.__getitem__):
                if best is not None and bounds[i] > best.time_s:
                    continue  # slower than ``best`` whatever its links carry
                algo = algos[i]
                unit, cost = self._cost(op, algo, gpus)
                moves = unit is None or bool(unit)  # priced from hops: two GPUs or more
                shape = self._shape(gpus) if moves and nbytes > 0 and self.registry[algo].family else None
                cand = price(op, algo, gpus, nbytes, self.router, self.registry, unit, cost, shape)
                if best is None or cand.time_s < best.time_s or (cand.time_s == best.time_s and i < first):
                    best, first = cand, i
            best = cast(Price, best)  # the choices hold one algorithm at least
            self._prices[key] = best
            if same and ring_learned(self.router, same[2], same[3]):
                self._node_prices[same] = best
        return best

    def _cost(self, op: str, algo: str, gpus: tuple[int, ...]) -> tuple[list[Phase] | None, tuple[float, float]]:
        """The unit of ``algo`` (None where it is priced from its hops and not built) and its
        :func:`~simtrain.network.algorithms.unit_cost`, once per group: its busiest links do not
        depend on the bytes. An algorithm with hops (ring, tree) is priced by
        :func:`~simtrain.network.algorithms.hop_cost`, the same numbers without a route per hop;
        its phases are built only for the flow network (:meth:`phases`)."""
        key = (op, algo, gpus)
        unit, cost = self._units.get(key), self._costs.get(key)
        if cost is None:
            cost = None if unit is not None else hop_cost(op, algo, gpus, self.router, self.registry) \
                if self.by_shape is None else self.by_shape.hop_cost(op, algo, gpus)
            if cost is None:
                unit = self._unit(op, algo, gpus)
                cost = unit_cost(unit, self.cluster)
            self._costs[key] = cost
        return unit, cost

    def _shape(self, gpus: tuple[int, ...]) -> GroupShape:
        """:func:`~simtrain.network.algorithms.tuning_shape` of ``gpus``, once per group."""
        shape = self._shapes.get(gpus)
        if shape is None:
            channels = None if self.by_shape is None else self.by_shape.channels(gpus)
            shape = self._shapes[gpus] = tuning_shape(gpus, self.router, channels)
        return shape

    def _choices(self, op: str, gpus: tuple[int, ...]) -> tuple[list[str], list[float]]:
        """The algorithms weighed for ``op`` on ``gpus`` (the forced one where it applies, else the
        tuner's candidates) and a lower bound of each one's price with bytes to move (:meth:`_bounds`),
        once per group."""
        out = self._choice.get((op, gpus))
        if out is None:
            chosen = self.algo and forced(op, gpus, self.cluster, self.algo, self.nvls, False, self.registry)
            algos = [chosen] if chosen else candidates(op, gpus, self.cluster, self.nvls, self.registry) \
                if self.by_shape is None else self.by_shape.candidates(op, gpus, self.nvls)
            out = self._choice[(op, gpus)] = (algos, self._bounds(op, gpus, algos))
        return out

    def _bounds(self, op: str, gpus: tuple[int, ...], algos: list[str]) -> list[float]:
        """A lower bound of each algorithm's price (:func:`~simtrain.network.algorithms.price`)
        of more than 0 bytes, known before its phases are built: with a latency family, the
        smallest of NCCL's latencies over its protocols (the time moving the bytes adds is >= 0,
        and so is its rounding); else 0. The tuner builds the phases of an algorithm only when its
        bound does not exceed the best price found so far: NCCL's ring over the whole cluster (the
        gradient norm's all-reduce, latency linear in the ranks) is never built where the tree's
        price is below its latency."""
        if len(algos) < 2 or len(gpus) < 2 or self.registry is not REGISTRY:
            return [0.0] * len(algos)
        shape = self._shape(gpus)
        families = [self.registry[a].family for a in algos]
        return [0.0 if f is None else min(latency_s(f, op, p, shape) for p in protocols(f, shape)) for f in families]

    def _send_price(self, src: int, dst: int, nbytes: float) -> Price:
        """:func:`~simtrain.network.algorithms.price` of ``direct`` on one send without building
        its phase: one flow over the route, whose links are distinct (a shortest path), so the
        busiest carries one byte per byte at the narrowest link's capacity; the same sums in the
        same order as the phase's (:func:`~simtrain.network.phases.phase_time`)."""
        cluster = self.cluster
        cluster.node_of(src), cluster.node_of(dst)  # the checks the phase builder makes
        if src == dst or nbytes <= 0:
            return Price("direct", "Simple", 0.0)
        capacity_Bps, latency_s = self.router.cost(src, dst)
        busiest = 1.0 / capacity_Bps  # = max(1.0 / capacity of each link): division is monotone
        return Price("direct", "Simple", nbytes * ((busiest + latency_s) - latency_s) + latency_s)

    def p2p_max_time(self, pairs: Sequence[tuple[int, ...]], nbytes: float) -> float:
        """The longest :meth:`p2p_time` of ``nbytes`` over ``pairs`` (source, destination), bit for
        bit: where the tuner's only choice is ``direct``, many sends at once from their routes'
        costs (:meth:`LinkIds.route_costs <simtrain.topology.routing.link_ids.LinkIds.route_costs>`) by
        :meth:`_send_price`'s formula; a folded pipeline transfer on 100,000 GPUs stands for 2,500."""
        ends = np.array(pairs, dtype=np.int64) if self._direct_p2p and len(pairs) >= 256 and nbytes > 0 and all(
            len(p) == 2 and p[0].__class__ is int and p[1].__class__ is int for p in pairs) else None
        if ends is None or ends.min() < 0 or ends.max() >= self.cluster.num_gpus:  # (one by one names a bad GPU)
            return max(self.p2p_time(a, b, nbytes) for a, b in pairs)
        apart = ends[:, 0] != ends[:, 1]
        capacity_Bps, latency_s = self.router.link_ids().route_costs(ends[apart, 0], ends[apart, 1])
        times = nbytes * ((1.0 / capacity_Bps + latency_s) - latency_s) + latency_s
        return float(times.max()) if len(times) else 0.0

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
