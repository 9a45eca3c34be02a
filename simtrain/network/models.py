"""The network-model registry: every network a run can use, by name, one record each.

A network model implements :class:`~simtrain.network.interface.NetworkModel`; adding one is its
module plus one record in :data:`MODELS`. Everything that names a network reads it here: the
``--network`` setting's choices and help, :func:`simtrain.api.simulate`, and the networks
``simtrain collective`` can time a collective on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from simtrain.network.analytic import AnalyticNetwork
from simtrain.network.fixed import FixedLatency
from simtrain.network.interface import NetworkModel
from simtrain.topology.cluster import Cluster
from simtrain.topology.routing.router import Router


@dataclass(frozen=True)
class NetworkRecord:
    """One network model: ``build(cluster, router, algo)`` makes it for a run (``algo`` forces a
    collective algorithm where it applies); ``times_collectives`` says whether it times a
    collective on its own (``simtrain collective``)."""

    name: str
    description: str
    build: Callable[[Cluster, Router, str | None], NetworkModel]
    times_collectives: bool


def _analytic(cluster: Cluster, router: Router, algo: str | None) -> NetworkModel:
    return AnalyticNetwork(cluster, router, algo=algo)


def _flow(cluster: Cluster, router: Router, algo: str | None) -> NetworkModel:
    from simtrain.network.flow import FlowNetwork  # the solver's modules load only for flow runs

    return FlowNetwork(cluster, router, algo=algo)


def _free(cluster: Cluster, router: Router, algo: str | None) -> NetworkModel:
    return FixedLatency(0.0)


#: Network models by name, in the order ``--network`` lists them; the first is the default.
MODELS: Mapping[str, NetworkRecord] = MappingProxyType({r.name: r for r in (
    NetworkRecord("analytic", "NCCL's closed-form time per collective", _analytic, True),
    NetworkRecord("flow", "max-min fair flows on the topology graph", _flow, True),
    NetworkRecord("none", "free communication", _free, False),
)})


def described() -> str:
    """The models as ``--network``'s help names them: "analytic (...), flow (...) or none (...)"."""
    parts = [f"{r.name} ({r.description})" for r in MODELS.values()]
    return ", ".join(parts[:-1]) + " or " + parts[-1] if len(parts) > 1 else parts[0]
