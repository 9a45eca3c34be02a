"""Cluster topologies: TOML format, graph, bisection bandwidth, summary.

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
    nvlink_efficiency = 0.822         # achievable / line rate (default: H100, nccl-tests issue 212)
    nvls = false                      # NVLink SHARP (NVSwitch 3+): in-switch all-reduce
    nvls_efficiency = 0.683           # NVLS multimem rate / NVLink line rate (nccl issue 1455)
    nics = 8                          # per node; default gpus (0 without fabric); divides gpus;
                                      # NIC i serves GPUs [i*gpus/nics, (i+1)*gpus/nics) over PCIe
    nic_gbps = 400                    # per NIC per direction (required when nics > 0)
    pcie_GBps = 64                    # GPU <-> NIC per direction (default 64: PCIe 5.0 x16)
    nic_latency_us = 0.5              # per NIC crossing (counted at both ends of a route)

    [fabric]                          # absent = kind "none"
    kind = "fat-tree"                 # "fat-tree" | "rail-optimized" | "none" (one node)
    tiers = 2                         # 2 (leaf-spine) or 3 (leaf-spine-core)
    nodes_per_leaf = 4                # nodes per leaf; the last leaf may be partly filled
    spines = 8                        # spines (per pod with 3 tiers); the ECMP width
    oversubscription = 1.0            # leaf downlink : uplink capacity, >= 1
    leaves_per_pod = 4                # tiers = 3 only; the last pod may be partly filled
    cores = 8                         # tiers = 3 only; a multiple of spines
    core_oversubscription = 1.0       # tiers = 3 only; spine downlink : uplink capacity
    switch_latency_us = 0.13          # per leaf/spine/core traversal
    link_latency_us = 0.05            # per cable
    nic_efficiency = 0.96             # achievable / line rate of NICs and fabric links
    switch_ports = 64                 # optional: the switches' radix, bounds the node count

Graph (``networkx.DiGraph``, two directed edges per physical link). Nodes carry ``kind`` (gpu,
nvswitch, nic, leaf, spine, core) and ``latency_s`` (switch traversal); GPUs are named ``gpu{g}``
with ``index`` g (global, node-major: GPU g is on node g // gpus_per_node) and ``node``; the others
``node{n}/nvswitch``, ``node{n}/nic{k}``, ``leaf{l}``, ``spine{s}`` (``pod{p}/spine{s}`` with 3
tiers), ``core{c}``. Edges carry ``bandwidth_Bps``, ``latency_s`` and ``tier`` (nvlink, pcie, leaf =
nic<->leaf, spine = leaf<->spine, core = spine<->core) and ``capacity_Bps`` (the achievable rate:
``bandwidth_Bps`` x the tier's efficiency). Leaf uplinks = downlinks / oversubscription,
one aggregated edge per leaf-spine pair; the builder rules and their sources are in
:mod:`simtrain.topology.build`, routes between GPUs in :mod:`simtrain.topology.routing.router`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import networkx as nx

from simtrain.presets import preset_dir
from simtrain.errors import SpecError, unknown_name
from simtrain.specs.gpu import GpuSpec
from simtrain.specs.strict import parse_toml, read_toml
from simtrain.topology.bisection import bisection_flow
from simtrain.topology.build import build_graph, check_graph, routable
from simtrain.topology.spec import TopologySpec, parse_spec

NODE_KINDS = ("gpu", "nvswitch", "nic", "leaf", "spine", "core")
TIERS = ("nvlink", "pcie", "leaf", "spine", "core")


@dataclass(frozen=True)
class Cluster:
    """A built topology. ``graph`` follows the conventions of the module docstring. ``uniform``:
    the graph is the one :func:`build_topology` built from ``spec``, unchanged (every node alike:
    the same GPUs, NVSwitch and NICs with the same links, named by their node), which the router's
    tables use to learn one node and rename it for the others; a changed graph (a degraded or
    failed link, :func:`~simtrain.topology.faults.perturb_links`) has ``uniform=False``. Change a
    graph only through a copy, as ``perturb_links`` does."""

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
    uniform: bool = field(default=False, repr=False, compare=False)

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @cached_property
    def capacity_Bps(self) -> dict[tuple[str, str], float]:  # noqa: N802
        """Achievable bandwidth (bytes/s) of every directed link, keyed ``(u, v)``: the graph's
        ``capacity_Bps`` attributes in one dict (the network models' hot paths read it)."""
        return {(u, v): d["capacity_Bps"] for u, v, d in self.graph.edges(data=True)}

    def _check(self, g: int) -> int:
        if g.__class__ is int and 0 <= g < self.num_nodes * self.gpus_per_node:
            return g
        if isinstance(g, bool) or not isinstance(g, int) or not 0 <= g < self.num_gpus:
            raise SpecError(f"topology {self.name}: gpu {g!r}: must be an int in "
                            f"[0, {self.num_gpus})")
        return g

    def gpu_id(self, g: int) -> str:
        """The graph node of global GPU ``g``."""
        return f"gpu{self._check(g)}"

    def node_of(self, g: int) -> int:
        """The node (server or rack) holding GPU ``g``."""
        if g.__class__ is int and 0 <= g < self.num_nodes * self.gpus_per_node:
            return g // self.gpus_per_node
        return self._check(g) // self.gpus_per_node

    @property
    def nvls(self) -> bool:
        """Whether the nodes' NVSwitches reduce in the switch (NVLink SHARP)."""
        return self.spec is not None and self.spec.node.nvswitch and self.spec.node.nvls

    @property
    def fabric(self) -> dict[str, Any]:
        """The resolved fabric parameters (JSON-ready)."""
        out: dict[str, Any] = {"kind": self.fabric_kind}
        if self.spec is None or self.fabric_kind == "none":
            return out
        fb, nd = self.spec.fabric, self.spec.node
        out.update(tiers=fb.tiers, nodes_per_leaf=fb.nodes_per_leaf, leaves=self.spec.num_leaves,
                   spines=fb.spines, oversubscription=fb.oversubscription,
                   nics_per_node=nd.nics, nic_Bps=nd.nic_Bps, nic_efficiency=fb.nic_efficiency)
        if fb.tiers == 3:
            out.update(pods=self.spec.num_pods, leaves_per_pod=fb.leaves_per_pod, cores=fb.cores,
                       core_oversubscription=fb.core_oversubscription)
        return out


def _preset_dir() -> Any:
    return preset_dir("topologies")


def list_topologies() -> list[str]:
    """Names of the preset topologies."""
    return sorted(p.name[:-5] for p in _preset_dir().iterdir() if p.name.endswith(".toml"))


def preset_table(name: str) -> dict[str, Any]:
    """The parsed table of preset ``name`` (SpecError naming the presets when there is none)."""
    names = list_topologies()
    if name not in names:
        raise unknown_name("topology", name, names)
    return parse_toml(_preset_dir().joinpath(f"{name}.toml").read_text(encoding="utf-8"), name)


def topology_table(name_or_path: str) -> tuple[dict[str, Any], str]:
    """(the parsed table, its source) of a preset by name or a ``.toml`` file, not yet checked:
    :func:`build_topology` builds it, :func:`~simtrain.topology.spec.parse_spec` reads its
    values without building a graph."""
    if name_or_path.endswith(".toml") or "/" in name_or_path or "\\" in name_or_path:
        return read_toml(name_or_path), str(name_or_path)
    return preset_table(name_or_path), name_or_path


def load_topology(name_or_path: str, nodes: int | None = None,
                  gpu: GpuSpec | None = None) -> Cluster:
    """A preset by name, or a ``.toml`` file; ``nodes`` and ``gpu`` override the file's."""
    data, source = topology_table(name_or_path)
    return build_topology(data, source, nodes, gpu)


def build_topology(data: dict[str, Any], source: str, nodes: int | None = None,
                   gpu: GpuSpec | None = None) -> Cluster:
    """Build and validate a cluster from a parsed topology table: the graph is checked
    (:func:`~simtrain.topology.build.check_graph`) unless its spec proves it passes
    (:func:`~simtrain.topology.build.routable`)."""
    spec = parse_spec(data, source, nodes, gpu)
    graph = build_graph(spec)
    if not routable(spec):
        check_graph(graph, spec, source)
    return Cluster(name=spec.name, source=source, gpu=spec.gpu, num_nodes=spec.nodes,
                   gpus_per_node=spec.node.gpus, graph=graph, fabric_kind=spec.fabric.kind,
                   tiers=spec.fabric.tiers, oversubscription=spec.fabric.oversubscription,
                   description=spec.description, spec=spec, uniform=True)


def cluster_for(topology: str, gpus: int, nodes: int | None = None) -> Cluster:
    """The cluster of a run: ``nodes`` nodes of ``topology``, or (None) the fewest nodes that hold
    ``gpus``. An error names ``gpus`` and ``nodes`` as given. The graph is built once: the file's
    node count and GPUs per node come from its spec, read without building one.

    >>> cluster_for("h100-ib", 100).num_nodes
    13
    """
    data, source = topology_table(topology)
    if nodes is not None:
        cluster = build_topology(data, source, nodes=nodes)
        if gpus > cluster.num_gpus:
            raise SpecError(f"gpus={gpus} exceeds the {cluster.num_gpus} GPUs of topology {cluster.name} "
                            f"with nodes={nodes}; raise --nodes or lower --gpus")
        return cluster
    probe = parse_spec(data, source)
    need = -(-gpus // probe.node.gpus)
    if need == probe.nodes:
        return build_topology(data, source)
    try:
        return build_topology(data, source, nodes=need)
    except SpecError as exc:
        raise SpecError(f"gpus={gpus} needs {need} nodes of {probe.node.gpus} GPUs: {exc}") from None


def bisection_bandwidth(cluster: Cluster) -> float:
    """Max flow (= min cut, one direction), bytes/s, from the first half of the GPUs (node-major)
    to the second half, with edge capacities = ``bandwidth_Bps`` (rounded to whole bytes/s so the
    flow algorithm works in exact integers). Flow through a GPU cannot raise the value: every GPU
    is a source or a sink. 0.0 with fewer than two GPUs. Computed on a reduced graph of the same
    maximum flow (:mod:`simtrain.topology.bisection`): the fabric's switches and the two halves."""
    return bisection_flow(cluster.graph, cluster.num_gpus) if cluster.num_gpus >= 2 else 0.0


def summary(cluster: Cluster) -> dict[str, Any]:
    """A JSON-ready description: counts by kind, per-link line rate and efficiency (achievable /
    line rate) by tier, bisection (line rates), NVLink SHARP."""
    g = cluster.graph
    kinds = Counter(kind for _, kind in g.nodes(data="kind"))
    links: Counter[str] = Counter()
    bws: dict[str, set[float]] = {}
    efficiency: dict[str, float] = {}
    for _, _, d in g.edges(data=True):
        links[d["tier"]] += 1
        bws.setdefault(d["tier"], set()).add(d["bandwidth_Bps"])
        efficiency[d["tier"]] = d["capacity_Bps"] / d["bandwidth_Bps"]
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
        "efficiency_by_tier": {t: efficiency[t] for t in TIERS if t in efficiency},
        "nvls": cluster.nvls,
        "bisection_bandwidth_Bps": bisection_bandwidth(cluster),
        "oversubscription": cluster.oversubscription,
        "fabric": cluster.fabric,
    }
