"""NCCL-like collective algorithms as phases of flows, their uncontended closed forms, and a tuner.

Sizes follow nccl-tests (``doc/PERFORMANCE.md``): ``S`` is the per-rank buffer of an all-reduce,
the full (gathered) buffer of an all-gather or reduce-scatter, the per-rank send buffer of an
all-to-all (``S/n`` to each peer), the message of a point-to-point send.

Algorithms (``ALGORITHMS``):

* ``ring`` (all-reduce, reduce-scatter, all-gather): NCCL's ring (Patarasuk and Yuan, "Bandwidth
  optimal all-reduce algorithms for clusters of workstations", JPDC 2009). **Bandwidth-equivalent
  approximation:** one phase of ``n`` concurrent flows, one per ring hop ``g[i] -> g[i+1]``, each
  carrying the whole per-rank volume (all-reduce ``2(n-1)/n S``, RS/AG ``(n-1)/n S``), plus a
  latency of ``2(n-1)`` (RS/AG ``n-1``) times the slowest hop's route latency. Every ring step
  moves ``S/n`` on every hop at once, so the hops carry these volumes at the same rates as the
  stepwise algorithm; modelling each step would cost ``2(n-1) x n`` flow events instead of ``n``.
  The approximation lets a hop that is faster than the ring's bottleneck finish early (real steps
  wait for the slowest hop); that never changes the uncontended time, and under contention it
  hands the early hop's bandwidth to others a little sooner than NCCL would.
* ``tree`` (all-reduce): NCCL's double binary tree (Sanders, Speck and Traeff, "Two-tree
  algorithms for full bandwidth broadcast, reduction and scan", Parallel Computing 2009; NVIDIA
  blog "Massively Scale Your Deep Learning Training with NCCL 2.4", 2019), trees built like NCCL's
  ``ncclGetBtree``/``ncclGetDtree`` (second tree mirrored for even ``n``, shifted for odd). Each tree
  carries half the data, pipelined: phase 1 every child sends ``S/2`` to its parent in both trees
  (reduce), phase 2 every parent sends ``S/2`` to each child (broadcast); each phase has a latency
  of ``depth`` x the slowest tree edge's latency. Uncontended: ``2 S / B + 2 depth alpha`` with
  ``depth = ceil(log2 n)`` (a rank sends ``S`` per phase: ``S/2`` to its parent in each tree).
* ``hierarchical`` (all-reduce over ``k >= 2`` nodes with the same ``m >= 2`` GPUs on each): ring
  reduce-scatter inside each node, then ``m`` concurrent ring all-reduces of ``S/m`` across nodes
  (one per local position), then ring all-gather inside each node (NCCL's CollNet/"2D" schemes,
  Horovod hierarchical all-reduce; Jia et al., "Highly scalable deep learning training system with
  mixed-precision", 2018). Three phases, each a ring phase as above.
* ``nvls`` (all-reduce inside one NVSwitch node; NVLink SHARP, NCCL 2.17+): the switch reduces
  (``multimem.ld_reduce``) and multicasts (``multimem.st``): each GPU sends ``(n+1)/n S`` up to the
  switch and receives as much back, one phase, latency of one GPU->switch->GPU route. Topology
  files cannot mark switches as NVLS-capable yet: it is enabled by a ``nvls=True`` parameter, and
  it is an ideal bound (no switch reduction throughput limit).
* ``direct`` (all-to-all, point-to-point): NCCL's all-to-all posts every send/recv at once: one
  phase of ``n(n-1)`` flows of ``S/n`` (each GPU limited by its injection links), latency = the
  slowest route's; p2p is one flow of ``S`` plus its route latency.

``analytic_time`` is the uncontended closed form of the same phases: for ``ring`` the alpha-beta
time of :func:`simtrain.network.alpha_beta_time` with the ring's bottleneck shared by the hops
crossing it (exactly :class:`~simtrain.network.AnalyticNetwork`); otherwise, per phase, the most
loaded link's ``bytes / bandwidth`` plus the phase latency, which max-min sharing reaches when the
phase's flows are symmetric. Both fidelities agree when nothing contends (tests check 1%).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from simtrain.errors import SpecError, unknown_name
from simtrain.network.solver import FlowModel, Link, Phase
from simtrain.network.analytic import AnalyticNetwork, alpha_beta_time
from simtrain.topology.cluster import Cluster, Router

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "p2p", "ring_shift")
ALGORITHMS = ("ring", "tree", "hierarchical", "nvls", "direct")
SUPPORTS = {"ring": ("all_reduce", "reduce_scatter", "all_gather", "ring_shift"), "tree": ("all_reduce",),
            "hierarchical": ("all_reduce",), "nvls": ("all_reduce",),
            "direct": ("all_to_all", "p2p")}


def normalize_op(op: str) -> str:
    """``all-reduce`` or ``all_reduce`` -> ``all_reduce``; unknown names raise SpecError."""
    name = str(op).replace("-", "_")
    if name not in OPS:
        raise unknown_name("collective", str(op), [o.replace("_", "-") for o in OPS])
    return name


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw factor (doc/PERFORMANCE.md): all-reduce ``2(n-1)/n``,
    reduce-scatter, all-gather and all-to-all ``(n-1)/n``, point-to-point 1."""
    op = normalize_op(op)
    if op in ("p2p", "ring_shift"):
        return 1.0
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def bandwidths(op: str, n: int, nbytes: float, time_s: float) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s as nccl-tests reports them: ``algbw = S / t``, ``busbw = algbw x
    bus_factor``; ``inf`` when the time is 0."""
    algbw = nbytes / time_s if time_s > 0 else math.inf
    factor = bus_factor(op, n)
    return algbw, (algbw * factor if factor else 0.0)


# ---- phases ---------------------------------------------------------------------------------
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
    """One phase of ``n`` hop flows; see the module docstring."""
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
    """Reduce up both trees, then broadcast down; ``S/2`` per tree edge per phase."""
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
    """Intra-node reduce-scatter, inter-node all-reduce of ``S/m`` per local position, intra-node
    all-gather (requires equal ``m >= 2`` GPUs on ``k >= 2`` nodes; see :func:`applicable`)."""
    if len(gpus) <= 1 or nbytes <= 0:
        return []
    blocks = node_blocks(gpus, router.cluster)
    m = len(blocks[0])
    cross = [[b[j] for b in blocks] for j in range(m)]
    return [_ring_phase(blocks, "reduce_scatter", nbytes, router, "intra-node reduce-scatter"),
            _ring_phase(cross, "all_reduce", nbytes / m, router, "inter-node all-reduce"),
            _ring_phase(blocks, "all_gather", nbytes, router, "intra-node all-gather")]


def nvls_phases(op: str, gpus: Sequence[int], nbytes: float, router: Router) -> list[Phase]:
    """In-switch reduction and multicast: ``(n+1)/n S`` up and down each GPU's NVLink."""
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
    """All-to-all: every ordered pair sends ``S/n`` at once; p2p: ``gpus = (src, dst)``."""
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


PHASES: dict[str, Callable[[str, Sequence[int], float, Router], list[Phase]]] = {
    "ring": ring_phases, "tree": tree_phases, "hierarchical": hierarchical_phases,
    "nvls": nvls_phases, "direct": direct_phases}


def phases(op: str, gpus: Sequence[int], nbytes: float, router: Router,
           algo: str = "ring") -> list[Phase]:
    """The phases of ``algo`` doing ``op`` on ``gpus`` (run one after another); SpecError when
    ``algo`` cannot run there (the ``nvls`` switch is not checked here)."""
    op, gpus = normalize_op(op), tuple(gpus)
    why = applicable(check_algorithm(algo), op, gpus, router.cluster, nvls=True)
    if why is not None:
        raise SpecError(why)
    return PHASES[algo](op, gpus, float(nbytes), router)


# ---- closed forms ---------------------------------------------------------------------------
def phase_time(phase: Phase, cluster: Cluster) -> float:
    """Uncontended time of one phase: the most loaded link's bytes / bandwidth, plus latency."""
    load: dict[Link, float] = {}
    for links, nbytes in phase.flows:
        for link in links:
            load[link] = load.get(link, 0.0) + nbytes
    edges = cluster.graph.edges
    busiest = max((b / edges[link]["bandwidth_Bps"] for link, b in load.items()), default=0.0)
    return busiest + phase.latency_s


def analytic_time(op: str, algo: str, gpus: Sequence[int], nbytes: float, router: Router,
                  cluster: Cluster) -> float:
    """The uncontended closed-form time of ``algo`` (see the module docstring)."""
    op, gpus = normalize_op(op), tuple(gpus)
    if algo == "ring" and len(gpus) > 1:
        bandwidth, alpha = AnalyticNetwork(cluster, router).ring(gpus)
        return alpha_beta_time(op, len(gpus), nbytes, bandwidth, alpha)
    return float(sum(phase_time(p, cluster) for p in phases(op, gpus, nbytes, router, algo)))


# ---- selection ------------------------------------------------------------------------------
def check_algorithm(name: str) -> str:
    if name not in ALGORITHMS:
        raise unknown_name("collective algorithm", name, ALGORITHMS)
    return name


def applicable(algo: str, op: str, gpus: Sequence[int], cluster: Cluster,
               nvls: bool = False) -> str | None:
    """Why ``algo`` cannot run ``op`` on ``gpus`` (None when it can)."""
    op = normalize_op(op)
    if op not in SUPPORTS[algo]:
        return (f"algorithm {algo!r} does not implement {op.replace('_', '-')} (it does: "
                f"{', '.join(o.replace('_', '-') for o in SUPPORTS[algo])})")
    blocks = node_blocks(gpus, cluster)
    if algo == "hierarchical" and len(gpus) > 1:
        sizes = {len(b) for b in blocks}
        if len(blocks) < 2 or len(sizes) != 1 or min(sizes) < 2:
            return ("algorithm 'hierarchical' needs a group on >= 2 nodes with the same number "
                    f">= 2 of GPUs on each (this group has {[len(b) for b in blocks]} per node)")
    if algo == "nvls" and len(gpus) > 1:
        if not nvls:
            return ("algorithm 'nvls' is off: topology files cannot enable NVLink SHARP yet; "
                    "pass nvls=True (--nvls)")
        sw = f"node{cluster.node_of(gpus[0])}/nvswitch"
        if len(blocks) != 1 or sw not in cluster.graph:
            return "algorithm 'nvls' needs all GPUs of the group on one node with an NVSwitch"
    return None


def select_algorithm(op: str, gpus: Sequence[int], nbytes: float, cluster: Cluster,
                     router: Router, force: str | None = None, nvls: bool = False,
                     strict: bool = True) -> str:
    """The algorithm NCCL's tuner would pick (``src/graph/tuning.cc``: the smallest predicted
    time): the candidate with the smallest :func:`analytic_time`, ties in ``ALGORITHMS`` order.
    Candidates: all-reduce ring, tree (only across >= 2 nodes, as NCCL), hierarchical and nvls
    where :func:`applicable`; RS/AG ring; all-to-all and p2p direct. So tree wins small
    all-reduces across nodes (2 log2 n latencies instead of 2(n-1)), ring or hierarchical large
    ones. ``force`` (``--collective-algo``) names the algorithm: unknown names raise SpecError;
    one that cannot run here raises SpecError when ``strict``, else the tuner decides."""
    op, gpus = normalize_op(op), tuple(gpus)
    if force is not None:
        check_algorithm(force)
        why = applicable(force, op, gpus, cluster, nvls)
        if why is None:
            return force
        if strict:
            raise SpecError(why)
    cands = [a for a in ALGORITHMS if applicable(a, op, gpus, cluster, nvls) is None
             and not (a == "tree" and len(node_blocks(gpus, cluster)) < 2)]
    if len(cands) == 1 or len(gpus) <= 1 or nbytes <= 0:
        return cands[0]
    times = [analytic_time(op, a, gpus, nbytes, router, cluster) for a in cands]
    return cands[times.index(min(times))]


class FlowNetwork:
    """The ``flow`` fidelity's network model. For uncontended use it satisfies
    :class:`simtrain.network.NetworkModel` (times are :func:`analytic_time` of the selected
    algorithm); for the engine, :meth:`plan` gives the phases whose flows run on a
    :class:`~simtrain.flows.FlowModel` (:meth:`new_model`). ``algo`` forces an algorithm where it
    applies (elsewhere the tuner decides); ``nvls`` enables NVLink SHARP."""

    def __init__(self, cluster: Cluster, router: Router | None = None, *, algo: str | None = None,
                 nvls: bool = False) -> None:
        self.cluster = cluster
        self.router = router if router is not None else Router(cluster)
        self.algo = check_algorithm(algo) if algo is not None else None
        self.nvls = nvls
        self._algos: dict[tuple, str] = {}
        self._times: dict[tuple, float] = {}
        self._plans: dict[tuple, list[Phase]] = {}

    def algorithm(self, op: str, gpus: Sequence[int], nbytes: float) -> str:
        key = (op, tuple(gpus), nbytes)
        algo = self._algos.get(key)
        if algo is None:
            algo = self._algos[key] = select_algorithm(op, key[1], nbytes, self.cluster,
                                                       self.router, self.algo, self.nvls, False)
        return algo

    def collective_time(self, op: str, gpus: tuple[int, ...], nbytes: float) -> float:
        key = (op, tuple(gpus), nbytes)
        t = self._times.get(key)
        if t is None:
            t = self._times[key] = analytic_time(op, self.algorithm(op, gpus, nbytes), key[1],
                                                 nbytes, self.router, self.cluster)
        return t

    def p2p_time(self, src: int, dst: int, nbytes: float) -> float:
        return self.collective_time("p2p", (src, dst), nbytes)

    def phases(self, op: str, gpus: Sequence[int], nbytes: float) -> list[Phase]:
        """The phases of one group under the selected algorithm."""
        return phases(op, gpus, nbytes, self.router, self.algorithm(op, gpus, nbytes))

    def plan(self, op: str, groups: Sequence[Sequence[int]], nbytes: float) -> list[Phase]:
        """Phases for several groups at once (``(src, dst)`` pairs for p2p): phase ``i`` holds the
        flows of every group's phase ``i`` so that they contend, with the largest latency. A
        folded representative must list every group it stands for here."""
        key = (op, tuple(tuple(g) for g in groups), nbytes)
        plan = self._plans.get(key)
        if plan is None:
            per_group = [self.phases(op, g, nbytes) for g in key[1]]
            plan = []
            for i in range(max((len(p) for p in per_group), default=0)):
                parts = [p[i] for p in per_group if i < len(p)]
                plan.append(Phase(tuple(f for p in parts for f in p.flows),
                                  max(p.latency_s for p in parts), parts[0].name))
            self._plans[key] = plan
        return plan

    def new_model(self) -> FlowModel:
        return FlowModel(self.cluster)
