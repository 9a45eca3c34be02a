"""Reading a topology table and building its graph; the file format is documented in
:mod:`simtrain.topology.cluster` and ``topologies/README.md``.

Two steps: :func:`parse_spec` checks a TOML table strictly and resolves defaults into a
:class:`TopologySpec` (SI units), :func:`build_graph` turns that into a ``networkx.DiGraph`` with
two directed edges per physical link, and :func:`check_graph` proves every GPU can reach every other
one without passing through a third GPU.

Fabric rules (see the module docstring of :mod:`simtrain.topology.cluster` for the full text):

* A leaf's downlink capacity is the sum of its NIC ports (its *design* size, ``nodes_per_leaf``
  full nodes, even when fewer nodes are attached); its uplink capacity is downlink /
  ``oversubscription``, split evenly over one aggregated link to each spine. This is the usual
  definition of a leaf's oversubscription ratio in folded-Clos / fat-tree fabrics (Leiserson,
  "Fat-trees", IEEE Trans. Computers 1985; Al-Fares et al., SIGCOMM 2008).
* Three tiers follow Al-Fares et al., "A Scalable, Commodity Data Center Network Architecture",
  SIGCOMM 2008: leaves grouped in pods with their own spines ("aggregation" switches); core
  switch ``c`` connects to spine ``c % spines`` of every pod, so ``cores`` must be a multiple of
  ``spines``. A spine's uplink capacity is its downlink capacity / ``core_oversubscription``.
* Rail-optimized (NVIDIA DGX SuperPOD reference architecture): nodes are grouped ``nodes_per_leaf``
  at a time; in each group NIC ``r`` of every node goes to the group's rail leaf ``r``. Rail
  leaves join shared spines with the same oversubscription rule, so cross-rail traffic goes
  leaf -> spine -> leaf (GPUs never forward, unlike NCCL's PXN).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx

from simtrain.errors import SpecError
from simtrain.specs.gpu import GpuSpec, get_gpu, gpu_from_table
from simtrain.specs.strict import Table, check_value
from simtrain.units import GB, GBps_to_Bps, gbps_to_Bps, us_to_s

FABRIC_KINDS = ("fat-tree", "rail-optimized", "none")

# Defaults (documented in topologies/README.md).
DEFAULT_PCIE_GBPS = 64.0  # PCIe 5.0 x16: 32 GT/s x 16 lanes x 128/130 / 8 = 63 GB/s per direction
DEFAULT_NVLINK_LATENCY_US = 1.0  # assumed order of magnitude of a GPU -> NVSwitch -> GPU hop
DEFAULT_NIC_LATENCY_US = 0.5  # assumed, per NIC crossing (PCIe + NIC pipeline)
DEFAULT_SWITCH_LATENCY_US = 0.13  # NVIDIA Quantum QM8700 datasheet: 130 ns port-to-port
DEFAULT_LINK_LATENCY_US = 0.05  # about 10 m of fibre at 5 ns/m


@dataclass(frozen=True)
class NodeSpec:
    gpus: int
    nvswitch: bool
    nvlink_Bps: float
    nvlink_latency_s: float
    nics: int
    nic_Bps: float
    pcie_Bps: float
    nic_latency_s: float


@dataclass(frozen=True)
class FabricSpec:
    kind: str
    tiers: int = 0
    nodes_per_leaf: int = 0
    spines: int = 0
    oversubscription: float = 1.0
    leaves_per_pod: int = 0
    cores: int = 0
    core_oversubscription: float = 1.0
    switch_latency_s: float = 0.0
    link_latency_s: float = 0.0


@dataclass(frozen=True)
class TopologySpec:
    name: str
    description: str
    gpu: GpuSpec
    nodes: int
    node: NodeSpec
    fabric: FabricSpec

    @property
    def num_leaves(self) -> int:
        fb = self.fabric
        if fb.kind == "none":
            return 0
        groups = -(-self.nodes // fb.nodes_per_leaf)
        return groups * (self.node.nics if fb.kind == "rail-optimized" else 1)

    @property
    def num_pods(self) -> int:
        if self.fabric.tiers != 3:
            return 0
        return -(-self.num_leaves // self.fabric.leaves_per_pod)


def parse_spec(data: dict[str, Any], source: str, nodes: int | None = None,
               gpu: GpuSpec | None = None) -> TopologySpec:
    """Check a topology table strictly and resolve its defaults (SI units)."""
    top = Table(data, source)
    name = top.get("name", str, Path(source).stem)
    description = top.get("description", str, "")
    gpu_spec = _parse_gpu(top, source, gpu)
    file_nodes = top.get("nodes", int, 1, min_value=1)
    if nodes is not None:
        check_value(f"{source}: nodes (override)", nodes, int, min_value=1)
    fabric = _parse_fabric(top.sub("fabric") if top.has("fabric") else None, source)
    node = _parse_node(top.sub("node"), gpu_spec, fabric.kind)
    top.done()
    spec = TopologySpec(name, description, gpu_spec, nodes if nodes is not None else file_nodes,
                        node, fabric)
    _check_fit(spec, source)
    return spec


def _parse_gpu(top: Table, source: str, override: GpuSpec | None) -> GpuSpec:
    if not top.has("gpu"):
        top.get("gpu", str, None)
        if override is None:
            raise SpecError(f"{source}: missing key 'gpu' (a GPU preset name or a [gpu] table)")
        return override
    raw = top.data["gpu"]
    if isinstance(raw, dict):
        spec = gpu_from_table(top.sub("gpu"))
    else:
        spec = get_gpu(top.get("gpu", str))
    return override if override is not None else spec


def _parse_fabric(t: Table | None, source: str) -> FabricSpec:
    if t is None:
        return FabricSpec("none")
    kind = t.get("kind", str, choices=FABRIC_KINDS)
    if kind == "none":
        t.done()
        return FabricSpec("none")
    tiers = t.get("tiers", int, 2, choices=(2, 3))
    fb: dict[str, Any] = dict(
        kind=kind, tiers=tiers,
        nodes_per_leaf=t.get("nodes_per_leaf", int, min_value=1),
        spines=t.get("spines", int, min_value=1),
        oversubscription=t.get("oversubscription", float, 1.0, min_value=1.0),
        switch_latency_s=us_to_s(t.get("switch_latency_us", float, DEFAULT_SWITCH_LATENCY_US,
                                       min_value=0.0)),
        link_latency_s=us_to_s(t.get("link_latency_us", float, DEFAULT_LINK_LATENCY_US,
                                     min_value=0.0)),
    )
    three = ("leaves_per_pod", "cores", "core_oversubscription")
    if tiers == 3:
        fb["leaves_per_pod"] = t.get("leaves_per_pod", int, min_value=1)
        fb["cores"] = t.get("cores", int, min_value=1)
        fb["core_oversubscription"] = t.get("core_oversubscription", float, 1.0, min_value=1.0)
        if fb["cores"] % fb["spines"]:
            raise SpecError(f"{t.where}: cores = {fb['cores']}: must be a multiple of spines = "
                            f"{fb['spines']} (core c joins spine c % spines of every pod)")
    else:
        for key in three:
            if t.has(key):
                raise SpecError(f"{t.where}: {key} = {t.data[key]!r}: only valid with tiers = 3")
            t.get(key, object, None)
    t.done()
    return FabricSpec(**fb)


def _parse_node(t: Table, gpu: GpuSpec, fabric_kind: str) -> NodeSpec:
    gpus = t.get("gpus", int, min_value=1)
    nvswitch = t.get("nvswitch", bool, True)
    if nvswitch:
        nvlink_Bps = GBps_to_Bps(t.get("nvlink_GBps", float, gpu.nvlink_Bps / GB, positive=True))
        nvlink_lat = t.get("nvlink_latency_us", float, DEFAULT_NVLINK_LATENCY_US, min_value=0.0)
    else:
        for key in ("nvlink_GBps", "nvlink_latency_us"):
            if t.has(key):
                raise SpecError(f"{t.where}: {key} = {t.data[key]!r}: only valid with "
                                f"nvswitch = true")
            t.get(key, object, None)
        nvlink_Bps, nvlink_lat = 0.0, 0.0
    nics = t.get("nics", int, 0 if fabric_kind == "none" else gpus, min_value=0)
    if nics and (nics > gpus or gpus % nics):
        raise SpecError(f"{t.where}: nics = {nics}: must divide gpus = {gpus} (each NIC serves "
                        f"gpus / nics GPUs over PCIe)")
    if nics:
        nic_Bps = gbps_to_Bps(t.get("nic_gbps", float, positive=True))
        pcie_Bps = GBps_to_Bps(t.get("pcie_GBps", float, DEFAULT_PCIE_GBPS, positive=True))
        nic_lat = t.get("nic_latency_us", float, DEFAULT_NIC_LATENCY_US, min_value=0.0)
    else:
        for key in ("nic_gbps", "pcie_GBps", "nic_latency_us"):
            t.get(key, float, None, positive=key != "nic_latency_us", min_value=0.0)
        nic_Bps = pcie_Bps = nic_lat = 0.0
    t.done()
    return NodeSpec(gpus, nvswitch, nvlink_Bps, us_to_s(nvlink_lat), nics, nic_Bps, pcie_Bps,
                    us_to_s(nic_lat))


def _check_fit(spec: TopologySpec, source: str) -> None:
    fb, n = spec.fabric, spec.nodes
    if fb.kind == "none":
        return
    if spec.node.nics == 0:
        raise SpecError(f"{source} [node]: nics = 0: a [fabric] of kind {fb.kind!r} needs NICs")
    npl = fb.nodes_per_leaf
    if n > npl and n % npl:
        raise SpecError(f"{source}: nodes = {n}: does not fit the fabric: [fabric] nodes_per_leaf"
                        f" = {npl} needs nodes <= {npl} or a multiple of {npl}")
    if fb.tiers == 3:
        lpp, leaves = fb.leaves_per_pod, spec.num_leaves
        if fb.kind == "rail-optimized" and lpp % spec.node.nics:
            raise SpecError(f"{source} [fabric]: leaves_per_pod = {lpp}: must be a multiple of the"
                            f" {spec.node.nics} rails so that a pod holds whole node groups")
        if leaves > lpp and leaves % lpp:
            per_pod = lpp * npl // (spec.node.nics if fb.kind == "rail-optimized" else 1)
            raise SpecError(f"{source}: nodes = {n}: does not fit the fabric: {leaves} leaves do "
                            f"not fill pods of leaves_per_pod = {lpp}; use nodes <= {per_pod} or a"
                            f" multiple of {per_pod}")


def build_graph(spec: TopologySpec) -> nx.DiGraph:
    """The cluster graph: typed nodes, two directed edges per physical link."""
    g = nx.DiGraph(name=spec.name)
    nd = spec.node

    def link(u: str, v: str, bandwidth: float, latency: float, tier: str) -> None:
        g.add_edge(u, v, bandwidth_Bps=float(bandwidth), latency_s=float(latency), tier=tier)
        g.add_edge(v, u, bandwidth_Bps=float(bandwidth), latency_s=float(latency), tier=tier)

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
    rest = g.subgraph(n for n, d in g.nodes(data=True) if d["kind"] != "gpu").to_undirected()
    comp = {n: i for i, c in enumerate(nx.connected_components(rest)) for n in c}
    signature: dict[frozenset[int], int] = {}  # component set -> first GPU with it
    for index, name in gpus:
        sig = frozenset(comp[m] for m in g.successors(name))
        if not sig:  # an isolated GPU
            other = gpus[1][0] if index == gpus[0][0] else gpus[0][0]
            _disconnected(spec, source, min(index, other), max(index, other))
        signature.setdefault(sig, index)
    sigs = sorted(signature.items(), key=lambda kv: kv[1])
    for i, (sa, a) in enumerate(sigs):
        for sb, b in sigs[i + 1:]:
            if not sa & sb:
                _disconnected(spec, source, a, b)


def _disconnected(spec: TopologySpec, source: str, a: int, b: int) -> None:
    nd, fb = spec.node, spec.fabric
    raise SpecError(
        f"{source}: gpu {a} has no route to gpu {b} without passing through another GPU "
        f"(nodes = {spec.nodes}, [node] gpus = {nd.gpus}, nvswitch = {str(nd.nvswitch).lower()}, "
        f"nics = {nd.nics}, [fabric] kind = {fb.kind!r}); add NICs and a [fabric] table, or an "
        f"NVSwitch")
