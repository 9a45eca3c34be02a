"""Collective: time one collective on a topology, nccl-tests style.

Bandwidths follow nccl-tests ``doc/PERFORMANCE.md`` (algbw = S / t, busbw = algbw x bus factor).
Concurrent groups (``concurrent_groups = K``): group ``k`` is the first group with every rank
shifted by ``k * s``, where ``s`` is the smallest positive shift that keeps the ``K`` groups
disjoint: ``gpus=8`` gives the next consecutive blocks of 8, ``ranks=[0, 8, ..., 56]`` (one GPU
per node) gives the other local GPU indices, i.e. the DP groups of a TP8 layout.

A size is at most :data:`MAX_SIZE_BYTES`, and a report is returned only when every number in it
is finite (:func:`simtrain.results.finite.check_finite`).
"""

from __future__ import annotations

from typing import Any

from simtrain.errors import SpecError
from simtrain.results.finite import check_finite
from simtrain.network.algorithms import bandwidths, normalize_op, select_algorithm
from simtrain.network.chains import run_chains
from simtrain.network.links import summarize_links
from simtrain.network.models import MODELS
from simtrain.network.planner import Planner
from simtrain.network.solver import FlowModel
from simtrain.outputs.words import counted
from simtrain.specs.strict import clip, shown
from simtrain.topology.cluster import Cluster, load_topology
from simtrain.topology.routing.router import Router

#: The networks that time a collective on its own.
COLLECTIVE_NETWORKS = tuple(name for name, r in MODELS.items() if r.times_collectives)
#: The largest message: 1 EiB, a million times the memory of a 72-GPU NVLink domain (GB200 NVL72:
#: 13.5 TB of HBM), so any real collective fits and every time computed from it stays finite.
MAX_SIZE_BYTES = 2**60


def _groups(first: list[int], k: int, num_gpus: int) -> list[tuple[int, ...]]:
    if k == 1:
        return [tuple(first)]
    for s in range(1, num_gpus if k * len(first) <= num_gpus else 1):  # k groups need k x size GPUs
        shifted = [tuple(g + i * s for g in first) for i in range(k)]
        flat = [g for grp in shifted for g in grp]
        if max(flat) >= num_gpus:
            break
        if len(set(flat)) == len(flat):
            return shifted
    raise SpecError(f"--concurrent-groups {k}: {k} disjoint shifted copies of ranks {first} do not "
                    f"fit in {num_gpus} GPUs; use --nodes to add nodes or fewer groups")


def _ranks(op: str, gpus: int | None, ranks: list[int] | None, cluster: Cluster) -> list[int]:
    n = cluster.num_gpus
    where = f"topology {cluster.name} ({counted(cluster.num_nodes, 'node')} x {cluster.gpus_per_node} GPUs)"
    if (gpus is None) == (ranks is None):
        raise SpecError("give either --gpus N or --ranks a,b,... (not both)")
    if gpus is not None:
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
            raise SpecError(f"--gpus {gpus!r}: must be an integer >= 1")
        if gpus > n:
            raise SpecError(f"--gpus {gpus}: more than the {n} GPUs of {where}; use --nodes")
        group = list(range(gpus))
    else:
        group = list(ranks)
        if not group:
            raise SpecError("--ranks: empty; give GPU indices like 0,8,16")
        for r in group:
            if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < n:
                raise SpecError(f"--ranks: rank {shown(r)} is out of range [0, {n}) for {where}; "
                                f"use --nodes to add nodes")
        if len(set(group)) != len(group):
            raise SpecError(f"--ranks {clip(','.join(map(str, group)))}: ranks repeat")
    if op == "p2p":
        if ranks is not None and len(group) != 2:
            raise SpecError(f"p2p: --ranks needs exactly two ranks (source,destination), got {len(group)}")
        group = [group[0], group[-1]]
    return group


def collective(op: str, *, size_bytes: float, gpus: int | None = None,
                      ranks: list[int] | None = None, topology: str | Cluster,
                      nodes: int | None = None, algo: str | None = None,
                      network: str = "analytic", concurrent_groups: int = 1,
                      nvls: bool | None = None, top_links: int = 5) -> dict[str, Any]:
    """Time ``op`` on ``size_bytes`` over a group (``gpus`` = ranks 0..N-1, or explicit ``ranks``;
    p2p: from the first rank to the last), ``concurrent_groups`` disjoint copies at once (module
    docstring), priced by the same :class:`~simtrain.network.planner.Planner` as ``simtrain run``.
    ``nvls`` enables or disables NVLink SHARP (None: as the topology says). Keys: op, size_bytes,
    time_s (last group done), algbw_Bps, busbw_Bps (None when the time is 0), algorithm, protocol,
    channels, network, ranks, groups, uncontended_time_s (closed form, one group), topology,
    nodes; flow mode adds flows, recomputes and top_links (most loaded links)."""
    name = normalize_op(op)
    if network not in COLLECTIVE_NETWORKS:
        raise SpecError(f"--network {network!r}: must be one of {', '.join(COLLECTIVE_NETWORKS)}")
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, (int, float)) or not 0 <= size_bytes <= MAX_SIZE_BYTES:
        raise SpecError(f"--size {shown(size_bytes)}: must be a number of bytes from 0 to {MAX_SIZE_BYTES:,}")
    if isinstance(concurrent_groups, bool) or not isinstance(concurrent_groups, int) or concurrent_groups < 1:
        raise SpecError(f"--concurrent-groups {concurrent_groups!r}: must be an integer >= 1")
    cluster = load_topology(topology, nodes=nodes) if isinstance(topology, str) else topology
    router = Router(cluster)
    group = _ranks(name, gpus, ranks, cluster)
    groups = _groups(group, concurrent_groups, cluster.num_gpus)
    nvls = cluster.nvls if nvls is None else nvls
    algorithm = select_algorithm(name, group, size_bytes, cluster, router, force=algo, nvls=nvls)
    net = Planner(cluster, router, algo=algorithm, nvls=nvls)
    one = net.price(name, group, size_bytes)
    report: dict[str, Any] = {"op": name.replace("_", "-"), "size_bytes": size_bytes,
                              "algorithm": algorithm, "protocol": one.protocol, "channels": one.channels,
                              "network": network, "ranks": group, "groups": [list(g) for g in groups],
                              "uncontended_time_s": one.time_s, "topology": cluster.name,
                              "nodes": cluster.num_nodes}
    if network == "analytic":  # no contention between groups: the slowest group
        time_s = max(net.collective_time(name, g, size_bytes) for g in groups)
    else:
        model = FlowModel(cluster)
        time_s = max(run_chains(cluster, [(0.0, net.phases(name, g, size_bytes)) for g in groups],
                                model), default=0.0)
        report.update(flows=model.usage.flows_added, recomputes=model.recomputes,
                      top_links=summarize_links(model.usage, cluster, time_s, top_links))
    algbw, busbw = bandwidths(name, len(group), size_bytes, time_s)
    report.update(time_s=time_s, algbw_Bps=algbw if time_s > 0 else None,
                  busbw_Bps=busbw if time_s > 0 else None)
    check_finite(report, f"{name.replace('_', '-')} of {size_bytes:,} bytes")
    return report
