"""Collective algorithms as phases of flows, and the uncontended time of a phase.

A :class:`Phase` is flows that run at once; each builder turns one collective on one group into
phases that run one after another: ``builder(op, gpus, nbytes, router) -> list[Phase]``, empty
when there is nothing to move. Sizes follow nccl-tests (``doc/PERFORMANCE.md``): ``S`` is the
per-rank buffer of an all-reduce, the full (gathered) buffer of an all-gather or reduce-scatter,
the per-rank send buffer of an all-to-all (``S/n`` to each peer), the message of a point-to-point
send. NCCL pipelines its algorithms chunk by chunk, so a ring or a tree is one phase whose flows
all run at once (the steady state of the pipeline); hierarchical all-reduce runs three phases.
The latency of the NCCL algorithms comes from their tuning model
(:mod:`simtrain.network.nccl_protocols`); builders here set it where a phase's latency is that of its
routes (sends) or of its sub-collectives (hierarchical). Tree and NVLS builders are in
:mod:`simtrain.network.trees`; the algorithm records that use the builders in
:mod:`simtrain.network.algorithms`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from simtrain.network.channels import HopArrays, node_blocks, pxn_relay, rail_members, ring_hop_arrays, ring_hops
from simtrain.network.links import Link
from simtrain.network.nccl_protocols import GroupShape, latency_s
from simtrain.topology.cluster import Cluster
from simtrain.topology.routing.router import Router


#: One flow of a phase: the links of its route and the bytes it carries.
Flow = tuple[tuple[Link, ...], float]


@dataclass(frozen=True)
class Phase:
    """Flows that run concurrently, then ``latency_s`` (added after the last byte); the phases of a
    collective run one after another."""

    flows: tuple[Flow, ...]
    latency_s: float = 0.0
    name: str = ""

    @property
    def nbytes(self) -> float:
        return float(sum(b for _, b in self.flows))

    def scaled(self, factor: float, latency_s: float) -> "Phase":
        """The same flows carrying ``factor`` times the bytes, with ``latency_s``."""
        return Phase(tuple((links, b * factor) for links, b in self.flows), latency_s, self.name)


def group_shape(gpus: Sequence[int], router: Router, channels: int = 1) -> GroupShape:
    """The group as NCCL's tuning model sees it: ranks, nodes, NVLink inside nodes (else PCI),
    the fabric latency of an inter-node step (first GPU of the first node to the first of the
    second), ``channels``, the GPUs' generation."""
    cluster = router.cluster
    blocks = node_blocks(gpus, cluster)
    nvlink = cluster.spec is None or cluster.spec.node.nvswitch
    net = router.fabric_latency(blocks[0][0], blocks[1][0]) if len(blocks) > 1 else 0.0
    return GroupShape(len(gpus), len(blocks), nvlink, net, channels, cluster.gpu.arch)


def ring_volume(op: str, n: int, nbytes: float) -> float:
    """Bytes each rank sends around a ring: all-reduce ``2(n-1)/n S``, reduce-scatter and
    all-gather ``(n-1)/n S`` (nccl-tests' bus factors)."""
    return (2 * (n - 1) if op == "all_reduce" else n - 1) / n * nbytes


def _hop_flows(hops: Sequence[tuple[int, int, float]], volume: float, router: Router) -> list[Flow]:
    return [(router.links(a, b), volume * share) for a, b, share in hops]


def ring_phases(op: str, gpus: Sequence[int], nbytes: float, router: Router) -> list[Phase]:
    """NCCL's ring (Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
    workstations", JPDC 2009) over its channels (:func:`~simtrain.network.channels.ring_hops`):
    one phase in which every hop carries its share of the per-rank volume (:func:`ring_volume`).

    **Bandwidth-equivalent approximation:** every ring step moves ``S/n`` on every hop at once,
    so the hops carry these volumes at the same rates as the stepwise algorithm; modelling each
    step would cost ``2(n-1) x n`` flow events instead of ``n``. A hop faster than the ring's
    bottleneck finishes early (real steps wait for the slowest hop); that never changes the
    uncontended time, and under contention it hands the early hop's bandwidth to others a little
    sooner than NCCL would."""
    if len(gpus) <= 1 or nbytes <= 0:
        return []
    flows = _hop_flows(ring_hops(gpus, router), ring_volume(op, len(gpus), nbytes), router)
    return [Phase(tuple(flows), 0.0, f"ring {op}")]


def ring_unit_hops(op: str, gpus: Sequence[int], router: Router) -> HopArrays:
    """The flows of :func:`ring_phases` for one byte, as (sources, destinations, bytes)."""
    src, dst, share = ring_hop_arrays(gpus, router)
    return src, dst, ring_volume(op, len(gpus), 1.0) * share


def _block_rings(rings: Sequence[Sequence[int]], op: str, nbytes: float, router: Router,
                 name: str) -> Phase:
    """Concurrent rings (one channel each) doing ``op`` on ``nbytes`` each, as one phase, with
    NCCL's ``Simple`` ring latency of one of them."""
    flows = []
    for ring in rings:
        n = len(ring)
        flows += _hop_flows([(ring[i], ring[(i + 1) % n], 1.0) for i in range(n)],
                            ring_volume(op, n, nbytes), router)
    shape = group_shape(rings[0], router)
    return Phase(tuple(flows), latency_s("ring", op, "Simple", shape), name)


def hierarchical_phases(op: str, gpus: Sequence[int], nbytes: float, router: Router) -> list[Phase]:
    """All-reduce over ``k >= 2`` nodes with the same ``m >= 2`` GPUs on each: ring
    reduce-scatter inside each node, then ``m`` concurrent ring all-reduces of ``S/m`` across
    nodes (one per local position, so one per rail), then ring all-gather inside each node
    (NCCL's CollNet/"2D" schemes, Horovod hierarchical all-reduce; Jia et al., "Highly scalable
    deep learning training system with mixed-precision", 2018). Three phases, each with the
    ``Simple`` ring latency of its sub-collective (:mod:`simtrain.network.nccl_protocols`)."""
    if len(gpus) <= 1 or nbytes <= 0:
        return []
    blocks = node_blocks(gpus, router.cluster)
    m = len(blocks[0])
    cross = [[b[j] for b in blocks] for j in range(m)]
    return [_block_rings(blocks, "reduce_scatter", nbytes, router, "intra-node reduce-scatter"),
            _block_rings(cross, "all_reduce", nbytes / m, router, "inter-node all-reduce"),
            _block_rings(blocks, "all_gather", nbytes, router, "intra-node all-gather")]


def _send(a: int, b: int, relays: dict[tuple[int, int], int], router: Router) -> tuple[Link, ...]:
    """The links of a send from ``a`` to ``b``, relayed by PXN where it applies."""
    via = pxn_relay(a, b, relays, router)
    return router.links(a, b) if via is None else router.links(a, via) + router.links(via, b)


def direct_phases(op: str, gpus: Sequence[int], nbytes: float, router: Router) -> list[Phase]:
    """Sends posted all at once, latency = the slowest route's: NCCL's all-to-all (``n(n-1)``
    flows of ``S/n``, each GPU limited by its injection links; on a rail-optimized fabric a send
    to another rail is relayed over NVLink by the member on the destination's rail, NCCL's PXN),
    a point-to-point send (``gpus = (src, dst)``: one flow of ``S``), or the shift of context
    parallelism's ring (``ring_shift``: every rank sends ``S`` to its successor)."""
    n = len(gpus)
    if nbytes <= 0 or n <= 1 or (op == "p2p" and gpus[0] == gpus[1]):
        return []
    if op == "p2p":
        pairs, size = [(gpus[0], gpus[1])], float(nbytes)
    elif op == "ring_shift":
        pairs, size = [(gpus[i], gpus[(i + 1) % n]) for i in range(n)], float(nbytes)
    else:
        pairs, size = [(a, b) for a in gpus for b in gpus if a != b], nbytes / n
    relays = rail_members(gpus, router) if op == "all_to_all" else {}
    flows = tuple((_send(a, b, relays, router), size) for a, b in pairs)
    latency = max(router.latency(a, b) for a, b in pairs)
    return [Phase(flows, latency, "all-to-all" if op == "all_to_all" else op.replace("_", "-"))]


def phase_load(phase: Phase) -> dict[Link, float]:
    """Bytes each link carries in ``phase``."""
    load: dict[Link, float] = {}
    for links, nbytes in phase.flows:
        for link in links:
            load[link] = load.get(link, 0.0) + nbytes
    return load


def phase_time(phase: Phase, cluster: Cluster) -> float:
    """Uncontended time of one phase: the most loaded link's bytes / achievable bandwidth
    (``capacity_Bps``), plus latency (what max-min sharing reaches when the phase's flows on the
    busiest link are not held back elsewhere)."""
    capacity = cluster.capacity_Bps
    busiest = max((b / capacity[link] for link, b in phase_load(phase).items()), default=0.0)
    return busiest + phase.latency_s


def hops_time(src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, router: Router) -> float:
    """:func:`phase_time` of a phase without latency whose flows carry ``nbytes[k]`` from GPU
    ``src[k]`` to GPU ``dst[k]`` over the router's routes, bit for bit, without building a route
    per flow (:class:`~simtrain.topology.routing.link_ids.LinkIds`): each link's bytes are added flow by
    flow in order, as :func:`phase_load` adds them (``numpy.bincount`` sums in input order)."""
    ids = router.link_ids()
    links, flow = ids.route_links(src, dst)
    if not len(links):
        return 0.0
    load = np.bincount(links, weights=np.asarray(nbytes, dtype=float)[flow])
    # links no flow crosses carry 0 bytes: 0 / capacity changes no maximum of loads >= 0; the
    # latency 0.0 phase_time adds leaves it as it is
    return float((load / ids.capacity()[:len(load)]).max())
