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
from dataclasses import dataclass

from simtrain.errors import SpecError

PROTOCOLS = ("LL", "LL128", "Simple")

#: ``baseLat`` (us) by algorithm family, per protocol LL, LL128, Simple.
BASE_LATENCY_US = {"ring": (6.6, 14.0, 8.4), "tree": (6.8, 14.0, 0.0), "nvls": (0.0, 0.0, 0.0),
                   "nvls_tree": (0.0, 0.0, 0.0)}
#: ``hwLat`` (us) per step by link kind and algorithm family, per protocol LL, LL128, Simple.
STEP_LATENCY_US = {
    "nvlink": {"ring": (0.6, 1.9, 3.4), "tree": (0.6, 1.25, 28.0), "nvls": (0.0, 0.0, 23.0),
               "nvls_tree": (0.0, 0.0, 23.0)},
    "pci": {"ring": (1.0, 2.5, 5.7), "tree": (1.0, 1.9, 28.0), "nvls": (0.0, 0.0, 0.0),
            "nvls_tree": (0.0, 0.0, 0.0)},
    "net": {"ring": (2.7, 4.0, 14.0), "tree": (5.0, 8.5, 28.0), "nvls": (0.0, 0.0, 18.0),
            "nvls_tree": (0.0, 0.0, 14.0)},
}
NET_OVERHEAD_US = 1.0  # getNetOverhead: network post overhead on x86 (Intel; 2 on AMD)
#: GPU generation -> row of NCCL's per-channel tables (Volta 0, Ampere 1, Hopper 2; Blackwell: Hopper's,
#: NCCL 2.19 predates it).
ARCH_ROW = {"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 2}
#: ``perChMaxTreeBws`` and ``perChMaxTreeLL128Bws`` (GB/s per channel) by row, for 1, 2, > 2 nodes.
TREE_CHANNEL_GBPS = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0))
TREE_LL128_CHANNEL_GBPS = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0))
LL_MAX_GBPS = (39.0, 39.0, 20.4)  # ``llMaxBws`` across nodes on x86 Intel hosts, for 1, 2, > 2 nodes
#: ``treeCorrectionFactor`` per protocol, by log2(bytes / 64) from 0 (64 B) to 22 (256 MiB).
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}


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


def protocols(family: str, shape: GroupShape) -> tuple[str, ...]:
    """The protocols NCCL may use: NVLS and NVLS tree only ``Simple``; ``LL128`` only where NVLink
    joins a node's GPUs (NCCL enables it by default only there)."""
    if family in ("nvls", "nvls_tree"):
        return ("Simple",)
    return PROTOCOLS if shape.nvlink else ("LL", "Simple")


def bandwidth_factor(family: str, op: str, proto: str, shape: GroupShape, nbytes: float) -> float:
    """The fraction of the links' achievable bandwidth ``family`` reaches with ``proto``."""
    p = PROTOCOLS.index(proto)
    if family == "ring":
        if proto == "LL":
            return 1 / 4 if shape.nodes > 1 or op == "all_reduce" else 1 / 3
        return (0.92 if shape.ppn >= 2 else 0.7) if proto == "LL128" else 1.0
    if family == "tree":
        factor = 0.92 * (1 / 3.8, 120 / 128 if shape.nodes > 1 else 7 / 9, 1.0)[p]
        log = int(math.log2(max(nbytes, 64) / 64))
        return factor * (TREE_CORRECTION[proto][log] if log < 23 else 1.0)
    return 1.0


def tree_cap_Bps(proto: str, shape: GroupShape) -> float:
    """The most algorithm bandwidth NCCL's tree reaches with ``proto`` (bytes/s): half its bus
    bandwidth cap, channels x the per-channel rate (``LL``: ``llMaxBws``, in total)."""
    nodes = min(shape.nodes, 3) - 1
    if proto == "LL":
        bus = LL_MAX_GBPS[nodes]
    else:
        table = TREE_LL128_CHANNEL_GBPS if proto == "LL128" else TREE_CHANNEL_GBPS
        bus = shape.channels * table[arch_row(shape.arch)][nodes]
    return 0.5 * bus * 1e9


def arch_row(arch: str) -> int:
    """The row of NCCL's per-channel tables for GPU generation ``arch`` (:data:`ARCH_ROW`); an
    architecture without one is a one-line :class:`SpecError` naming the table to extend."""
    row = ARCH_ROW.get(arch)
    if row is None:
        raise SpecError(f"gpu architecture {arch!r} has no row in NCCL's tuning tables "
                        f"(simtrain.network.nccl_protocols.ARCH_ROW, rows for: {', '.join(ARCH_ROW)}); "
                        f"add one (Volta 0, Ampere 1, Hopper 2)")
    return row


def latency_s(family: str, op: str, proto: str, shape: GroupShape) -> float:
    """The latency NCCL's tuning model predicts for ``family`` running ``op`` with ``proto``."""
    p = PROTOCOLS.index(proto)
    intra = STEP_LATENCY_US["nvlink" if shape.nvlink else "pci"][family][p]
    inter = STEP_LATENCY_US["net"][family][p] + shape.net_latency_s * 1e6 * (2 if proto == "Simple" else 1)
    multi = shape.nodes > 1
    if multi and proto == "LL":
        intra *= 1.8
    base = BASE_LATENCY_US[family][p]
    if family == "ring":
        n = shape.ranks
        steps = 2 * (n - 1) if op == "all_reduce" else n - 1
        net_steps = min(steps, (2 * shape.nodes if op == "all_reduce" else shape.nodes - 1) if multi else 0)
        if multi:
            intra = max(intra, NET_OVERHEAD_US * (3 if proto == "Simple" else 1))
        us = base + (steps - net_steps) * intra + net_steps * inter
    elif family == "tree":
        us = base + 2 * ((shape.ppn - 1) * intra + int(math.log2(shape.nodes)) * inter)
    elif family == "nvls":
        us = intra + (inter if multi else 0.0)
    else:
        us = base + intra + 2 * int(math.log2(shape.nodes)) * inter
    return us * 1e-6
