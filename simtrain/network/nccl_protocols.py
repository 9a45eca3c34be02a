"""NCCL's protocols and latency model, as its tuner predicts a collective's time.

The numbers and formulas are those of NCCL's tuning model (``src/graph/tuning.cc``, NCCL 2.19,
``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``); the bandwidth a collective reaches comes from
the cluster graph instead (:mod:`simtrain.network.phases`), so only NCCL's *relative* protocol and
algorithm factors are kept here:

* Protocols. ``LL`` sends 8-byte lines of 4 data bytes and a flag (lowest latency, NCCL's bandwidth
  factor 1/4, 1/3 inside one node for reduce-scatter and all-gather); ``LL128`` 128-byte lines of
  120 data bytes (factor 0.92, 0.7 with one GPU per node; only where NVLink joins the GPUs);
  ``Simple`` plain copies with a memory fence per chunk (factor 1, the highest latency).
* Tree: factor 0.92 on top of the protocol's (LL 1/3.8, LL128 120/128 across nodes), and NCCL's
  measured correction for medium sizes (``treeCorrectionFactor``, 64 B to 256 MiB).
* Latency, microseconds: a base per algorithm and protocol (``baseLat``) plus one hardware latency
  per step (``hwLat``) of the link kind it crosses (NVLink, PCI, network). A ring of ``n`` ranks
  takes ``2(n-1)`` steps for all-reduce, ``n-1`` for reduce-scatter and all-gather, of which
  ``2 nodes`` (``nodes - 1``) cross the network; each network step also pays the fabric's own
  latency (NCCL's ``latencyInter``; here the cables and switches of the route, twice for
  ``Simple`` for its flush), and an intra-node step at least the network's post overhead (1 us,
  x3 for ``Simple``) once the ring leaves the node. Tree: ``2 ((ppn-1) intra + log2(nodes) inter)``;
  NVLS: one intra-node latency (+ one network latency across nodes); NVLS tree: ``intra + 2
  log2(nodes) inter``. NCCL's tuner also multiplies a multi-node ``Simple`` ring all-reduce's
  latency by 1.4 ("plateau effect of ring") to steer its choice; measurements show no such time
  (24 A100s on 3 nodes run a 128 MB all-reduce 6 us above its bandwidth time, NVIDIA/nccl-tests
  issue 119), so it is left out.

Per-channel caps. NCCL's model caps a tree's bus bandwidth at its channels times a measured
per-channel rate (``perChMaxTreeBws``, ``perChMaxTreeLL128Bws`` by GPU generation and node count;
``llMaxBws`` for LL, the x86 Intel host row across nodes): a tree's algorithm bandwidth is at most
half of that (:func:`tree_cap_Bps`). They are what keep a 2-node tree on A100s with 4 HDR NICs at
~90 GB/s busbw (NVIDIA/nccl-tests issues 100 and 175) although its links could carry more. The
ring's per-channel caps are left out: they bind only for the small messages LL and LL128 carry,
where latency dominates, and NCCL's ring channel count inside a node (16 to 24) is not modelled.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from simtrain.errors import SpecError, unknown_name

PROTOCOLS = ("LL", "LL128", "Simple")
#: A latency or rate per protocol LL, LL128, Simple.
PerProtocol = tuple[float, float, float]
NET_OVERHEAD_US = 1.0  # getNetOverhead: network post overhead on x86 (Intel; 2 on AMD)
LL_MAX_GBPS = (39.0, 39.0, 20.4)  # ``llMaxBws`` across nodes on x86 Intel hosts, for 1, 2, > 2 nodes
#: ``treeCorrectionFactor`` per protocol, by log2(bytes / 64) from 0 (64 B) to 22 (256 MiB).
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}


@dataclass(frozen=True)
class NcclArch:
    """NCCL's per-channel tree rates for one GPU generation (GB/s per channel for 1, 2 and more
    than 2 nodes): ``perChMaxTreeBws`` and ``perChMaxTreeLL128Bws`` of ``tuning.cc``."""

    name: str
    tree_channel_GBps: PerProtocol
    tree_ll128_channel_GBps: PerProtocol


#: Each GPU generation's row (NCCL 2.19 has Volta, Ampere and Hopper; Blackwell takes Hopper's,
#: NCCL 2.19 predates it).
NCCL_ARCHS: Mapping[str, NcclArch] = MappingProxyType({a.name: a for a in (
    NcclArch("volta", (26.5, 18.5, 10.0), (20.0, 20.0, 20.0)),
    NcclArch("ampere", (24.0, 23.6, 17.8), (20.0, 20.0, 20.0)),
    NcclArch("hopper", (38.7, 41.4, 36.0), (36.7, 36.7, 29.0)),
    NcclArch("blackwell", (38.7, 41.4, 36.0), (36.7, 36.7, 29.0)),
)})


@dataclass(frozen=True)
class GroupShape:
    """What NCCL's tuning model knows of a group: ``ranks`` on ``nodes`` nodes, whether its
    nodes join their GPUs by NVLink (else PCI), the fabric latency of one inter-node step, the
    number of channels and the GPUs' generation."""

    ranks: int
    nodes: int
    nvlink: bool = True
    net_latency_s: float = 0.0
    channels: int = 1
    arch: str = "hopper"  # the GPUs' generation (simtrain.specs.arch), for NCCL's per-channel tables

    @property
    def ppn(self) -> float:
        """Ranks per node."""
        return self.ranks / self.nodes


#: (op, protocol, shape, bytes) -> the fraction of the links' bandwidth a family reaches.
Factor = Callable[[str, str, GroupShape, float], float]
#: (op, protocol, shape, base, intra, inter) -> latency in us, from one step's intra- and
#: inter-node latency.
Steps = Callable[[str, str, GroupShape, float, float, float], float]


@dataclass(frozen=True)
class LatencyFamily:
    """One family of NCCL's tuning model: ``baseLat`` and ``hwLat`` per step by link kind
    (``nvlink``, ``pci``, ``net``; microseconds, per protocol), whether it runs ``Simple`` only,
    its bandwidth factor, its latency from one step's, and whether its bus bandwidth is capped
    per channel (the tree's :func:`tree_cap_Bps`)."""

    name: str
    base_us: PerProtocol
    step_us: Mapping[str, PerProtocol]
    steps: Steps
    factor: Factor | None = None  # None: 1
    simple_only: bool = False
    channel_capped: bool = False


def _ring_factor(op: str, proto: str, shape: GroupShape, nbytes: float) -> float:
    if proto == "LL":
        return 1 / 4 if shape.nodes > 1 or op == "all_reduce" else 1 / 3
    return (0.92 if shape.ppn >= 2 else 0.7) if proto == "LL128" else 1.0


def _tree_factor(op: str, proto: str, shape: GroupShape, nbytes: float) -> float:
    factor = 0.92 * (1 / 3.8, 120 / 128 if shape.nodes > 1 else 7 / 9, 1.0)[PROTOCOLS.index(proto)]
    log = int(math.log2(max(nbytes, 64) / 64))
    return factor * (TREE_CORRECTION[proto][log] if log < 23 else 1.0)


def _ring_steps(op: str, proto: str, shape: GroupShape, base: float, intra: float, inter: float) -> float:
    n, multi = shape.ranks, shape.nodes > 1
    steps = 2 * (n - 1) if op == "all_reduce" else n - 1
    net_steps = min(steps, (2 * shape.nodes if op == "all_reduce" else shape.nodes - 1) if multi else 0)
    if multi:
        intra = max(intra, NET_OVERHEAD_US * (3 if proto == "Simple" else 1))
    return base + (steps - net_steps) * intra + net_steps * inter


def _tree_steps(op: str, proto: str, shape: GroupShape, base: float, intra: float, inter: float) -> float:
    return base + 2 * ((shape.ppn - 1) * intra + int(math.log2(shape.nodes)) * inter)


def _nvls_steps(op: str, proto: str, shape: GroupShape, base: float, intra: float, inter: float) -> float:
    return intra + (inter if shape.nodes > 1 else 0.0)


def _nvls_tree_steps(op: str, proto: str, shape: GroupShape, base: float, intra: float, inter: float) -> float:
    return base + intra + 2 * int(math.log2(shape.nodes)) * inter


#: NCCL's families (``baseLat`` and ``hwLat`` of ``tuning.cc``, by protocol LL, LL128, Simple).
FAMILIES: Mapping[str, LatencyFamily] = MappingProxyType({f.name: f for f in (
    LatencyFamily("ring", (6.6, 14.0, 8.4), {"nvlink": (0.6, 1.9, 3.4), "pci": (1.0, 2.5, 5.7),
                                             "net": (2.7, 4.0, 14.0)}, _ring_steps, _ring_factor),
    LatencyFamily("tree", (6.8, 14.0, 0.0), {"nvlink": (0.6, 1.25, 28.0), "pci": (1.0, 1.9, 28.0),
                                             "net": (5.0, 8.5, 28.0)}, _tree_steps, _tree_factor,
                  channel_capped=True),
    LatencyFamily("nvls", (0.0, 0.0, 0.0), {"nvlink": (0.0, 0.0, 23.0), "pci": (0.0, 0.0, 0.0),
                                            "net": (0.0, 0.0, 18.0)}, _nvls_steps, simple_only=True),
    LatencyFamily("nvls_tree", (0.0, 0.0, 0.0), {"nvlink": (0.0, 0.0, 23.0), "pci": (0.0, 0.0, 0.0),
                                                 "net": (0.0, 0.0, 14.0)}, _nvls_tree_steps, simple_only=True),
)})


def family_of(name: str) -> LatencyFamily:
    """The record of NCCL tuning family ``name``; one without one is a one-line error naming the
    table and the families it has."""
    found = FAMILIES.get(name)
    if found is None:
        raise unknown_name("NCCL tuning family", name, list(FAMILIES))
    return found


def protocols(family: str, shape: GroupShape) -> tuple[str, ...]:
    """The protocols NCCL may use: NVLS and NVLS tree only ``Simple``; ``LL128`` only where NVLink
    joins a node's GPUs (NCCL enables it by default only there)."""
    if family_of(family).simple_only:
        return ("Simple",)
    return PROTOCOLS if shape.nvlink else ("LL", "Simple")


def bandwidth_factor(family: str, op: str, proto: str, shape: GroupShape, nbytes: float) -> float:
    """The fraction of the links' achievable bandwidth ``family`` reaches with ``proto``."""
    factor = family_of(family).factor
    return 1.0 if factor is None else factor(op, proto, shape, nbytes)


def tree_cap_Bps(proto: str, shape: GroupShape) -> float:
    """The most algorithm bandwidth NCCL's tree reaches with ``proto`` (bytes/s): half its bus
    bandwidth cap, channels x the per-channel rate (``LL``: ``llMaxBws``, in total)."""
    nodes = min(shape.nodes, 3) - 1
    if proto == "LL":
        bus = LL_MAX_GBPS[nodes]
    else:
        row = nccl_arch(shape.arch)
        bus = shape.channels * (row.tree_ll128_channel_GBps if proto == "LL128" else row.tree_channel_GBps)[nodes]
    return 0.5 * bus * 1e9


def nccl_arch(arch: str) -> NcclArch:
    """NCCL's per-channel tables for GPU generation ``arch`` (:data:`NCCL_ARCHS`); an
    architecture without a row is a one-line :class:`SpecError` naming the table to extend."""
    row = NCCL_ARCHS.get(arch)
    if row is None:
        raise SpecError(f"gpu architecture {arch!r} has no row in NCCL's tuning tables "
                        f"(simtrain.network.nccl_protocols.NCCL_ARCHS, rows for: {', '.join(NCCL_ARCHS)}); "
                        f"add one (NCCL's tuning.cc perChMaxTreeBws and perChMaxTreeLL128Bws)")
    return row


def latency_s(family: str, op: str, proto: str, shape: GroupShape) -> float:
    """The latency NCCL's tuning model predicts for ``family`` running ``op`` with ``proto``."""
    record = family_of(family)
    p = PROTOCOLS.index(proto)
    intra = record.step_us["nvlink" if shape.nvlink else "pci"][p]
    inter = record.step_us["net"][p] + shape.net_latency_s * 1e6 * (2 if proto == "Simple" else 1)
    if shape.nodes > 1 and proto == "LL":
        intra *= 1.8
    base = record.base_us[p]
    return record.steps(op, proto, shape, base, intra, inter) * 1e-6
