"""Collective algorithms as records, the registry of them, and the tuner that picks one.

A :class:`CollectiveAlgorithm` says which collectives an algorithm implements, where it can run,
whether the tuner offers it for a group, how it runs as phases of flows (builders in
:mod:`simtrain.network.phases` and :mod:`simtrain.network.trees`) and which family of NCCL's
tuning model prices its latency and protocols (:mod:`simtrain.network.nccl_protocols`; none: Simple,
with the latency its builder sets). Everything that asks about algorithms (the tuner,
:func:`check_algorithm`, :func:`applicable`, :func:`phases`, :func:`price`) reads
:data:`REGISTRY`, or the registry it is given: adding an algorithm is adding one record.

The price of an algorithm is its closed form on the graph: for each protocol, NCCL's latency plus
each phase's busiest link (bytes over achievable bandwidth, :func:`~simtrain.network.phases.phase_time`)
divided by the protocol's bandwidth factor (a tree no faster than NCCL's per-channel cap,
:func:`~simtrain.network.nccl_protocols.tree_cap_Bps`); the protocol with the smallest time wins, as in
NCCL's ``ncclTopoGetAlgoTime``. The flow network runs the same phases with the bytes scaled by the
same ratio and the latency after the last phase, so both fidelities agree when nothing contends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Mapping, Sequence, cast

from simtrain.errors import SpecError, unknown_name
from simtrain.network.channels import HopArrays, channel_count, node_blocks
from simtrain.network.phases import (Phase, direct_phases, group_shape, hierarchical_phases, hops_time, phase_time,
                                     ring_phases, ring_unit_hops)
from simtrain.network.nccl_protocols import (GroupShape, bandwidth_factor, family_of, latency_s, protocols,
                                             tree_cap_Bps)
from simtrain.network.trees import nvls_phases, nvls_tree_phases, tree_phases, tree_unit_hops
from simtrain.topology.cluster import Cluster
from simtrain.topology.routing.router import Router

if TYPE_CHECKING:  # pragma: no cover
    from simtrain.workload.program import Program

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "p2p", "ring_shift")

#: (op, gpus, bytes, router) -> the phases of one group
PhaseBuilder = Callable[[str, Sequence[int], float, Router], list[Phase]]
#: (op, gpus, router) -> (sources, destinations, bytes): the flows of a one-phase unit without latency
HopBuilder = Callable[[str, Sequence[int], Router], HopArrays]
#: (gpus, the gpus by node, cluster, NVLink SHARP enabled) -> why the algorithm cannot run there
Placement = Callable[[Sequence[int], list[list[int]], Cluster, bool], str | None]


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
    family: str | None = None  # NCCL tuning family pricing latency and protocols; None: Simple
    hops: HopBuilder | None = None  # its one phase's flows for one byte, priced without routes (hop_cost)


def _hierarchical_placement(gpus: Sequence[int], blocks: list[list[int]], cluster: Cluster,
                            nvls: bool) -> str | None:
    """Hierarchical needs the same number ``m >= 2`` of GPUs on each of ``k >= 2`` nodes."""
    sizes = {len(b) for b in blocks}
    if len(gpus) > 1 and (len(blocks) < 2 or len(sizes) != 1 or min(sizes) < 2):
        return ("algorithm 'hierarchical' needs a group on >= 2 nodes with the same number "
                f">= 2 of GPUs on each (this group has {[len(b) for b in blocks]} per node)")
    return None


def _nvls_off(name: str, cluster: Cluster, nvls: bool) -> str | None:
    if not nvls:
        return (f"algorithm {name!r} is off: topology {cluster.name} has no NVLink SHARP "
                f"([node] nvls = false); set nvls = true (--nvls) for NVSwitch 3 and later")
    return None


def _nvls_placement(gpus: Sequence[int], blocks: list[list[int]], cluster: Cluster,
                    nvls: bool) -> str | None:
    """NVLS needs NVLink SHARP enabled and all the group's GPUs on one NVSwitch node."""
    if len(gpus) <= 1:
        return None
    if len(blocks) != 1 or f"node{cluster.node_of(gpus[0])}/nvswitch" not in cluster.graph:
        return "algorithm 'nvls' needs all GPUs of the group on one node with an NVSwitch"
    return _nvls_off("nvls", cluster, nvls)


def _nvls_tree_placement(gpus: Sequence[int], blocks: list[list[int]], cluster: Cluster,
                         nvls: bool) -> str | None:
    """NVLS tree needs NVLink SHARP enabled and >= 2 GPUs of the group on each of >= 2 NVSwitch
    nodes."""
    if len(gpus) <= 1:
        return None
    if len(blocks) < 2 or min(len(b) for b in blocks) < 2 or any(
            f"node{cluster.node_of(b[0])}/nvswitch" not in cluster.graph for b in blocks):
        return ("algorithm 'nvls_tree' needs >= 2 GPUs of the group on each of >= 2 nodes with an "
                f"NVSwitch (this group has {[len(b) for b in blocks]} per node)")
    return _nvls_off("nvls_tree", cluster, nvls)


def _across_nodes(blocks: list[list[int]]) -> bool:
    """NCCL offers its trees across nodes only."""
    return len(blocks) >= 2


def _never(blocks: list[list[int]]) -> bool:
    """NCCL's tuner has no such algorithm: it runs only where forced (``--collective-algo``)."""
    return False


#: The algorithms by name, in the tuner's tie-break order.
REGISTRY: Mapping[str, CollectiveAlgorithm] = MappingProxyType({a.name: a for a in (
    CollectiveAlgorithm("ring", ("all_reduce", "reduce_scatter", "all_gather"), ring_phases, family="ring",
                        hops=ring_unit_hops),
    CollectiveAlgorithm("tree", ("all_reduce",), tree_phases, offered=_across_nodes, family="tree",
                        hops=tree_unit_hops),
    CollectiveAlgorithm("nvls", ("all_reduce",), nvls_phases, placement=_nvls_placement, family="nvls"),
    CollectiveAlgorithm("nvls_tree", ("all_reduce",), nvls_tree_phases, placement=_nvls_tree_placement,
                        family="nvls_tree"),
    CollectiveAlgorithm("hierarchical", ("all_reduce",), hierarchical_phases, placement=_hierarchical_placement,
                        offered=_never),
    CollectiveAlgorithm("direct", ("all_to_all", "p2p", "ring_shift"), direct_phases),
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


# ---- prices ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Price:
    """An algorithm's uncontended time on one group with its best protocol; the phases of one
    byte (:func:`unit_phases`) scaled by ``bytes_factor`` per byte, ``latency_s`` after the last."""

    algorithm: str
    protocol: str
    time_s: float
    bytes_factor: float = 1.0
    latency_s: float = 0.0
    channels: int = 1


def unit_phases(op: str, algo: str, gpus: Sequence[int], router: Router,
                registry: Mapping[str, CollectiveAlgorithm] = REGISTRY) -> list[Phase]:
    """The phases of ``algo`` doing ``op`` on ``gpus`` for one byte (every builder is linear in
    the bytes); SpecError when ``algo`` cannot run there (the NVLS switch is not checked)."""
    op, gpus = normalize_op(op), tuple(gpus)
    why = applicable(algo, op, gpus, router.cluster, True, registry)
    if why is not None:
        raise SpecError(why)
    return registry[algo].phases(op, gpus, 1.0, router)


def unit_cost(unit: list[Phase], cluster: Cluster) -> tuple[float, float]:
    """Seconds per byte of :func:`unit_phases` (each phase's busiest link, its latency left out)
    and their summed latency: what :func:`price` needs of them, whatever the bytes."""
    return (sum(phase_time(p, cluster) - p.latency_s for p in unit), sum(p.latency_s for p in unit))


def hop_arrays(op: str, algo: str, gpus: Sequence[int], router: Router,
               registry: Mapping[str, CollectiveAlgorithm] = REGISTRY) -> HopArrays | None:
    """The flows of the one phase of ``algo``'s unit as arrays (sources, destinations, bytes) from
    its ``hops``: what :func:`hop_cost` prices. None where the algorithm has no ``hops`` or the
    group is a single GPU; SpecError where it cannot run there, as :func:`unit_phases`."""
    op, gpus = normalize_op(op), tuple(gpus)
    record = find_algorithm(algo, registry)
    if record.hops is None or len(gpus) < 2:
        return None
    why = applicable(algo, op, gpus, router.cluster, True, registry)
    if why is not None:
        raise SpecError(why)
    return record.hops(op, gpus, router)


def hop_cost(op: str, algo: str, gpus: Sequence[int], router: Router,
             registry: Mapping[str, CollectiveAlgorithm] = REGISTRY) -> tuple[float, float] | None:
    """:func:`unit_cost` of :func:`unit_phases`, bit for bit, from the algorithm's ``hops``
    (:func:`hop_arrays`) without building a flow or a route per hop
    (:func:`~simtrain.network.phases.hops_time`): what a ring or a tree over 100,000 GPUs costs
    to price. None where :func:`hop_arrays` is."""
    hops = hop_arrays(op, algo, gpus, router, registry)
    return None if hops is None else (hops_time(*hops, router), 0.0)  # one phase, latency 0


def tuning_shape(gpus: Sequence[int], router: Router, channels: int | None = None) -> GroupShape:
    """The group as NCCL's tuning model prices it, with its channels (:func:`price`; ``channels``:
    its :func:`~simtrain.network.channels.channel_count` when already known)."""
    if channels is None:
        channels = channel_count(node_blocks(gpus, router.cluster), router)
    return group_shape(gpus, router, channels)


def price(op: str, algo: str, gpus: Sequence[int], nbytes: float, router: Router,
          registry: Mapping[str, CollectiveAlgorithm] = REGISTRY, unit: list[Phase] | None = None,
          cost: tuple[float, float] | None = None, shape: GroupShape | None = None) -> Price:
    """The uncontended price of ``algo`` (module docstring); ``unit``: its :func:`unit_phases`
    when already built, ``cost`` their :func:`unit_cost` (or :func:`hop_cost`: then ``unit`` may
    be None, the group having two GPUs or more), ``shape`` the group's :func:`tuning_shape` when
    already known."""
    op, gpus = normalize_op(op), tuple(gpus)
    if cost is None:
        unit = unit_phases(op, algo, gpus, router, registry) if unit is None else unit
        cost = unit_cost(unit, router.cluster)
    family = find_algorithm(algo, registry).family
    if (unit is not None and not unit) or nbytes <= 0:
        return Price(algo, "Simple", 0.0)
    seconds, fixed = cost  # seconds per byte
    if family is None:
        return Price(algo, "Simple", nbytes * seconds + fixed)
    shape = tuning_shape(gpus, router) if shape is None else shape
    best, capped = None, family_of(family).channel_capped
    for proto in protocols(family, shape):
        moving = nbytes * seconds / bandwidth_factor(family, op, proto, shape, nbytes)
        if capped:
            moving = max(moving, nbytes / tree_cap_Bps(proto, shape))
        lat = latency_s(family, op, proto, shape)
        cand = Price(algo, proto, lat + moving, moving / (nbytes * seconds), lat, shape.channels)
        if best is None or cand.time_s < best.time_s:
            best = cand
    return cast(Price, best)  # protocols() gives one at least


def scaled_phases(unit: list[Phase], nbytes: float, cost: Price) -> list[Phase]:
    """The phases of ``nbytes`` as the flow network runs them: each unit phase's bytes times
    ``nbytes x cost.bytes_factor``, its own latency, NCCL's latency after the last one."""
    last = len(unit) - 1
    return [p.scaled(nbytes * cost.bytes_factor, p.latency_s + (cost.latency_s if i == last else 0.0))
            for i, p in enumerate(unit)]


def phases(op: str, gpus: Sequence[int], nbytes: float, router: Router, algo: str = "ring",
           registry: Mapping[str, CollectiveAlgorithm] = REGISTRY) -> list[Phase]:
    """The phases of ``algo`` doing ``op`` on ``gpus`` as the flow network runs them (its best
    protocol applied); SpecError when ``algo`` cannot run there (the NVLS switch is not checked)."""
    unit = unit_phases(op, algo, gpus, router, registry)
    return scaled_phases(unit, float(nbytes), price(op, algo, gpus, nbytes, router, registry, unit))


def uncontended_time(op: str, algo: str, gpus: Sequence[int], nbytes: float, router: Router,
                     cluster: Cluster, registry: Mapping[str, CollectiveAlgorithm] = REGISTRY) -> float:
    """The uncontended time of ``algo`` with its best protocol (module docstring)."""
    return price(op, algo, gpus, nbytes, router, registry).time_s


def candidates(op: str, gpus: Sequence[int], cluster: Cluster, nvls: bool,
               registry: Mapping[str, CollectiveAlgorithm] = REGISTRY) -> list[str]:
    """The algorithms the tuner weighs for ``op`` on ``gpus``: applicable and offered."""
    op, gpus = normalize_op(op), tuple(gpus)
    blocks = node_blocks(gpus, cluster)
    return [a.name for a in registry.values()
            if applicable(a.name, op, gpus, cluster, nvls, registry) is None and a.offered(blocks)]


def forced(op: str, gpus: Sequence[int], cluster: Cluster, force: str, nvls: bool, strict: bool,
           registry: Mapping[str, CollectiveAlgorithm] = REGISTRY) -> str | None:
    """``force`` when it can run ``op`` on ``gpus``; otherwise SpecError when ``strict``, else None
    (the tuner decides). Unknown names always raise SpecError."""
    check_algorithm(force, registry)
    why = applicable(force, op, gpus, cluster, nvls, registry)
    if why is None:
        return force
    if strict:
        raise SpecError(why)
    return None


def select_algorithm(op: str, gpus: Sequence[int], nbytes: float, cluster: Cluster,
                     router: Router, force: str | None = None, nvls: bool = False,
                     strict: bool = True, registry: Mapping[str, CollectiveAlgorithm] = REGISTRY) -> str:
    """The algorithm NCCL's tuner would pick (``src/graph/tuning.cc``: the smallest predicted
    time): among the :func:`candidates`, the one with the smallest :func:`price`, ties in
    registry order. ``force`` (``--collective-algo``) names the algorithm (:func:`forced`)."""
    op, gpus = normalize_op(op), tuple(gpus)
    if force is not None and (chosen := forced(op, gpus, cluster, force, nvls, strict, registry)):
        return chosen
    cands = candidates(op, gpus, cluster, nvls, registry)
    if len(cands) == 1 or len(gpus) <= 1 or nbytes <= 0:
        return cands[0]
    times = [price(op, a, gpus, nbytes, router, registry).time_s for a in cands]
    return cands[times.index(min(times))]


def check_forced(force: str | None, program: Program, cluster: Cluster, network: str = "analytic",
                 registry: Mapping[str, CollectiveAlgorithm] = REGISTRY) -> None:
    """``--collective-algo`` of a run, by the rule of ``simtrain collective --algo`` (which refuses
    an algorithm that cannot run its group): a one-line SpecError when ``force`` can run none of the
    collectives of ``program`` (a :class:`~simtrain.workload.program.Program`: its ops' ``comm``,
    ``a+b`` being both, over the groups of their ``group_set``), naming the collectives it
    implements, those of the run and, for one it implements, why it cannot run there; also when
    ``network`` is ``none`` (free communication runs no algorithm). Nothing when ``force`` is None
    or runs somewhere: there it is forced, elsewhere the tuner decides."""
    if force is None:
        return
    record = find_algorithm(force, registry)
    if network == "none":
        raise SpecError(f"--collective-algo {force}: --network none makes communication free, so no collective "
                        f"algorithm runs; use --network analytic or flow, or drop --collective-algo")
    seen: set[tuple[str, int]] = set()
    ops: set[str] = set()
    reasons: list[str] = []
    for comm, group_set in zip(program.ops.comm, program.ops.group_set):
        if comm is None or (comm, group_set) in seen:
            continue
        seen.add((comm, group_set))
        for name in (normalize_op(part) for part in comm.split("+")):
            ops.add(name)
            if name not in record.ops:
                continue
            for gpus in program.group_sets[group_set]:
                if len(gpus) < 2:
                    continue
                why = record.placement(gpus, node_blocks(gpus, cluster), cluster, cluster.nvls)
                if why is None:
                    return
                reasons.append(why)
    words = ", ".join(o.replace("_", "-") for o in sorted(ops)) or "none"
    why = next((r for r in reasons if " is off" in r), reasons[0] if reasons else "")
    raise SpecError(f"--collective-algo {force}: runs none of this run's collectives ({words}); it implements "
                    f"{', '.join(o.replace('_', '-') for o in record.ops)}" + (f", and {why}" if why else ""))
