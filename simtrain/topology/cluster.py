"""Cluster topologies: TOML format, graph, routing, bisection bandwidth, summary.

A topology file (``topologies/*.toml``, or any path; full example in ``topologies/README.md``)
describes one node type and the fabric joining the nodes. Units are in the key names; inside
simtrain everything is SI (bytes/s, s)::

    name = "h100-ib"                  # default: the file name
    description = "..."
    gpu = "h100-sxm"                  # a GPU preset, or a [gpu] table (specs.gpu.gpu_from_table)
    nodes = 8                         # default node count (>= 1, default 1); nodes= overrides it

    [node]
    gpus = 8                          # GPUs per node (one NVLink domain: 72 for an NVL72 rack)
    nvswitch = true                   # false: no NVLink; GPUs talk over PCIe/NIC only
    nvlink_GBps = 450                 # per GPU per direction; default: the GPU spec's NVLink
    nvlink_latency_us = 1.0           # GPU -> NVSwitch -> GPU
    nics = 8                          # per node; default gpus (0 without fabric); divides gpus;
                                      # NIC i serves GPUs [i*gpus/nics, (i+1)*gpus/nics) over PCIe
    nic_gbps = 400                    # per NIC per direction (required when nics > 0)
    pcie_GBps = 64                    # GPU <-> NIC per direction (default 64: PCIe 5.0 x16)
    nic_latency_us = 0.5              # per NIC crossing (counted at both ends of a route)

    [fabric]                          # absent = kind "none"
    kind = "fat-tree"                 # "fat-tree" | "rail-optimized" | "none" (one node)
    tiers = 2                         # 2 (leaf-spine) or 3 (leaf-spine-core)
    nodes_per_leaf = 4                # nodes <= nodes_per_leaf, or a multiple of it
    spines = 8                        # spines (per pod with 3 tiers); the ECMP width
    oversubscription = 1.0            # leaf downlink : uplink capacity, >= 1
    leaves_per_pod = 4                # tiers = 3 only; leaves <= leaves_per_pod or a multiple
    cores = 8                         # tiers = 3 only; a multiple of spines
    core_oversubscription = 1.0       # tiers = 3 only; spine downlink : uplink capacity
    switch_latency_us = 0.13          # per leaf/spine/core traversal
    link_latency_us = 0.05            # per cable

Graph (``networkx.DiGraph``, two directed edges per physical link). Nodes carry ``kind`` (gpu,
nvswitch, nic, leaf, spine, core) and ``latency_s`` (switch traversal); GPUs are named ``gpu{g}``
with ``index`` g (global, node-major: GPU g is on node g // gpus_per_node) and ``node``; the others
``node{n}/nvswitch``, ``node{n}/nic{k}``, ``leaf{l}``, ``spine{s}`` (``pod{p}/spine{s}`` with 3
tiers), ``core{c}``. Edges carry ``bandwidth_Bps``, ``latency_s`` and ``tier`` (nvlink, pcie, leaf =
nic<->leaf, spine = leaf<->spine, core = spine<->core). Leaf uplinks = downlinks / oversubscription,
one aggregated edge per leaf-spine pair; the builder rules and their sources are in
:mod:`simtrain.topology_build`.
"""

from __future__ import annotations

import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from simtrain.presets import preset_dir
from simtrain.errors import SpecError, unknown_name
from simtrain.specs.gpu import GpuSpec
from simtrain.specs.strict import parse_toml, read_toml
from simtrain.topology.build import TopologySpec, build_graph, check_graph, parse_spec

NODE_KINDS = ("gpu", "nvswitch", "nic", "leaf", "spine", "core")
TIERS = ("nvlink", "pcie", "leaf", "spine", "core")


@dataclass(frozen=True)
class Cluster:
    """A built topology. ``graph`` follows the conventions of the module docstring."""

    name: str
    source: str  # preset name or file path
    gpu: GpuSpec
    num_nodes: int
    gpus_per_node: int
    graph: nx.DiGraph = field(repr=False, compare=False)
    fabric_kind: str = "none"
    tiers: int = 0
    oversubscription: float = 1.0
    description: str = ""
    spec: TopologySpec | None = field(default=None, repr=False, compare=False)

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    def _check(self, g: int) -> int:
        if isinstance(g, bool) or not isinstance(g, int) or not 0 <= g < self.num_gpus:
            raise SpecError(f"topology {self.name}: gpu {g!r}: must be an int in "
                            f"[0, {self.num_gpus})")
        return g

    def gpu_id(self, g: int) -> str:
        """The graph node of global GPU ``g``."""
        return f"gpu{self._check(g)}"

    def node_of(self, g: int) -> int:
        """The node (server or rack) holding GPU ``g``."""
        return self._check(g) // self.gpus_per_node

    @property
    def fabric(self) -> dict[str, Any]:
        """The resolved fabric parameters (JSON-ready)."""
        out: dict[str, Any] = {"kind": self.fabric_kind}
        if self.spec is None or self.fabric_kind == "none":
            return out
        fb, nd = self.spec.fabric, self.spec.node
        out.update(tiers=fb.tiers, nodes_per_leaf=fb.nodes_per_leaf, leaves=self.spec.num_leaves,
                   spines=fb.spines, oversubscription=fb.oversubscription,
                   nics_per_node=nd.nics, nic_Bps=nd.nic_Bps)
        if fb.tiers == 3:
            out.update(pods=self.spec.num_pods, leaves_per_pod=fb.leaves_per_pod, cores=fb.cores,
                       core_oversubscription=fb.core_oversubscription)
        return out


def _preset_dir() -> Any:
    return preset_dir("topologies")


def list_topologies() -> list[str]:
    """Names of the preset topologies."""
    return sorted(p.name[:-5] for p in _preset_dir().iterdir() if p.name.endswith(".toml"))


def load_topology(name_or_path: str, nodes: int | None = None,
                  gpu: GpuSpec | None = None) -> Cluster:
    """A preset by name, or a ``.toml`` file; ``nodes`` and ``gpu`` override the file's."""
    if name_or_path.endswith(".toml") or "/" in name_or_path or "\\" in name_or_path:
        return build_topology(read_toml(name_or_path), str(name_or_path), nodes, gpu)
    names = list_topologies()
    if name_or_path not in names:
        raise unknown_name("topology", name_or_path, names)
    text = _preset_dir().joinpath(f"{name_or_path}.toml").read_text(encoding="utf-8")
    return build_topology(parse_toml(text, name_or_path), name_or_path, nodes, gpu)


def build_topology(data: dict[str, Any], source: str, nodes: int | None = None,
                   gpu: GpuSpec | None = None) -> Cluster:
    """Build and validate a cluster from a parsed topology table."""
    spec = parse_spec(data, source, nodes, gpu)
    graph = build_graph(spec)
    check_graph(graph, spec, source)
    return Cluster(name=spec.name, source=source, gpu=spec.gpu, num_nodes=spec.nodes,
                   gpus_per_node=spec.node.gpus, graph=graph, fabric_kind=spec.fabric.kind,
                   tiers=spec.fabric.tiers, oversubscription=spec.fabric.oversubscription,
                   description=spec.description, spec=spec)


class Router:
    """Deterministic shortest-hop routes between GPUs, never transiting a third GPU.

    Among equal-hop routes the widest (largest bottleneck) win (NVLink before a shared PCIe NIC);
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
        """Bottleneck bandwidth of the route, bytes/s (inf from a GPU to itself)."""
        edges = self._static()[0]
        return min((edges[e][0] for e in self.links(src_gpu, dst_gpu)), default=float("inf"))

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
            edges = {(u, v): (d["bandwidth_Bps"], d["latency_s"]) for u, v, d in g.edges(data=True)}
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


def bisection_bandwidth(cluster: Cluster) -> float:
    """Max flow (= min cut, one direction), bytes/s, from the first half of the GPUs (node-major)
    to the second half, with edge capacities = ``bandwidth_Bps`` (rounded to whole bytes/s so the
    flow algorithm works in exact integers). Flow through a GPU cannot raise the value: every GPU
    is a source or a sink. 0.0 with fewer than two GPUs."""
    n = cluster.num_gpus
    if n < 2:
        return 0.0
    flow = nx.DiGraph()
    for u, v, bw in cluster.graph.edges(data="bandwidth_Bps"):
        flow.add_edge(u, v, capacity=round(bw))
    for g in range(n):  # edges without "capacity" are unbounded
        if g < n // 2:
            flow.add_edge("_source", cluster.gpu_id(g))
        else:
            flow.add_edge(cluster.gpu_id(g), "_sink")
    return float(nx.maximum_flow_value(flow, "_source", "_sink"))


def summary(cluster: Cluster) -> dict[str, Any]:
    """A JSON-ready description: counts by kind, per-link bandwidth by tier, bisection."""
    g = cluster.graph
    kinds = Counter(kind for _, kind in g.nodes(data="kind"))
    links: Counter[str] = Counter()
    bws: dict[str, set[float]] = {}
    for _, _, d in g.edges(data=True):
        links[d["tier"]] += 1
        bws.setdefault(d["tier"], set()).add(d["bandwidth_Bps"])
    bw_by_tier: dict[str, Any] = {}
    for tier in TIERS:
        if tier in bws:
            lo, hi = min(bws[tier]), max(bws[tier])
            bw_by_tier[tier] = lo if lo == hi else {"min": lo, "max": hi}
    return {
        "name": cluster.name,
        "source": cluster.source,
        "description": cluster.description,
        "gpu": cluster.gpu.name,
        "num_nodes": cluster.num_nodes,
        "gpus_per_node": cluster.gpus_per_node,
        "num_gpus": cluster.num_gpus,
        "nodes_by_kind": {k: kinds[k] for k in NODE_KINDS if kinds[k]},
        "links_by_kind": {t: links[t] // 2 for t in TIERS if links[t]},
        "bandwidth_by_tier_Bps": bw_by_tier,
        "bisection_bandwidth_Bps": bisection_bandwidth(cluster),
        "oversubscription": cluster.oversubscription,
        "fabric": cluster.fabric,
    }
