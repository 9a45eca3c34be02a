"""Routes between GPUs on a cluster graph: deterministic shortest-hop paths with ECMP, their
bottleneck (achievable) bandwidth and latency, and which NIC serves a GPU.

The fabric part of a route (leaf to leaf) follows from the fabric's structure
(:mod:`simtrain.topology.build`): on two tiers every spine joins every leaf, so the shortest
paths between two leaves are ``leaf -> spine s -> leaf`` for each spine; on three tiers two leaves
of one pod meet at any of the pod's spines, and leaves of two pods meet through core ``c`` via
spine ``c % spines`` of each pod (Al-Fares et al., SIGCOMM 2008, section 3). These are exactly
the shortest paths a breadth-first search finds on the graph (NICs hang off a single leaf and so
never lie inside a shortest path); ``Router(cluster, structural=False)`` searches the graph
instead, and the tests compare both on every preset.
"""

from __future__ import annotations

import zlib
from typing import Any

from simtrain.errors import SpecError
from simtrain.topology.build import paused_gc, plain_adjacency
from simtrain.topology.cluster import Cluster
from simtrain.topology.routing.link_ids import LinkIds
from simtrain.topology.routing.node_routes import NodeRoutes
from simtrain.topology.routing.costs import RouteCosts
from simtrain.topology.routing.tables import first_nic, nic_port, static_tables


class Router:
    """Deterministic shortest-hop routes between GPUs, never transiting a third GPU.

    Among equal-hop routes the widest (largest achievable bottleneck, ``capacity_Bps``) win
    (NVLink before a shared PCIe NIC);
    among those, ECMP picks ``sorted(paths)[crc32(f"{src}-{dst}") % len(paths)]``. A route from a
    GPU to itself is ``(gpu,)``. The middle of a route (between the GPUs' NVSwitch/NIC neighbours)
    is computed between the switches the NICs hang off and cached per switch pair: from the
    fabric's structure (:func:`fabric_paths`), or with ``structural=False`` by breadth-first
    search (:func:`breadth_first`). Routes, their links and fabric latencies are cached per pair.
    """

    def __init__(self, cluster: Cluster, structural: bool = True) -> None:
        self.cluster = cluster
        self.structural = structural
        self._cache: dict[str, Any] = {}
        self._routes: dict[tuple[int, int], tuple[str, ...]] = {}
        self._links: dict[tuple[int, int], tuple[tuple[str, str], ...]] = {}
        self._mid_paths: dict[tuple[str, str], tuple[tuple[tuple[str, ...], ...], tuple[float, ...]]] = {}
        self._nic_ports: dict[str, tuple[str, str, float, float] | None] = {}
        self._across: bool | None = None  # routes across nodes from the fabric's structure
        self.node_routes = NodeRoutes(self)  # routes inside nodes, learned per kind of node

    def route(self, src_gpu: int, dst_gpu: int) -> tuple[str, ...]:
        """The node path from GPU ``src_gpu`` to GPU ``dst_gpu``."""
        path = self._routes.get((src_gpu, dst_gpu))
        if path is None:
            path = self._routes[(src_gpu, dst_gpu)] = self._route(src_gpu, dst_gpu)
        return path

    def links(self, src_gpu: int, dst_gpu: int) -> tuple[tuple[str, str], ...]:
        """The directed edges of the route."""
        out = self._links.get((src_gpu, dst_gpu))
        if out is None:
            path = self.route(src_gpu, dst_gpu)
            out = self._links[(src_gpu, dst_gpu)] = tuple(zip(path, path[1:]))
        return out

    def bandwidth(self, src_gpu: int, dst_gpu: int) -> float:
        """Achievable bottleneck bandwidth of the route (its smallest ``capacity_Bps``), bytes/s
        (inf from a GPU to itself)."""
        edges = self._static()[0]
        return min((edges[e][0] for e in self.links(src_gpu, dst_gpu)), default=float("inf"))

    def fabric_latency(self, src_gpu: int, dst_gpu: int) -> float:
        """The part of :meth:`latency` spent beyond the NICs: cables and switches of the fabric
        (what NCCL's tuning model adds per inter-node step as the network's latency), s."""
        cache = self._cache.setdefault("fabric_latency", {})
        out = cache.get((src_gpu, dst_gpu))
        if out is None:
            g = self.cluster.graph
            path = self.route(src_gpu, dst_gpu)
            fabric = ("leaf", "spine", "core")
            out = cache[(src_gpu, dst_gpu)] = (
                sum(g.edges[e]["latency_s"] for e in zip(path, path[1:]) if g.edges[e]["tier"] in fabric)
                + sum(g.nodes[n]["latency_s"] for n in path[1:-1] if g.nodes[n]["kind"] in fabric))
        return out

    def nic_of(self, gpu: int) -> str | None:
        """The NIC serving GPU ``gpu`` (its graph node), None when its node has no NIC."""
        nics = self._cache.setdefault("nics", {})
        if gpu not in nics:
            g = self.cluster.graph  # plain dicts, not views: asked for every GPU of a 100,000-GPU group
            nics[gpu] = first_nic(self.cluster.gpu_id(gpu), plain_adjacency(g), g._node)
        return nics[gpu]

    def latency(self, src_gpu: int, dst_gpu: int) -> float:
        """Sum of the route's edge latencies and the traversal latency of its switches, s."""
        edges, node_lat = self._static()[:2]
        path = self.route(src_gpu, dst_gpu)
        return (sum(edges[e][1] for e in zip(path, path[1:]))
                + sum(node_lat[n] for n in path[1:-1]))

    def cost(self, src_gpu: int, dst_gpu: int) -> tuple[float, float]:
        """``(bandwidth, latency)`` of the route, exactly as :meth:`bandwidth` and :meth:`latency`
        give them, without keeping the route (:class:`~simtrain.topology.routing.costs.RouteCosts`)."""
        costs = self._cache.get("costs")
        if costs is None:
            costs = self._cache["costs"] = RouteCosts(self)
        return costs.cost(src_gpu, dst_gpu)

    def link_ids(self) -> LinkIds:
        """Integer ids of links and the links of many routes at once
        (:class:`~simtrain.topology.routing.link_ids.LinkIds`), one table per router."""
        ids = self._cache.get("link_ids")
        if ids is None:
            ids = self._cache["link_ids"] = LinkIds(self)
        return ids

    def _static(self) -> tuple[dict, dict, dict, dict, dict]:
        st = self._cache.get("static")
        if st is None:
            with paused_gc():  # a million new tuples, none in a cycle
                st = self._cache["static"] = static_tables(self.cluster.graph)
        return st

    def _mids(self, a: str, b: str) -> tuple[tuple[tuple[str, ...], ...], tuple[float, ...]]:
        """All shortest non-GPU paths a..b, sorted, with their bottlenecks; () if unreachable."""
        mids = self._mid_paths
        if (a, b) not in mids:
            paths = fabric_paths(self.cluster, a, b) if self.structural else None
            if paths is None:
                bfs = self._cache.setdefault("bfs", {})
                if a not in bfs:
                    bfs[a] = breadth_first(self._static()[2], a)
                paths = shortest_paths(*bfs[a], a, b)
            paths.sort()
            edges = self._static()[0]
            bws = tuple(min((edges[e][0] for e in zip(p, p[1:])), default=float("inf"))
                        for p in paths)
            mids[(a, b)] = (tuple(paths), bws)
        return mids[(a, b)]

    def _ports(self, gpu: str) -> list[tuple[str, str, tuple[str, ...], float, float, bool]]:
        """Per non-GPU neighbour ``p`` of ``gpu``: ``p``, the switch it is routed from, the hop to
        that switch, the capacity gpu -> p and p -> switch (inf without that hop), and whether
        the switch reaches any other switch."""
        cache = self._cache.setdefault("ports", {})
        out = cache.get(gpu)
        if out is None:
            edges, _, adj, ports, anchor = self._static()
            out = cache[gpu] = []
            for p in ports[gpu]:
                ap, pre = anchor[p]
                out.append((p, ap, pre, edges[(gpu, p)][0], edges[(p, ap)][0] if pre else float("inf"),
                            bool(adj[ap])))
        return out

    def _nic_port(self, gpu: str) -> tuple[str, str, float, float] | None:
        """On a fabric built from a spec: the NIC of ``gpu``, the leaf it hangs off, the capacity
        of gpu -> NIC -> leaf and of leaf -> NIC -> gpu; None without a NIC."""
        cache = self._nic_ports
        if gpu not in cache:
            edges, _, _, ports, anchor = self._static()
            port = nic_port(gpu, ports, anchor)
            if port is None:
                cache[gpu] = None
            else:
                nic, leaf = port
                cache[gpu] = (nic, leaf, min(edges[(gpu, nic)][0], edges[(nic, leaf)][0]),
                              min(edges[(nic, gpu)][0], edges[(leaf, nic)][0]))
        return cache[gpu]

    def _route(self, src: int, dst: int) -> tuple[str, ...]:
        ga, gb = self.cluster.gpu_id(src), self.cluster.gpu_id(dst)
        if src == dst:
            return (ga,)
        cl = self.cluster
        node = src // cl.gpus_per_node
        inside = self.structural and node == dst // cl.gpus_per_node
        if inside and (path := self.node_routes.route(src, dst, node)) is not None:
            return path
        if self._across is None:
            self._across = self.structural and cl.spec is not None and cl.spec.fabric.kind != "none"
        if self._across and src // cl.gpus_per_node != dst // cl.gpus_per_node:
            # GPUs of two nodes meet only through their NICs (an NVSwitch joins one node's GPUs):
            # the one candidate group of the general rule below, without trying the others
            a, b = self._nic_port(ga), self._nic_port(gb)
            if a is not None and b is not None:
                mid_paths, bws = self._mids(a[1], b[1])
                outer = min(a[2], b[3])
                if mid_paths and outer <= min(bws):  # every candidate equally wide: ECMP
                    mid = mid_paths[zlib.crc32(f"{src}-{dst}".encode()) % len(mid_paths)]
                    return (ga, a[0]) + mid + (b[0], gb)
                return pick(self.cluster.name, src, dst, [((ga, a[0]), mid_paths, bws, (b[0], gb), outer)])
        edges = self._static()[0]
        groups, best = [], None
        inf = float("inf")
        for p, ap, pre, cap_gp, cap_pre, reach_a in self._ports(ga):
            for q, aq, suf, _, _, reach_b in self._ports(gb):
                if p == q:  # two GPUs on one NIC or NVSwitch
                    head, tail, mid_paths, bws = (), (), ((p,),), (inf,)
                elif ap != aq and not (reach_a and reach_b):
                    continue  # an isolated switch (an NVSwitch) reaches no other
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
                outer = min(cap_gp, edges[(q, gb)][0], cap_pre if head else inf,
                            edges[(aq, q)][0] if tail else inf)
                groups.append(((ga,) + head, mid_paths, bws, tail + (gb,), outer))
        path = pick(self.cluster.name, src, dst, groups)
        if inside:
            self.node_routes.learn(src, dst, node, path)
        return path


def pick(name: str, src: int, dst: int, groups: list) -> tuple[str, ...]:
    """Among the candidate groups of a route from GPU ``src`` to ``dst`` on topology ``name``
    (head, middle paths, their bottlenecks, tail, bottleneck of head and tail) the widest paths,
    then ECMP by ``crc32(f"{src}-{dst}")``."""
    if not groups or not groups[0][1]:
        raise SpecError(f"topology {name}: gpu {src} has no route to gpu {dst}")
    ecmp = zlib.crc32(f"{src}-{dst}".encode())
    if len(groups) == 1 and groups[0][4] <= min(groups[0][2]):  # all candidates equally wide
        head, mid_paths, _, tail, _ = groups[0]
        return head + mid_paths[ecmp % len(mid_paths)] + tail
    cands = [(min(outer, bw), head + m + tail)
             for head, mid_paths, bws, tail, outer in groups for m, bw in zip(mid_paths, bws)]
    widest = max(bw for bw, _ in cands)
    paths = sorted(path for bw, path in cands if bw >= widest * (1 - 1e-12))
    return paths[ecmp % len(paths)]


def breadth_first(adj: dict[str, tuple[str, ...]], root: str) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Hop distance from ``root`` and the predecessors on shortest paths, over ``adj``."""
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
    return dist, preds


def shortest_paths(dist: dict[str, int], preds: dict[str, list[str]], a: str, b: str) -> list[tuple[str, ...]]:
    """Every shortest path a..b from :func:`breadth_first` of ``a`` (empty when unreachable)."""
    paths: list[tuple[str, ...]] = []
    stack = [(b, (b,))] if b in dist else []
    while stack:
        n, suffix = stack.pop()
        if n == a:
            paths.append(suffix)
        else:
            stack.extend((p, (p,) + suffix) for p in preds[n])
    return paths


def fabric_paths(cluster: Cluster, a: str, b: str) -> list[tuple[str, ...]] | None:
    """All shortest non-GPU paths between switches ``a`` and ``b`` from the fabric's structure
    (module docstring; none from an NVSwitch to another switch: it joins GPUs only); None when
    the structure does not say (no fabric, or an end that is neither a leaf nor an NVSwitch)."""
    spec, g = cluster.spec, cluster.graph
    if spec is None or spec.fabric.kind == "none":
        return None
    if a == b:
        return [(a,)]
    if g.nodes[a]["kind"] == "nvswitch" or g.nodes[b]["kind"] == "nvswitch":
        return []  # an NVSwitch joins GPUs only
    if not (a.startswith("leaf") and b.startswith("leaf")):
        return None
    spines = spec.fabric.spines
    if spec.fabric.tiers == 2:
        return [(a, f"spine{s}", b) for s in range(spines)]
    pa, pb = g.nodes[a]["pod"], g.nodes[b]["pod"]
    if pa == pb:
        return [(a, f"pod{pa}/spine{s}", b) for s in range(spines)]
    return [(a, f"pod{pa}/spine{c % spines}", f"core{c}", f"pod{pb}/spine{c % spines}", b)
            for c in range(spec.fabric.cores)]
