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

from typing import Any

import networkx as nx

from simtrain.errors import SpecError
from simtrain.topology.spec import TopologySpec


def link_efficiencies(spec: TopologySpec) -> dict[str, float]:
    """The fraction of its line rate each link tier reaches (:mod:`simtrain.topology.spec`):
    NVLink ``nvlink_efficiency``, NIC and fabric links ``nic_efficiency``, PCIe 1."""
    nic = spec.fabric.nic_efficiency
    return {"nvlink": spec.node.nvlink_efficiency, "pcie": 1.0, "leaf": nic, "spine": nic, "core": nic}


def build_graph(spec: TopologySpec) -> nx.DiGraph:
    """The cluster graph: typed nodes, two directed edges per physical link."""
    g = nx.DiGraph(name=spec.name)
    nd = spec.node
    efficiency = link_efficiencies(spec)

    def link(u: str, v: str, bandwidth: float, latency: float, tier: str) -> None:
        attrs = dict(bandwidth_Bps=float(bandwidth), capacity_Bps=float(bandwidth) * efficiency[tier],
                     latency_s=float(latency), tier=tier)
        g.add_edge(u, v, **attrs)
        g.add_edge(v, u, **attrs)

    for n in range(spec.nodes):
        gpus = [f"gpu{n * nd.gpus + i}" for i in range(nd.gpus)]
        for i, name in enumerate(gpus):
            g.add_node(name, kind="gpu", index=n * nd.gpus + i, node=n, local=i, latency_s=0.0)
        if nd.nvswitch and nd.gpus > 1:
            sw = f"node{n}/nvswitch"
            g.add_node(sw, kind="nvswitch", node=n, latency_s=0.0)
            for name in gpus:
                link(name, sw, nd.nvlink_Bps, nd.nvlink_latency_s / 2, "nvlink")
        per_nic = nd.gpus // nd.nics if nd.nics else 0
        for k in range(nd.nics):
            nic = f"node{n}/nic{k}"
            g.add_node(nic, kind="nic", node=n, index=k, latency_s=0.0)
            for name in gpus[k * per_nic:(k + 1) * per_nic]:
                link(name, nic, nd.pcie_Bps, nd.nic_latency_s, "pcie")
    if spec.fabric.kind != "none":
        _build_fabric(g, spec, link)
    return g


def _build_fabric(g: nx.DiGraph, spec: TopologySpec, link: Any) -> None:
    fb, nd = spec.fabric, spec.node
    rail = fb.kind == "rail-optimized"
    npl, sw_lat, ln_lat = fb.nodes_per_leaf, fb.switch_latency_s, fb.link_latency_s
    ports = npl if rail else npl * nd.nics  # downlinks of a full leaf
    leaf_up = ports * nd.nic_Bps / fb.oversubscription / fb.spines  # per leaf-spine link
    for leaf in range(spec.num_leaves):
        group, r = divmod(leaf, nd.nics) if rail else (leaf, None)
        pod = leaf // fb.leaves_per_pod if fb.tiers == 3 else 0
        name = f"leaf{leaf}"
        attrs = dict(kind="leaf", index=leaf, pod=pod, latency_s=sw_lat)
        if rail:
            attrs["rail"] = r
        g.add_node(name, **attrs)
        for n in range(group * npl, min(spec.nodes, (group + 1) * npl)):
            for k in ([r] if rail else range(nd.nics)):
                link(f"node{n}/nic{k}", name, nd.nic_Bps, ln_lat, "leaf")
        for s in range(fb.spines):
            spine = f"pod{pod}/spine{s}" if fb.tiers == 3 else f"spine{s}"
            if spine not in g:
                g.add_node(spine, kind="spine", index=s, pod=pod, latency_s=sw_lat)
            link(name, spine, leaf_up, ln_lat, "spine")
    if fb.tiers == 3:
        per_spine = fb.cores // fb.spines
        spine_up = fb.leaves_per_pod * leaf_up / fb.core_oversubscription / per_spine
        for c in range(fb.cores):
            g.add_node(f"core{c}", kind="core", index=c, latency_s=sw_lat)
            for pod in range(spec.num_pods):
                link(f"pod{pod}/spine{c % fb.spines}", f"core{c}", spine_up, ln_lat, "core")


def check_graph(g: nx.DiGraph, spec: TopologySpec, source: str) -> None:
    """Every edge has bandwidth > 0 and every GPU reaches every other GPU without transiting a GPU.

    Two GPUs are connected iff a neighbour of one and a neighbour of the other lie in the same
    connected component of the graph with all GPUs removed (edges come in symmetric pairs).
    """
    for u, v, bw in g.edges(data="bandwidth_Bps"):
        if not bw > 0:
            raise SpecError(f"{source}: link {u} -> {v}: bandwidth_Bps = {bw!r}: must be > 0")
    gpus = sorted((d["index"], n) for n, d in g.nodes(data=True) if d["kind"] == "gpu")
    if len(gpus) < 2:
        return
    comp = _components(g)
    signature: dict[frozenset[str], int] = {}  # component set -> first GPU with it
    for index, name in gpus:
        sig = frozenset(comp[m] for m in g.successors(name))
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
    representative node (union-find with path halving, Tarjan and van Leeuwen, JACM 1984, over
    the edges; no copy of the graph)."""
    kind = dict(g.nodes(data="kind"))
    parent = {n: n for n, k in kind.items() if k != "gpu"}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = x = parent[parent[x]]
        return x

    for u, nbrs in g.adj.items():
        if kind[u] == "gpu":
            continue
        for v in nbrs:
            if kind[v] != "gpu":
                ru, rv = find(u), find(v)
                if ru != rv:
                    parent[ru] = rv
    return {n: find(n) for n in parent}


def _disconnected(spec: TopologySpec, source: str, a: int, b: int) -> None:
    nd, fb = spec.node, spec.fabric
    raise SpecError(
        f"{source}: gpu {a} has no route to gpu {b} without passing through another GPU "
        f"(nodes = {spec.nodes}, [node] gpus = {nd.gpus}, nvswitch = {str(nd.nvswitch).lower()}, "
        f"nics = {nd.nics}, [fabric] kind = {fb.kind!r}); add NICs and a [fabric] table, or an "
        f"NVSwitch")
