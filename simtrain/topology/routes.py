"""Routes between GPUs on a cluster graph: deterministic shortest-hop paths with ECMP, their
bottleneck (achievable) bandwidth and latency, and which NIC serves a GPU."""

from __future__ import annotations

import zlib
from typing import Any

from simtrain.errors import SpecError
from simtrain.topology.cluster import Cluster


class Router:
    """Deterministic shortest-hop routes between GPUs, never transiting a third GPU.

    Among equal-hop routes the widest (largest achievable bottleneck, ``capacity_Bps``) win
    (NVLink before a shared PCIe NIC);
    among those, ECMP picks ``sorted(paths)[crc32(f"{src}-{dst}") % len(paths)]``. A route from a
    GPU to itself is ``(gpu,)``. The middle of a route (between the GPUs' NVSwitch/NIC neighbours)
    is computed between the switches the NICs hang off and cached per switch pair, so a
    1024-GPU cluster needs only a few hundred breadth-first searches.
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._cache: dict[str, Any] = {}

    def route(self, src_gpu: int, dst_gpu: int) -> tuple[str, ...]:
        """The node path from GPU ``src_gpu`` to GPU ``dst_gpu``."""
        routes = self._cache.setdefault("routes", {})
        path = routes.get((src_gpu, dst_gpu))
        if path is None:
            path = routes[(src_gpu, dst_gpu)] = self._route(src_gpu, dst_gpu)
        return path

    def links(self, src_gpu: int, dst_gpu: int) -> tuple[tuple[str, str], ...]:
        """The directed edges of the route."""
        path = self.route(src_gpu, dst_gpu)
        return tuple(zip(path, path[1:]))

    def bandwidth(self, src_gpu: int, dst_gpu: int) -> float:
        """Achievable bottleneck bandwidth of the route (its smallest ``capacity_Bps``), bytes/s
        (inf from a GPU to itself)."""
        edges = self._static()[0]
        return min((edges[e][0] for e in self.links(src_gpu, dst_gpu)), default=float("inf"))

    def fabric_latency(self, src_gpu: int, dst_gpu: int) -> float:
        """The part of :meth:`latency` spent beyond the NICs: cables and switches of the fabric
        (what NCCL's tuning model adds per inter-node step as the network's latency), s."""
        g = self.cluster.graph
        path = self.route(src_gpu, dst_gpu)
        fabric = ("leaf", "spine", "core")
        return (sum(g.edges[e]["latency_s"] for e in zip(path, path[1:]) if g.edges[e]["tier"] in fabric)
                + sum(g.nodes[n]["latency_s"] for n in path[1:-1] if g.nodes[n]["kind"] in fabric))

    def nic_of(self, gpu: int) -> str | None:
        """The NIC serving GPU ``gpu`` (its graph node), None when its node has no NIC."""
        nics = self._cache.setdefault("nics", {})
        if gpu not in nics:
            g = self.cluster.graph
            nics[gpu] = next((n for n in g.successors(self.cluster.gpu_id(gpu))
                              if g.nodes[n]["kind"] == "nic"), None)
        return nics[gpu]

    def latency(self, src_gpu: int, dst_gpu: int) -> float:
        """Sum of the route's edge latencies and the traversal latency of its switches, s."""
        edges, node_lat = self._static()[:2]
        path = self.route(src_gpu, dst_gpu)
        return (sum(edges[e][1] for e in zip(path, path[1:]))
                + sum(node_lat[n] for n in path[1:-1]))

    def _static(self) -> tuple[dict, dict, dict, dict, dict]:
        st = self._cache.get("static")
        if st is None:
            g = self.cluster.graph
            kind = dict(g.nodes(data="kind"))
            edges = {(u, v): (d["capacity_Bps"], d["latency_s"]) for u, v, d in g.edges(data=True)}
            node_lat = dict(g.nodes(data="latency_s", default=0.0))
            nbrs = {n: tuple(sorted(v for v in g.successors(n) if kind[v] != "gpu")) for n in g}
            adj = {n: nb for n, nb in nbrs.items() if kind[n] != "gpu"}
            ports = {n: nb for n, nb in nbrs.items() if kind[n] == "gpu"}
            # a port with a single non-GPU neighbour (a NIC under its leaf) is routed from there
            anchor = {n: (nb[0], (n,)) if len(nb) == 1 else (n, ()) for n, nb in adj.items()}
            st = self._cache["static"] = (edges, node_lat, adj, ports, anchor)
        return st

    def _bfs(self, root: str) -> tuple[dict[str, int], dict[str, list[str]]]:
        bfs = self._cache.setdefault("bfs", {})
        if root not in bfs:
            adj = self._static()[2]
            dist, preds, frontier = {root: 0}, {root: []}, [root]
            while frontier:
                nxt = []
                for u in frontier:
                    du = dist[u] + 1
                    for v in adj[u]:
                        dv = dist.get(v)
                        if dv is None:
                            dist[v], preds[v] = du, [u]
                            nxt.append(v)
                        elif dv == du:
                            preds[v].append(u)
                frontier = nxt
            bfs[root] = (dist, preds)
        return bfs[root]

    def _mids(self, a: str, b: str) -> tuple[tuple[tuple[str, ...], ...], tuple[float, ...]]:
        """All shortest non-GPU paths a..b, sorted, with their bottlenecks; () if unreachable."""
        mids = self._cache.setdefault("mids", {})
        if (a, b) not in mids:
            dist, preds = self._bfs(a)
            paths: list[tuple[str, ...]] = []
            stack = [(b, (b,))] if b in dist else []
            while stack:
                n, suffix = stack.pop()
                if n == a:
                    paths.append(suffix)
                else:
                    stack.extend((p, (p,) + suffix) for p in preds[n])
            paths.sort()
            edges = self._static()[0]
            bws = tuple(min((edges[e][0] for e in zip(p, p[1:])), default=float("inf"))
                        for p in paths)
            mids[(a, b)] = (tuple(paths), bws)
        return mids[(a, b)]

    def _route(self, src: int, dst: int) -> tuple[str, ...]:
        ga, gb = self.cluster.gpu_id(src), self.cluster.gpu_id(dst)
        if src == dst:
            return (ga,)
        edges, _, _, ports, anchor = self._static()
        groups, best = [], None
        for p in ports[ga]:
            ap, pre = anchor[p]
            for q in ports[gb]:
                aq, suf = anchor[q]
                if p == q:  # two GPUs on one NIC or NVSwitch
                    head, tail, mid_paths, bws = (), (), ((p,),), (float("inf"),)
                else:
                    head, tail = pre, suf
                    mid_paths, bws = self._mids(ap, aq)
                if not mid_paths:
                    continue
                hops = len(head) + len(mid_paths[0]) + len(tail)
                if best is not None and hops > best:
                    continue
                if best is None or hops < best:
                    best, groups = hops, []
                outer = [edges[(ga, p)][0], edges[(q, gb)][0]]
                outer += [edges[(p, ap)][0]] if head else []
                outer += [edges[(aq, q)][0]] if tail else []
                groups.append(((ga,) + head, mid_paths, bws, tail + (gb,), min(outer)))
        if not groups:
            raise SpecError(f"topology {self.cluster.name}: gpu {src} has no route to gpu {dst}")
        pick = zlib.crc32(f"{src}-{dst}".encode())
        if len(groups) == 1 and groups[0][4] <= min(groups[0][2]):  # all candidates equally wide
            head, mid_paths, _, tail, _ = groups[0]
            return head + mid_paths[pick % len(mid_paths)] + tail
        cands = [(min(outer, bw), head + m + tail)
                 for head, mid_paths, bws, tail, outer in groups for m, bw in zip(mid_paths, bws)]
        widest = max(bw for bw, _ in cands)
        paths = sorted(path for bw, path in cands if bw >= widest * (1 - 1e-12))
        return paths[pick % len(paths)]
