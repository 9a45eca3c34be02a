"""Building a cluster's graph from its :class:`~simtrain.topology.spec.TopologySpec`.

:func:`build_graph` turns the spec into a ``networkx.DiGraph`` with two directed edges per
physical link, each with its line rate (``bandwidth_Bps``) and its achievable rate
(``capacity_Bps`` = line rate x the link kind's efficiency, :mod:`simtrain.topology.spec`);
:func:`check_graph` proves every GPU can reach every other one without passing through a third GPU.

Fabric rules (see the module docstring of :mod:`simtrain.topology.cluster` for the full text):

* A leaf's downlink capacity is the sum of its NIC ports (its *design* size, ``nodes_per_leaf``
  full nodes, even when fewer nodes are attached, as on a partly filled last leaf); its uplink
  capacity is downlink / ``oversubscription``, split evenly over one aggregated link to each
  spine. This is the usual definition of a leaf's oversubscription ratio in folded-Clos /
  fat-tree fabrics (Leiserson, "Fat-trees", IEEE Trans. Computers 1985; Al-Fares et al.,
  SIGCOMM 2008).
* Three tiers follow Al-Fares et al., "A Scalable, Commodity Data Center Network Architecture",
  SIGCOMM 2008: leaves grouped in pods with their own spines ("aggregation" switches); core
  switch ``c`` connects to spine ``c % spines`` of every pod, so ``cores`` must be a multiple of
  ``spines``. A spine's uplink capacity is its downlink capacity / ``core_oversubscription``.
* Rail-optimized (NVIDIA DGX SuperPOD reference architecture): nodes are grouped ``nodes_per_leaf``
  at a time; in each group NIC ``r`` of every node goes to the group's rail leaf ``r``. Rail
  leaves join shared spines with the same oversubscription rule, so cross-rail traffic goes
  leaf -> spine -> leaf unless a GPU relays it to the rail's NIC first (NCCL's PXN, which the
  all-to-all algorithm uses: :mod:`simtrain.network.phases`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import networkx as nx

from simtrain.specs.budget import check_graph_size
from simtrain.errors import SpecError
from simtrain.topology.spec import TopologySpec


def link_efficiencies(spec: TopologySpec) -> dict[str, float]:
    """The fraction of its line rate each link tier reaches (:mod:`simtrain.topology.spec`):
    NVLink ``nvlink_efficiency``, NIC and fabric links ``nic_efficiency``, PCIe 1."""
    nic = spec.fabric.nic_efficiency
    return {"nvlink": spec.node.nvlink_efficiency, "pcie": 1.0, "leaf": nic, "spine": nic, "core": nic}


def build_graph(spec: TopologySpec) -> nx.DiGraph:
    """The cluster graph: typed nodes, two directed edges per physical link. A spec whose graph
    would exceed :data:`simtrain.specs.budget.MAX_GRAPH_ELEMENTS` is refused before anything is built.
    Nodes and edges are written into the graph's own dicts, in the order ``add_node`` and
    ``add_edge`` one by one would give them (:func:`_build`)."""
    check_graph_size(spec, spec.name)
    with paused_gc():
        return _build(spec)


def plain_adjacency(g: nx.DiGraph) -> dict[str, dict[str, dict[str, Any]]]:
    """networkx's own successor dict-of-dicts of ``g`` (what ``g.adj`` views), for loops over
    every edge of a large graph: the view objects cost more than the loop's own work there.
    Read it, never write it."""
    return g._adj


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a large graph is built (and restore its
    state after): every dictionary created would otherwise count towards collections that
    traverse the growing graph again and again, about half of the build time at 100,000 GPUs.
    The graph holds no reference cycles that need collecting."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def link_kinds(spec: TopologySpec) -> dict[str, tuple[float, float]]:
    """Line rate and latency of each tier of link the graph of ``spec`` has (every link of a tier
    has the same): NVLink with an NVSwitch and two or more GPUs, PCIe with NICs, leaf (NIC <->
    leaf) with NICs and a fabric, spine (leaf <-> spine, the leaf's uplink capacity split over its
    spines) with a fabric, core (spine <-> core) with three tiers. The builder's rules; module
    docstring."""
    nd, fb = spec.node, spec.fabric
    out: dict[str, tuple[float, float]] = {}
    if nd.nvswitch and nd.gpus > 1:
        out["nvlink"] = (nd.nvlink_Bps, nd.nvlink_latency_s / 2)
    if nd.nics:
        out["pcie"] = (nd.pcie_Bps, nd.nic_latency_s)
    if fb.kind == "none":
        return out
    ports = fb.nodes_per_leaf if fb.kind == "rail-optimized" else fb.nodes_per_leaf * nd.nics  # of a full leaf
    leaf_up = ports * nd.nic_Bps / fb.oversubscription / fb.spines  # per leaf-spine link
    if nd.nics:
        out["leaf"] = (nd.nic_Bps, fb.link_latency_s)
    out["spine"] = (leaf_up, fb.link_latency_s)
    if fb.tiers == 3:
        per_spine = fb.cores // fb.spines
        out["core"] = (fb.leaves_per_pod * leaf_up / fb.core_oversubscription / per_spine, fb.link_latency_s)
    return out


def _build(spec: TopologySpec) -> nx.DiGraph:
    """The graph, written straight into networkx's own dicts (``_node``, ``_succ``, ``_pred``) in
    the order ``add_nodes_from`` and ``add_edges_from`` would fill them from the node and edge lists
    below (tests/topology/test_build.py compares both): each link adds ``u -> v`` then
    ``v -> u``, each directed edge a copy of its tier's attributes, one dict shared by
    ``succ[u][v]`` and ``pred[v][u]``. Every endpoint exists before its links and no link repeats,
    so networkx's per-edge checks have nothing to find."""
    g = nx.DiGraph(name=spec.name)
    add = _Adder(g, spec)
    nd = spec.node
    per_nic = nd.gpus // nd.nics if nd.nics else 0
    for n in range(spec.nodes):
        first = n * nd.gpus
        gpus = [f"gpu{first + i}" for i in range(nd.gpus)]
        for i, name in enumerate(gpus):
            add.node(name, {"kind": "gpu", "index": first + i, "node": n, "local": i, "latency_s": 0.0})
        if "nvlink" in add.tiers:
            sw = f"node{n}/nvswitch"
            add.node(sw, {"kind": "nvswitch", "node": n, "latency_s": 0.0})
            add.star(sw, gpus, add.tiers["nvlink"])
        for k in range(nd.nics):
            nic = f"node{n}/nic{k}"
            add.node(nic, {"kind": "nic", "node": n, "index": k, "latency_s": 0.0})
            add.star(nic, gpus[k * per_nic:(k + 1) * per_nic], add.tiers["pcie"])
    if spec.fabric.kind != "none":
        _build_fabric(add, spec)
    return g


class _Adder:
    """Nodes and links written into graph ``g``'s own dicts (:func:`_build`), with one attribute
    template per tier of link (:func:`link_kinds`; its achievable rate from :func:`link_efficiencies`)."""

    def __init__(self, g: nx.DiGraph, spec: TopologySpec) -> None:
        self.nodes, self.succ, self.pred = g._node, g._succ, g._pred
        efficiency = link_efficiencies(spec)
        self.tiers = {tier: dict(bandwidth_Bps=float(bw), capacity_Bps=float(bw) * efficiency[tier],
                                 latency_s=float(lat), tier=tier)
                      for tier, (bw, lat) in link_kinds(spec).items()}

    def node(self, name: str, attrs: dict[str, Any]) -> None:
        """A new node (what ``add_nodes_from`` makes of ``(name, attrs)``)."""
        self.nodes[name] = attrs
        self.succ[name] = {}
        self.pred[name] = {}

    def link(self, u: str, v: str, attrs: dict[str, Any]) -> None:
        """The two directed edges ``u -> v`` and ``v -> u``, in that order."""
        succ, pred = self.succ, self.pred
        succ[u][v] = pred[v][u] = attrs.copy()
        succ[v][u] = pred[u][v] = attrs.copy()

    def star(self, hub: str, ends: list[str], attrs: dict[str, Any]) -> None:
        """``link(end, hub, attrs)`` for each of ``ends`` in order (a node's NVSwitch or NIC)."""
        succ, pred = self.succ, self.pred
        hub_succ, hub_pred = succ[hub], pred[hub]
        for end in ends:
            hub_pred[end] = succ[end][hub] = attrs.copy()
            hub_succ[end] = pred[end][hub] = attrs.copy()


def _build_fabric(add: _Adder, spec: TopologySpec) -> None:
    fb, nd = spec.fabric, spec.node
    rail = fb.kind == "rail-optimized"
    npl, sw_lat = fb.nodes_per_leaf, fb.switch_latency_s
    down, up = add.tiers.get("leaf", {}), add.tiers["spine"]
    spines: set[str] = set()
    for leaf in range(spec.num_leaves):
        group, r = divmod(leaf, nd.nics) if rail else (leaf, None)
        pod = leaf // fb.leaves_per_pod if fb.tiers == 3 else 0
        name = f"leaf{leaf}"
        attrs: dict[str, Any] = {"kind": "leaf", "index": leaf, "pod": pod, "latency_s": sw_lat}
        if rail:
            attrs["rail"] = r
        add.node(name, attrs)
        rails = [r] if rail else range(nd.nics)
        for n in range(group * npl, min(spec.nodes, (group + 1) * npl)):
            for k in rails:
                add.link(f"node{n}/nic{k}", name, down)
        for s in range(fb.spines):
            spine = f"pod{pod}/spine{s}" if fb.tiers == 3 else f"spine{s}"
            if spine not in spines:
                spines.add(spine)
                add.node(spine, {"kind": "spine", "index": s, "pod": pod, "latency_s": sw_lat})
            add.link(name, spine, up)
    if fb.tiers == 3:
        core = add.tiers["core"]
        for c in range(fb.cores):
            add.node(f"core{c}", {"kind": "core", "index": c, "latency_s": sw_lat})
            for pod in range(spec.num_pods):
                add.link(f"pod{pod}/spine{c % fb.spines}", f"core{c}", core)


def routable(spec: TopologySpec) -> bool:
    """Whether the graph :func:`build_graph` makes of ``spec`` passes :func:`check_graph`, known
    from the spec alone (False: not known, run the check). True when every tier's line rate
    (:func:`link_kinds`) is > 0 and either there are fewer than two GPUs, or every node has NICs
    on a fabric, or there is one node whose GPUs share its NVSwitch or its single NIC. The fabric
    case: every NIC links to a leaf (the leaves cover every node: ``num_leaves`` groups of
    ``nodes_per_leaf``, one leaf per rail on a rail-optimised fabric), every leaf to each of its
    pod's spines (``spines`` >= 1), and with three tiers core 0 to spine 0 of every pod, so all
    NICs and switches form one component without GPUs, and each GPU has a NIC in it: the
    check's first success. Otherwise the graph is checked (tests/topology/test_build.py
    compares this with the check on every preset and on graphs that fail it)."""
    nd, fb = spec.node, spec.fabric
    if not all(bw > 0 for bw, _ in link_kinds(spec).values()):
        return False
    if spec.nodes * nd.gpus < 2:
        return True
    if fb.kind != "none" and nd.nics > 0 and fb.spines >= 1:
        return fb.tiers == 2 or (fb.tiers == 3 and fb.cores >= 1)
    return spec.nodes == 1 and ((nd.nvswitch and nd.gpus > 1) or nd.nics == 1)


def check_graph(g: nx.DiGraph, spec: TopologySpec, source: str) -> None:
    """Every edge has bandwidth > 0 and every GPU reaches every other GPU without transiting a GPU.

    Two GPUs are connected iff a neighbour of one and a neighbour of the other lie in the same
    connected component of the graph with all GPUs removed (edges come in symmetric pairs).
    """
    with paused_gc():
        _check_graph(g, spec, source)


def _check_graph(g: nx.DiGraph, spec: TopologySpec, source: str) -> None:
    adj = plain_adjacency(g)
    for u, nbrs in adj.items():
        for v, d in nbrs.items():
            if not d["bandwidth_Bps"] > 0:
                raise SpecError(f"{source}: link {u} -> {v}: bandwidth_Bps = {d['bandwidth_Bps']!r}: must be > 0")
    gpus = sorted((d["index"], n) for n, d in g.nodes(data=True) if d["kind"] == "gpu")
    if len(gpus) < 2:
        return
    comp = _components(g)
    signature: dict[frozenset[str], int] = {}  # component set -> first GPU with it
    for index, name in gpus:
        sig = frozenset(comp[m] for m in adj[name])
        if not sig:  # an isolated GPU
            other = gpus[1][0] if index == gpus[0][0] else gpus[0][0]
            _disconnected(spec, source, min(index, other), max(index, other))
        signature.setdefault(sig, index)
    sigs = sorted(signature.items(), key=lambda kv: kv[1])
    if frozenset.intersection(*signature):  # one component (the fabric) reaches every GPU
        return
    for i, (sa, a) in enumerate(sigs):
        for sb, b in sigs[i + 1:]:
            if not sa & sb:
                _disconnected(spec, source, a, b)


def _components(g: nx.DiGraph) -> dict[str, str]:
    """The connected component of every non-GPU node of ``g`` with all GPUs removed, as a
    representative node (a depth-first search from each unreached node over the successors; edges
    come in symmetric pairs, so successors are all neighbours; no copy of the graph)."""
    kind = dict(g.nodes(data="kind"))
    adj = plain_adjacency(g)
    comp: dict[str, str] = {}
    for root, k in kind.items():
        if k == "gpu" or root in comp:
            continue
        comp[root] = root
        stack = [root]
        while stack:
            for v in adj[stack.pop()]:
                if v not in comp and kind[v] != "gpu":
                    comp[v] = root
                    stack.append(v)
    return comp


def _disconnected(spec: TopologySpec, source: str, a: int, b: int) -> None:
    nd, fb = spec.node, spec.fabric
    raise SpecError(
        f"{source}: gpu {a} has no route to gpu {b} without passing through another GPU "
        f"(nodes = {spec.nodes}, [node] gpus = {nd.gpus}, nvswitch = {str(nd.nvswitch).lower()}, "
        f"nics = {nd.nics}, [fabric] kind = {fb.kind!r}); add NICs and a [fabric] table, or an "
        f"NVSwitch")
