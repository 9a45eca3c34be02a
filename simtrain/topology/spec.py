"""Reading a topology table: strict checks, defaults, and the fabric's capacity.

:func:`parse_spec` checks a TOML table strictly and resolves its defaults into a
:class:`TopologySpec` (SI units); the file format is documented in
:mod:`simtrain.topology.cluster` and ``topologies/README.md``, the graph built from it in
:mod:`simtrain.topology.build`.

Achievable bandwidth. A link's line rate is what the datasheet gives; what a collective reaches is
less (protocol headers, flags, flow control). Each link kind has an efficiency, the fraction of
the line rate NCCL reaches on it, measured and cited here; the graph carries both
(``bandwidth_Bps`` the line rate, ``capacity_Bps`` the achievable rate):

* NVLink, ``[node] nvlink_efficiency``: H100 NVLink 4 reaches ~370 GB/s of its 450 GB/s line rate
  in ring collectives, "with the protocol overhead (~20%)" (NCCL maintainer, NVIDIA/nccl-tests
  issue 212; NVIDIA/nccl issue 1455 measures 365-370 GB/s ring busbw on 2 to 8 H100s):
  370 / 450 = 0.822, the default. A100 NVLink 3: 232.5 GB/s ring busbw on 8 GPUs of 300
  (NVIDIA/nccl-tests issue 175): 0.775, set in the A100 preset.
* NVLink SHARP, ``[node] nvls_efficiency``: the fraction of the NVLink line rate that the
  multimem traffic of an NVLS all-reduce reaches. NVIDIA/nccl issue 1455 measures NVLS algbw
  258, 265, 270 and 273 GB/s on 5 to 8 H100s; each GPU moves ``(n+1)/n`` of the buffer each way
  (:func:`simtrain.network.trees.nvls_phases`), so 273 x 9/8 = 307 GB/s per GPU:
  307 / 450 = 0.683, the default (the same figure predicts 5 to 7 GPUs within 3%).
* NICs and fabric links, ``[fabric] nic_efficiency``: "24 GB/s is the peak performance per 200G
  NIC" (NCCL maintainer, NVIDIA/nccl-tests issue 119) and "around 48 GB/s from each CX7 NIC at
  400 Gbps" (NVIDIA/nccl-tests issue 319; 46-48 GB/s in issue 290): 24/25 = 48/50 = 0.96.
* PCIe between a GPU and its NIC keeps its line rate: it is faster than the NIC it feeds in every
  preset, so the NIC's efficiency already bounds that path.

Fabric capacity. A fat-tree leaf holds ``nodes_per_leaf`` nodes; the last leaf (and with three
tiers the last pod) may be partly filled, so every node count builds. With ``switch_ports`` (the
switches' radix) the fabric has a capacity: a spine (a core with three tiers) joins at most
``switch_ports / ports per leaf (pod)`` leaves (pods); more nodes are an error naming it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simtrain.errors import SpecError
from simtrain.specs.gpu import GpuSpec, get_gpu, gpu_from_table
from simtrain.specs.power import CostSpec, PowerSpec, cost_from_table, power_from_table
from simtrain.specs.strict import Table, check_value
from simtrain.units import GB, GBps_to_Bps, gbps_to_Bps, us_to_s

FABRIC_KINDS = ("fat-tree", "rail-optimized", "none")

# Defaults (documented in topologies/README.md; efficiencies in the module docstring).
DEFAULT_PCIE_GBPS = 64.0  # PCIe 5.0 x16: 32 GT/s x 16 lanes x 128/130 / 8 = 63 GB/s per direction
DEFAULT_NVLINK_LATENCY_US = 1.0  # assumed order of magnitude of a GPU -> NVSwitch -> GPU hop
DEFAULT_NIC_LATENCY_US = 0.5  # assumed, per NIC crossing (PCIe + NIC pipeline)
DEFAULT_SWITCH_LATENCY_US = 0.13  # NVIDIA Quantum QM8700 datasheet: 130 ns port-to-port
DEFAULT_LINK_LATENCY_US = 0.05  # about 10 m of fibre at 5 ns/m
DEFAULT_NVLINK_EFFICIENCY = 0.822  # 370 / 450: H100 ring busbw / line rate (nccl-tests issue 212)
DEFAULT_NVLS_EFFICIENCY = 0.683  # 307 / 450: H100 NVLS per-GPU rate / line rate (nccl issue 1455)
DEFAULT_NIC_EFFICIENCY = 0.96  # 24 of 25 GB/s per HDR, 48 of 50 per NDR NIC (nccl-tests 119, 319)
# Ranges: three orders of magnitude beyond today's fastest link (NVLink 5, 900 GB/s per direction,
# NVIDIA GB200 NVL72 datasheet) and slowest hop (~1 ms), so a value outside them is a typo, and
# sums over a whole fabric stay far from float overflow.
MAX_BANDWIDTH_GBPS = 1e6  # per link and direction, GB/s (or Gb/s for nic_gbps)
MAX_LATENCY_US = 1e6  # per hop: one second
MAX_OVERSUBSCRIPTION = 1e6


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
    nvlink_efficiency: float = DEFAULT_NVLINK_EFFICIENCY
    nvls: bool = False  # NVLink SHARP (NVSwitch 3 and later): in-switch all-reduce
    nvls_efficiency: float = DEFAULT_NVLS_EFFICIENCY


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
    nic_efficiency: float = DEFAULT_NIC_EFFICIENCY
    switch_ports: int | None = None  # the switches' radix; None: the fabric grows as needed


@dataclass(frozen=True)
class TopologySpec:
    name: str
    description: str
    gpu: GpuSpec
    nodes: int
    node: NodeSpec
    fabric: FabricSpec
    power: PowerSpec = PowerSpec()  # [power]: hosts, NICs, switches, PUE (simtrain.specs.power)
    cost: CostSpec = CostSpec()  # [cost]: price of a GPU-hour (simtrain.specs.power)

    @property
    def rails(self) -> int:
        """Leaves per group of ``nodes_per_leaf`` nodes: one per NIC when rail-optimized."""
        return self.node.nics if self.fabric.kind == "rail-optimized" else 1

    @property
    def num_leaves(self) -> int:
        fb = self.fabric
        if fb.kind == "none":
            return 0
        return -(-self.nodes // fb.nodes_per_leaf) * self.rails

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
    power = power_from_table(top.sub("power", default_empty=True))
    cost = cost_from_table(top.sub("cost", default_empty=True))
    top.done()
    spec = TopologySpec(name, description, gpu_spec, nodes if nodes is not None else file_nodes,
                        node, fabric, power, cost)
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


def _fraction(t: Table, key: str, default: float) -> float:
    """An efficiency: a number in (0, 1]."""
    value = t.get(key, float, default, positive=True)
    if value > 1:
        raise SpecError(f"{t.where}: {key} = {value!r}: must be <= 1 (a fraction of the line rate)")
    return value


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
        oversubscription=t.get("oversubscription", float, 1.0, min_value=1.0, max_value=MAX_OVERSUBSCRIPTION),
        switch_latency_s=us_to_s(t.get("switch_latency_us", float, DEFAULT_SWITCH_LATENCY_US,
                                       min_value=0.0, max_value=MAX_LATENCY_US)),
        link_latency_s=us_to_s(t.get("link_latency_us", float, DEFAULT_LINK_LATENCY_US,
                                     min_value=0.0, max_value=MAX_LATENCY_US)),
        nic_efficiency=_fraction(t, "nic_efficiency", DEFAULT_NIC_EFFICIENCY),
        switch_ports=t.get("switch_ports", int, None, min_value=2),
    )
    three = ("leaves_per_pod", "cores", "core_oversubscription")
    if tiers == 3:
        fb["leaves_per_pod"] = t.get("leaves_per_pod", int, min_value=1)
        fb["cores"] = t.get("cores", int, min_value=1)
        fb["core_oversubscription"] = t.get("core_oversubscription", float, 1.0, min_value=1.0,
                                            max_value=MAX_OVERSUBSCRIPTION)
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


def _only_with_nvswitch(t: Table, keys: tuple[str, ...]) -> None:
    for key in keys:
        if t.has(key):
            raise SpecError(f"{t.where}: {key} = {t.data[key]!r}: only valid with nvswitch = true")
        t.get(key, object, None)


def _parse_node(t: Table, gpu: GpuSpec, fabric_kind: str) -> NodeSpec:
    gpus = t.get("gpus", int, min_value=1)
    nvswitch = t.get("nvswitch", bool, True)
    nvl: dict[str, Any] = {}
    if nvswitch:
        nvlink_Bps = GBps_to_Bps(t.get("nvlink_GBps", float, gpu.nvlink_Bps / GB, positive=True,
                                       max_value=MAX_BANDWIDTH_GBPS))
        nvlink_lat = t.get("nvlink_latency_us", float, DEFAULT_NVLINK_LATENCY_US, min_value=0.0,
                           max_value=MAX_LATENCY_US)
        nvl = dict(nvlink_efficiency=_fraction(t, "nvlink_efficiency", DEFAULT_NVLINK_EFFICIENCY),
                   nvls=t.get("nvls", bool, False),
                   nvls_efficiency=_fraction(t, "nvls_efficiency", DEFAULT_NVLS_EFFICIENCY))
    else:
        _only_with_nvswitch(t, ("nvlink_GBps", "nvlink_latency_us", "nvlink_efficiency", "nvls",
                                "nvls_efficiency"))
        nvlink_Bps, nvlink_lat = 0.0, 0.0
    nics = t.get("nics", int, 0 if fabric_kind == "none" else gpus, min_value=0)
    if nics and (nics > gpus or gpus % nics):
        raise SpecError(f"{t.where}: nics = {nics}: must divide gpus = {gpus} (each NIC serves "
                        f"gpus / nics GPUs over PCIe)")
    if nics:
        nic_Bps = gbps_to_Bps(t.get("nic_gbps", float, positive=True, max_value=MAX_BANDWIDTH_GBPS))
        pcie_Bps = GBps_to_Bps(t.get("pcie_GBps", float, DEFAULT_PCIE_GBPS, positive=True,
                                     max_value=MAX_BANDWIDTH_GBPS))
        nic_lat = t.get("nic_latency_us", float, DEFAULT_NIC_LATENCY_US, min_value=0.0, max_value=MAX_LATENCY_US)
    else:
        for key in ("nic_gbps", "pcie_GBps", "nic_latency_us"):
            t.get(key, float, None, positive=key != "nic_latency_us", min_value=0.0)
        nic_Bps = pcie_Bps = nic_lat = 0.0
    t.done()
    return NodeSpec(gpus, nvswitch, nvlink_Bps, us_to_s(nvlink_lat), nics, nic_Bps, pcie_Bps,
                    us_to_s(nic_lat), **nvl)


def _check_fit(spec: TopologySpec, source: str) -> None:
    fb = spec.fabric
    if fb.kind == "none":
        return
    if spec.node.nics == 0:
        raise SpecError(f"{source} [node]: nics = 0: a [fabric] of kind {fb.kind!r} needs NICs")
    if fb.tiers == 3 and fb.kind == "rail-optimized" and fb.leaves_per_pod % spec.node.nics:
        raise SpecError(f"{source} [fabric]: leaves_per_pod = {fb.leaves_per_pod}: must be a "
                        f"multiple of the {spec.node.nics} rails so that a pod holds whole node groups")
    if fb.switch_ports is None:
        return
    most, why = capacity(spec, source)
    if spec.nodes > most:
        raise SpecError(f"{source}: nodes = {spec.nodes}: exceeds the fabric's capacity of {most} "
                        f"nodes ([fabric] switch_ports = {fb.switch_ports}: {why})")


def _ports(down: int, oversubscription: float) -> int:
    """Uplink ports of a switch with ``down`` downlinks at ``oversubscription`` : 1."""
    return max(1, math.ceil(down / oversubscription))


def capacity(spec: TopologySpec, source: str) -> tuple[int, str]:
    """(the most nodes the fabric holds, why) for switches of ``[fabric] switch_ports`` ports:
    a leaf's downlinks plus uplinks must fit, a spine joins ``ports // (uplinks per spine of one
    leaf)`` leaves; with three tiers a spine's links must fit and a core joins ``ports // (links
    per core of one pod)`` pods. SpecError when a leaf or a pod spine does not fit its ports."""
    fb, nd = spec.fabric, spec.node
    ports = int(fb.switch_ports or 0)
    down = fb.nodes_per_leaf * (1 if fb.kind == "rail-optimized" else nd.nics)
    up = _ports(down, fb.oversubscription)
    if down + up > ports:
        raise SpecError(f"{source} [fabric]: switch_ports = {ports}: a leaf needs {down} downlinks "
                        f"and {up} uplinks")
    per_spine = -(-up // fb.spines)
    leaves = ports // per_spine
    if fb.tiers == 2:
        return (leaves // spec.rails * fb.nodes_per_leaf,
                f"a spine joins at most {leaves} leaves of {per_spine} uplinks each")
    spine_down = fb.leaves_per_pod * per_spine
    spine_up = _ports(spine_down, fb.core_oversubscription)
    if spine_down + spine_up > ports:
        raise SpecError(f"{source} [fabric]: switch_ports = {ports}: a pod spine needs {spine_down} "
                        f"downlinks and {spine_up} uplinks")
    per_core = -(-spine_up // (fb.cores // fb.spines))
    pods = ports // per_core
    return (pods * fb.leaves_per_pod // spec.rails * fb.nodes_per_leaf,
            f"a core joins at most {pods} pods of {fb.leaves_per_pod} leaves")
