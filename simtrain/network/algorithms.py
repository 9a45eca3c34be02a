"""Collective algorithms as records, the registry of them, and the tuner that picks one.

A :class:`CollectiveAlgorithm` says which collectives an algorithm implements, where it can run,
whether the tuner offers it for a group, how it runs as phases of flows (builders in
:mod:`simtrain.network.phases`) and, where one exists, its uncontended closed form. Everything
that asks about algorithms (the tuner, :func:`check_algorithm`, :func:`applicable`,
:func:`phases`, :func:`uncontended_time`) reads :data:`REGISTRY`, or the registry it is given:
adding an algorithm is adding one record.

``uncontended_time`` is the uncontended closed form: for ``ring`` the alpha-beta time of
:func:`~simtrain.network.analytic.alpha_beta_time` with the ring's bottleneck shared by the hops
crossing it (exactly :class:`~simtrain.network.analytic.AnalyticNetwork`); otherwise, per phase,
the most loaded link's ``bytes / bandwidth`` plus the phase latency
(:func:`~simtrain.network.phases.phase_time`). Both fidelities agree when nothing contends (tests
check 1%). Sizes follow nccl-tests (``doc/PERFORMANCE.md``), as in :mod:`simtrain.network.phases`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

from simtrain.errors import SpecError, unknown_name
from simtrain.network.analytic import AnalyticNetwork, alpha_beta_time
from simtrain.network.phases import (Phase, direct_phases, hierarchical_phases, node_blocks, nvls_phases,
                                     phase_time, ring_phases, tree_phases)
from simtrain.topology.cluster import Cluster
from simtrain.topology.routes import Router

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "p2p", "ring_shift")

#: (op, gpus, bytes, router) -> the phases of one group
PhaseBuilder = Callable[[str, Sequence[int], float, Router], list[Phase]]
#: (gpus, the gpus by node, cluster, NVLink SHARP enabled) -> why the algorithm cannot run there
Placement = Callable[[Sequence[int], list[list[int]], Cluster, bool], str | None]
#: (op, gpus, bytes, router, cluster) -> uncontended seconds
ClosedForm = Callable[[str, Sequence[int], float, Router, Cluster], float]


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


# ---- the records ----------------------------------------------------------------------------
def _anywhere(gpus: Sequence[int], blocks: list[list[int]], cluster: Cluster, nvls: bool) -> str | None:
    return None


def _always(blocks: list[list[int]]) -> bool:
    return True


@dataclass(frozen=True)
class CollectiveAlgorithm:
    """One collective algorithm (see the module docstring)."""

    name: str
    ops: tuple[str, ...]  # the collectives it implements (normalised names)
    phases: PhaseBuilder  # how it runs one group, as phases of flows
    placement: Placement = _anywhere  # why it cannot run on a group (None: it can)
    offered: Callable[[list[list[int]]], bool] = _always  # the tuner considers it (GPUs by node)
    closed_form: ClosedForm | None = None  # uncontended time; None: the sum of its phase_time


def _ring_time(op: str, gpus: Sequence[int], nbytes: float, router: Router, cluster: Cluster) -> float:
    """The ring's alpha-beta time, its bottleneck shared by the hops crossing it: exactly what
    :class:`~simtrain.network.analytic.AnalyticNetwork` charges."""
    if len(gpus) <= 1:
        return 0.0
    bandwidth, alpha = AnalyticNetwork(cluster, router).ring(tuple(gpus))
    return alpha_beta_time(op, len(gpus), nbytes, bandwidth, alpha)


def _hierarchical_placement(gpus: Sequence[int], blocks: list[list[int]], cluster: Cluster,
                            nvls: bool) -> str | None:
    """Hierarchical needs the same number ``m >= 2`` of GPUs on each of ``k >= 2`` nodes."""
    sizes = {len(b) for b in blocks}
    if len(gpus) > 1 and (len(blocks) < 2 or len(sizes) != 1 or min(sizes) < 2):
        return ("algorithm 'hierarchical' needs a group on >= 2 nodes with the same number "
                f">= 2 of GPUs on each (this group has {[len(b) for b in blocks]} per node)")
    return None


def _nvls_placement(gpus: Sequence[int], blocks: list[list[int]], cluster: Cluster,
                    nvls: bool) -> str | None:
    """NVLS needs one node's NVSwitch; topology files cannot mark switches as NVLS-capable yet,
    so ``nvls=True`` (``--nvls``) enables it."""
    if len(gpus) <= 1:
        return None
    if not nvls:
        return ("algorithm 'nvls' is off: topology files cannot enable NVLink SHARP yet; "
                "pass nvls=True (--nvls)")
    if len(blocks) != 1 or f"node{cluster.node_of(gpus[0])}/nvswitch" not in cluster.graph:
        return "algorithm 'nvls' needs all GPUs of the group on one node with an NVSwitch"
    return None


#: The algorithms by name, in the tuner's tie-break order.
REGISTRY: Mapping[str, CollectiveAlgorithm] = MappingProxyType({a.name: a for a in (
    CollectiveAlgorithm("ring", ("all_reduce", "reduce_scatter", "all_gather", "ring_shift"), ring_phases,
                        closed_form=_ring_time),
    CollectiveAlgorithm("tree", ("all_reduce",), tree_phases,
                        offered=lambda blocks: len(blocks) >= 2),  # NCCL offers it across nodes only
    CollectiveAlgorithm("hierarchical", ("all_reduce",), hierarchical_phases, placement=_hierarchical_placement),
    CollectiveAlgorithm("nvls", ("all_reduce",), nvls_phases, placement=_nvls_placement),
    CollectiveAlgorithm("direct", ("all_to_all", "p2p"), direct_phases),
)})
#: The algorithm names, in the tuner's tie-break order.
ALGORITHMS = tuple(REGISTRY)


def find_algorithm(name: str, registry: Mapping[str, CollectiveAlgorithm] = REGISTRY) -> CollectiveAlgorithm:
    """The record named ``name``; SpecError (with the valid names) when there is none."""
    algo = registry.get(name)
    if algo is None:
        raise unknown_name("collective algorithm", name, tuple(registry))
    return algo


def check_algorithm(name: str, registry: Mapping[str, CollectiveAlgorithm] = REGISTRY) -> str:
    """``name`` when it names an algorithm of ``registry``; SpecError otherwise."""
    return find_algorithm(name, registry).name


def applicable(algo: str, op: str, gpus: Sequence[int], cluster: Cluster, nvls: bool = False,
               registry: Mapping[str, CollectiveAlgorithm] = REGISTRY) -> str | None:
    """Why ``algo`` cannot run ``op`` on ``gpus`` (None when it can)."""
    record, op = find_algorithm(algo, registry), normalize_op(op)
    if op not in record.ops:
        return (f"algorithm {algo!r} does not implement {op.replace('_', '-')} (it does: "
                f"{', '.join(o.replace('_', '-') for o in record.ops)})")
    return record.placement(gpus, node_blocks(gpus, cluster), cluster, nvls)


def phases(op: str, gpus: Sequence[int], nbytes: float, router: Router, algo: str = "ring",
           registry: Mapping[str, CollectiveAlgorithm] = REGISTRY) -> list[Phase]:
    """The phases of ``algo`` doing ``op`` on ``gpus`` (run one after another); SpecError when
    ``algo`` cannot run there (the ``nvls`` switch is not checked here)."""
    op, gpus = normalize_op(op), tuple(gpus)
    why = applicable(algo, op, gpus, router.cluster, True, registry)
    if why is not None:
        raise SpecError(why)
    return registry[algo].phases(op, gpus, float(nbytes), router)


def uncontended_time(op: str, algo: str, gpus: Sequence[int], nbytes: float, router: Router,
                  cluster: Cluster, registry: Mapping[str, CollectiveAlgorithm] = REGISTRY) -> float:
    """The uncontended closed-form time of ``algo`` (see the module docstring)."""
    op, gpus = normalize_op(op), tuple(gpus)
    closed_form = find_algorithm(algo, registry).closed_form
    if closed_form is not None:
        return closed_form(op, gpus, nbytes, router, cluster)
    return float(sum(phase_time(p, cluster) for p in phases(op, gpus, nbytes, router, algo, registry)))


def select_algorithm(op: str, gpus: Sequence[int], nbytes: float, cluster: Cluster,
                     router: Router, force: str | None = None, nvls: bool = False,
                     strict: bool = True, registry: Mapping[str, CollectiveAlgorithm] = REGISTRY) -> str:
    """The algorithm NCCL's tuner would pick (``src/graph/tuning.cc``: the smallest predicted
    time): among the records of ``registry`` that are :func:`applicable` and offered for the
    group, the one with the smallest :func:`uncontended_time`, ties in registry order. So tree
    (offered across >= 2 nodes, as NCCL) wins small all-reduces across nodes (2 log2 n
    latencies instead of 2(n-1)), ring or hierarchical large ones. ``force``
    (``--collective-algo``) names the algorithm: unknown names raise SpecError; one that cannot
    run here raises SpecError when ``strict``, else the tuner decides."""
    op, gpus = normalize_op(op), tuple(gpus)
    if force is not None:
        check_algorithm(force, registry)
        why = applicable(force, op, gpus, cluster, nvls, registry)
        if why is None:
            return force
        if strict:
            raise SpecError(why)
    blocks = node_blocks(gpus, cluster)
    cands = [a.name for a in registry.values()
             if applicable(a.name, op, gpus, cluster, nvls, registry) is None and a.offered(blocks)]
    if len(cands) == 1 or len(gpus) <= 1 or nbytes <= 0:
        return cands[0]
    times = [uncontended_time(op, a, gpus, nbytes, router, cluster, registry) for a in cands]
    return cands[times.index(min(times))]
