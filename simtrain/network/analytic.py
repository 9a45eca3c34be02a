"""The ``analytic`` network: collectives and transfers priced up front in closed form.

A :class:`~simtrain.network.protocol.PricedNetwork`: alpha-beta costs per collective, where
beta comes from the bottleneck of the group's ring on the topology graph. Ring formulas are the
ones nccl-tests documents (``doc/PERFORMANCE.md``): for ``n`` ranks and ``S`` bytes, all-reduce
moves ``2 (n-1)/n S`` per rank in ``2 (n-1)`` steps, reduce-scatter and all-gather ``(n-1)/n S``
in ``n-1`` steps, all-to-all ``(n-1)/n S`` (each rank sends ``S/n`` to each peer); a
point-to-point transfer costs ``S / B + alpha``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simtrain.network.protocol import PricedNetwork
from simtrain.topology.cluster import Cluster
from simtrain.topology.routes import Router


def alpha_beta_time(op: str, n: int, nbytes: float, bandwidth_Bps: float, alpha_s: float) -> float:
    """Ring alpha-beta time of one collective on ``n`` ranks (nccl-tests' bus-bandwidth factors)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    if op == "all_reduce":
        return 2 * (n - 1) / n * nbytes / bandwidth_Bps + 2 * (n - 1) * alpha_s
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) / n * nbytes / bandwidth_Bps + (n - 1) * alpha_s
    if op == "ring_shift":  # every rank sends S bytes to its ring successor at once
        return nbytes / bandwidth_Bps + alpha_s
    raise ValueError(f"unknown collective {op!r}")


@dataclass
class AnalyticNetwork(PricedNetwork):
    """Alpha-beta costs on the graph: a ring's bandwidth is its bottleneck link's, shared by all
    ring hops that cross that link; alpha is the slowest hop's latency.

    Concurrent collectives do not slow each other here (that is the ``flow`` fidelity's job).
    """

    cluster: Cluster
    router: Router
    _rings: dict = field(default_factory=dict, repr=False)

    def ring(self, gpus: tuple[int, ...]) -> tuple[float, float]:
        """(bandwidth_Bps, alpha_s) of the ring through ``gpus`` in the given order."""
        cached = self._rings.get(gpus)
        if cached is not None:
            return cached
        n = len(gpus)
        hops = [(gpus[i], gpus[(i + 1) % n]) for i in range(n)]
        use: dict[tuple[str, str], int] = {}
        hop_links = []
        for a, b in hops:
            links = self.router.links(a, b)
            hop_links.append(links)
            for link in links:
                use[link] = use.get(link, 0) + 1
        graph = self.cluster.graph
        bandwidth = min(graph.edges[link]["bandwidth_Bps"] / use[link]
                        for links in hop_links for link in links)
        alpha = max(self.router.latency(a, b) for a, b in hops)
        self._rings[gpus] = (bandwidth, alpha)
        return bandwidth, alpha

    def collective_time(self, op: str, gpus: tuple[int, ...], nbytes: float) -> float:
        if len(gpus) <= 1:
            return 0.0
        bandwidth, alpha = self.ring(gpus)
        return alpha_beta_time(op, len(gpus), nbytes, bandwidth, alpha)

    def p2p_time(self, src: int, dst: int, nbytes: float) -> float:
        if src == dst:
            return 0.0
        return nbytes / self.router.bandwidth(src, dst) + self.router.latency(src, dst)

