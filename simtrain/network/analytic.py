"""The ``analytic`` network: collectives and transfers priced up front in closed form.

A :class:`~simtrain.network.interface.PricedNetwork` whose prices are the
:class:`~simtrain.network.planner.Planner`'s: NCCL's algorithm and protocol choice, its channels
over every NIC, the links' achievable bandwidth and NCCL's latency model, exactly as
``simtrain collective`` reports them for one group. Concurrent collectives do not slow each other
here (that is the ``flow`` fidelity's job).
"""

from __future__ import annotations

from typing import Sequence

from simtrain.network.planner import Planner
from simtrain.network.interface import PricedNetwork
from simtrain.topology.cluster import Cluster
from simtrain.topology.routing.router import Router


class AnalyticNetwork(PricedNetwork):
    """Closed-form prices of the shared tuner. ``algo`` forces a collective algorithm where it
    applies; ``nvls`` enables or disables NVLink SHARP (None: as the topology says)."""

    def __init__(self, cluster: Cluster, router: Router | None = None, *, algo: str | None = None,
                 nvls: bool | None = None) -> None:
        self.cluster = cluster
        self.planner = Planner(cluster, router, algo=algo, nvls=nvls)

    def collective_time(self, op: str, gpus: tuple[int, ...], nbytes: float) -> float:
        return self.planner.collective_time(op, gpus, nbytes)

    def p2p_time(self, src: int, dst: int, nbytes: float) -> float:
        return self.planner.p2p_time(src, dst, nbytes)

    def p2p_max_time(self, pairs: Sequence[tuple[int, ...]], nbytes: float) -> float:
        return self.planner.p2p_max_time(pairs, nbytes)
