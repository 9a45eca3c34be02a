"""The bottleneck bandwidth and latency of a route, without keeping the route.

A point-to-point price needs only these two numbers of its route (:mod:`simtrain.network.planner`),
and a folded pipeline transfer asks them for every pair it stands for: on 131,072 GPUs, a quarter
of a million pairs that are each asked once. Across nodes of a fabric built from a spec, a route is
the source GPU's head (GPU, NIC, leaf), one of the leaves' equal-cost middles picked by ECMP
(:class:`~simtrain.topology.routing.router.Router`), and the destination's tail; its bandwidth is the
minimum and its latency the sum, in path order, of values that the head, the middle and the tail
fix. So both are computed once per (head values, middle, tail values) from the same values in
the same order as :meth:`Router.bandwidth <simtrain.topology.routing.router.Router.bandwidth>` and
:meth:`Router.latency <simtrain.topology.routing.router.Router.latency>` (bit for bit), and no route is
stored per pair. Other routes are the router's own.
"""

from __future__ import annotations

import zlib
from typing import Any


class RouteCosts:
    """``(bandwidth, latency)`` of routes on ``router``, a
    :class:`~simtrain.topology.routing.router.Router` (module docstring)."""

    def __init__(self, router: Any) -> None:
        self.router = router
        self._costs: dict[tuple, tuple[float, float]] = {}  # (head values, middle, tail values) -> cost
        self._ports: dict[int, tuple | None] = {}
        self._middles: dict[tuple[str, str], tuple[tuple, float]] = {}

    def cost(self, src_gpu: int, dst_gpu: int) -> tuple[float, float]:
        """Bottleneck bandwidth (bytes/s) and latency (s) of the route from ``src_gpu`` to
        ``dst_gpu``: :meth:`Router.bandwidth` and :meth:`Router.latency`."""
        router = self.router
        cluster = router.cluster
        if src_gpu != dst_gpu and router.structural and cluster.spec is not None \
                and cluster.spec.fabric.kind != "none":
            a, b = self._port(src_gpu), self._port(dst_gpu)
            if a is not None and b is not None and \
                    src_gpu // cluster.gpus_per_node != dst_gpu // cluster.gpus_per_node:
                middles, narrowest = self._middle(a[2], b[2])
                if middles and min(a[3], b[4]) <= narrowest:  # every middle equally wide: ECMP
                    mid = middles[zlib.crc32(f"{src_gpu}-{dst_gpu}".encode()) % len(middles)]
                    key = (a[5], mid, b[6])
                    out = self._costs.get(key)
                    if out is None:
                        out = self._costs[key] = self.path_cost((a[0], a[1]) + mid + (b[1], b[0]))
                    return out
        return self.path_cost(router.route(src_gpu, dst_gpu))

    def path_cost(self, path: tuple[str, ...]) -> tuple[float, float]:
        """Bottleneck bandwidth and latency of a node path, as the router sums them."""
        edges, node_lat = self.router._static()[:2]
        return (min((edges[e][0] for e in zip(path, path[1:])), default=float("inf")),
                sum(edges[e][1] for e in zip(path, path[1:])) + sum(node_lat[n] for n in path[1:-1]))

    def _port(self, gpu: int) -> tuple | None:
        """GPU ``gpu``'s graph node, NIC and leaf, the capacity of GPU -> NIC -> leaf and back,
        and the values its route's head and tail add to a cost (each link's capacity and
        latency, the NIC's latency); None without a NIC."""
        if gpu in self._ports:
            return self._ports[gpu]
        router = self.router
        gid = router.cluster.gpu_id(gpu)
        port = router._nic_port(gid)
        out = None
        if port is not None:
            edges, node_lat = router._static()[:2]
            nic, leaf, cap_out, cap_in = port
            out = (gid, nic, leaf, cap_out, cap_in, (edges[(gid, nic)], edges[(nic, leaf)], node_lat[nic]),
                   (edges[(leaf, nic)], edges[(nic, gid)], node_lat[nic]))
        self._ports[gpu] = out
        return out

    def _middle(self, a: str, b: str) -> tuple[tuple, float]:
        """The router's shortest paths between leaves ``a`` and ``b``, and their narrowest
        bottleneck."""
        out = self._middles.get((a, b))
        if out is None:
            paths, bws = self.router._mids(a, b)
            out = self._middles[(a, b)] = (paths, min(bws, default=float("inf")))
        return out
