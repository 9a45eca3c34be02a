"""NCCL-like collective algorithms as phases of flows, and the uncontended time of a phase.

A :class:`Phase` is flows that run at once; each builder turns one collective on one group into
phases that run one after another: ``builder(op, gpus, nbytes, router) -> list[Phase]``, empty
when there is nothing to move. Sizes follow nccl-tests (``doc/PERFORMANCE.md``): ``S`` is the per-rank
buffer of an all-reduce, the full (gathered) buffer of an all-gather or reduce-scatter, the
per-rank send buffer of an all-to-all (``S/n`` to each peer), the message of a point-to-point
send. The algorithm records that use these builders are in :mod:`simtrain.network.algorithms`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from simtrain.network.links import Link
from simtrain.topology.cluster import Cluster
from simtrain.topology.routes import Router


@dataclass(frozen=True)
class Phase:
    """Flows that run concurrently, then ``latency_s`` (added after the last byte); the phases of a
    collective run one after another."""

    flows: tuple[tuple[tuple[Link, ...], float], ...]
    latency_s: float = 0.0
    name: str = ""

    @property
    def nbytes(self) -> float:
        return float(sum(b for _, b in self.flows))


def _ring_flows(gpus: Sequence[int], volume: float, router: Router) -> tuple[list, float]:
    n = len(gpus)
    hops = [(gpus[i], gpus[(i + 1) % n]) for i in range(n)]
    flows = [(router.links(a, b), volume) for a, b in hops]
    return flows, max(router.latency(a, b) for a, b in hops)


def _ring_phase(rings: Sequence[Sequence[int]], op: str, nbytes: float, router: Router,
                name: str) -> Phase:
    """Concurrent rings (the same length) doing ``op`` on ``nbytes`` each, as one phase."""
    n = len(rings[0])
    if op == "ring_shift":  # context parallelism: every rank passes S bytes to its successor once
        steps, volume = 1, nbytes
    else:
        steps = 2 * (n - 1) if op == "all_reduce" else n - 1
        volume = steps / n * nbytes
    flows, alpha = [], 0.0
    for ring in rings:
        f, a = _ring_flows(ring, volume, router)
        flows += f
        alpha = max(alpha, a)
    return Phase(tuple(flows), steps * alpha, name)


def ring_phases(op: str, gpus: Sequence[int], nbytes: float, router: Router) -> list[Phase]:
    """NCCL's ring (Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
    workstations", JPDC 2009) as one phase of ``n`` concurrent flows, one per ring hop
    ``g[i] -> g[i+1]``, each carrying the whole per-rank volume (all-reduce ``2(n-1)/n S``, RS/AG
    ``(n-1)/n S``), plus a latency of ``2(n-1)`` (RS/AG ``n-1``) times the slowest hop's route
    latency.

    **Bandwidth-equivalent approximation:** every ring step moves ``S/n`` on every hop at once,
    so the hops carry these volumes at the same rates as the stepwise algorithm; modelling each
    step would cost ``2(n-1) x n`` flow events instead of ``n``. The approximation lets a hop that
    is faster than the ring's bottleneck finish early (real steps wait for the slowest hop); that
    never changes the uncontended time, and under contention it hands the early hop's bandwidth
    to others a little sooner than NCCL would."""
    if len(gpus) <= 1 or nbytes <= 0:
        return []
    return [_ring_phase([gpus], op, nbytes, router, f"ring {op}")]


def _btree_parent(rank: int, n: int) -> int:
    """NCCL ``ncclGetBtree`` (src/graph/trees.cc): the parent of ``rank``, -1 for the root 0."""
    if rank == 0:
        return -1
    bit = 1
    while bit < n and not bit & rank:
        bit <<= 1
    up = (rank ^ bit) | (bit << 1)
    return rank ^ bit if up >= n else up


def dtree_parents(n: int) -> tuple[list[int], list[int]]:
    """Parents in NCCL's two trees (``ncclGetDtree``): the second mirrors the first for even ``n``
    and shifts it by one for odd ``n``."""
    first = [_btree_parent(r, n) for r in range(n)]
    if n % 2:
        second = [-1 if (p := first[(r - 1) % n]) < 0 else (p + 1) % n for r in range(n)]
    else:
        second = [-1 if (p := first[n - 1 - r]) < 0 else n - 1 - p for r in range(n)]
    return first, second


def _depth(parents: list[int]) -> int:
    def d(r: int) -> int:
        return 0 if parents[r] < 0 else 1 + d(parents[r])
    return max(d(r) for r in range(len(parents)))


def tree_phases(op: str, gpus: Sequence[int], nbytes: float, router: Router) -> list[Phase]:
    """NCCL's double binary tree all-reduce (Sanders, Speck and Traeff, "Two-tree algorithms for
    full bandwidth broadcast, reduction and scan", Parallel Computing 2009; NVIDIA blog
    "Massively Scale Your Deep Learning Training with NCCL 2.4", 2019), trees as
    :func:`dtree_parents`. Each tree carries half the data, pipelined: phase 1 every child sends
    ``S/2`` to its parent in both trees (reduce), phase 2 every parent sends ``S/2`` to each child
    (broadcast); each phase has a latency of ``depth`` x the slowest tree edge's latency.
    Uncontended: ``2 S / B + 2 depth alpha`` with ``depth = ceil(log2 n)`` (a rank sends ``S``
    per phase: ``S/2`` to its parent in each tree)."""
    if len(gpus) <= 1 or nbytes <= 0:
        return []
    trees = dtree_parents(len(gpus))
    edges = [(gpus[r], gpus[p]) for parents in trees for r, p in enumerate(parents) if p >= 0]
    depth = max(_depth(parents) for parents in trees)
    alpha = max(max(router.latency(a, b), router.latency(b, a)) for a, b in edges)
    up = tuple((router.links(a, b), nbytes / 2) for a, b in edges)
    down = tuple((router.links(b, a), nbytes / 2) for a, b in edges)
    return [Phase(up, depth * alpha, "tree reduce"), Phase(down, depth * alpha, "tree broadcast")]


def node_blocks(gpus: Sequence[int], cluster: Cluster) -> list[list[int]]:
    """The group's GPUs by node, nodes in order of first appearance, GPUs in group order."""
    blocks: dict[int, list[int]] = {}
    for g in gpus:
        blocks.setdefault(cluster.node_of(g), []).append(g)
    return list(blocks.values())


def hierarchical_phases(op: str, gpus: Sequence[int], nbytes: float, router: Router) -> list[Phase]:
    """All-reduce over ``k >= 2`` nodes with the same ``m >= 2`` GPUs on each: ring
    reduce-scatter inside each node, then ``m`` concurrent ring all-reduces of ``S/m`` across
    nodes (one per local position), then ring all-gather inside each node (NCCL's CollNet/"2D"
    schemes, Horovod hierarchical all-reduce; Jia et al., "Highly scalable deep learning training
    system with mixed-precision", 2018). Three phases, each a ring phase as in
    :func:`ring_phases`."""
    if len(gpus) <= 1 or nbytes <= 0:
        return []
    blocks = node_blocks(gpus, router.cluster)
    m = len(blocks[0])
    cross = [[b[j] for b in blocks] for j in range(m)]
    return [_ring_phase(blocks, "reduce_scatter", nbytes, router, "intra-node reduce-scatter"),
            _ring_phase(cross, "all_reduce", nbytes / m, router, "inter-node all-reduce"),
            _ring_phase(blocks, "all_gather", nbytes, router, "intra-node all-gather")]


def nvls_phases(op: str, gpus: Sequence[int], nbytes: float, router: Router) -> list[Phase]:
    """All-reduce inside one NVSwitch node with NVLink SHARP (NCCL 2.17+): the switch reduces
    (``multimem.ld_reduce``) and multicasts (``multimem.st``): each GPU sends ``(n+1)/n S`` up to
    the switch and receives as much back, one phase, latency of one GPU->switch->GPU route. An
    ideal bound: no limit on the switch's reduction throughput."""
    n = len(gpus)
    if n <= 1 or nbytes <= 0:
        return []
    sw = f"node{router.cluster.node_of(gpus[0])}/nvswitch"
    volume = (n + 1) / n * nbytes
    flows = []
    for g in gpus:
        gid = router.cluster.gpu_id(g)
        flows += [(((gid, sw),), volume), (((sw, gid),), volume)]
    return [Phase(tuple(flows), router.latency(gpus[0], gpus[1]), "nvls")]


def direct_phases(op: str, gpus: Sequence[int], nbytes: float, router: Router) -> list[Phase]:
    """NCCL's all-to-all posts every send/recv at once: one phase of ``n(n-1)`` flows of ``S/n``
    (each GPU limited by its injection links), latency = the slowest route's; a point-to-point
    send (``gpus = (src, dst)``) is one flow of ``S`` plus its route latency."""
    if op == "p2p":
        src, dst = gpus
        if src == dst or nbytes <= 0:
            return []
        return [Phase(((router.links(src, dst), float(nbytes)),), router.latency(src, dst), "p2p")]
    n = len(gpus)
    if n <= 1 or nbytes <= 0:
        return []
    pairs = [(a, b) for a in gpus for b in gpus if a != b]
    flows = tuple((router.links(a, b), nbytes / n) for a, b in pairs)
    return [Phase(flows, max(router.latency(a, b) for a, b in pairs), "all-to-all")]


def phase_time(phase: Phase, cluster: Cluster) -> float:
    """Uncontended time of one phase: the most loaded link's bytes / bandwidth, plus latency
    (what max-min sharing reaches when the phase's flows are symmetric)."""
    load: dict[Link, float] = {}
    for links, nbytes in phase.flows:
        for link in links:
            load[link] = load.get(link, 0.0) + nbytes
    edges = cluster.graph.edges
    busiest = max((b / edges[link]["bandwidth_Bps"] for link, b in load.items()), default=0.0)
    return busiest + phase.latency_s
