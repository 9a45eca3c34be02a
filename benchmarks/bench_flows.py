"""Speed of the two network fidelities (not a test): ``python benchmarks/bench_flows.py``.

Scenarios on h100-ib (8 GPUs per node, 2-tier fat-tree), layout TP8 x DP(n/8):

* ``dp``: every DP group (one per local GPU index, one GPU per node) all-reduces 256 MiB at
  once, repeated ``REPEATS`` times back to back (each group chains its repeats);
* ``tp``: every TP group (one node each) all-reduces 64 MiB, starts staggered by 1 us per node,
  repeated: many small independent components, the case the incremental recompute is for;
* ``a2a``: every block of 64 GPUs (8 nodes, an EP group) all-to-alls 64 MiB at once, repeated:
  4,032 flows per group.

``analytic`` computes the same collectives' times in closed form (fresh caches each repeat, so the
tuner's candidate times are included; routes cached; no start staggering, so its "sim ms" is
one collective x repeats); ``flow`` runs them on one FlowModel, phases and repeats chained per
group. flows/s = flows started / wall time of the flow run (planning included).
"""

from __future__ import annotations

import time

from simtrain.network.chains import run_chains
from simtrain.network.planner import Planner
from simtrain.network.solver import FlowModel
from simtrain.outputs.text_tables import table
from simtrain.topology.cluster import load_topology
from simtrain.topology.routing.router import Router

REPEATS = 3


def scenario(gpus: int, kind: str) -> tuple[list[tuple[int, ...]], float, float]:
    nodes = gpus // 8
    if kind == "dp":
        return [tuple(range(j, gpus, 8)) for j in range(8)], 256 * 2**20, 0.0
    if kind == "a2a":
        return [tuple(range(k, k + 64)) for k in range(0, gpus, 64)], 64 * 2**20, 0.0
    return [tuple(range(8 * n, 8 * n + 8)) for n in range(nodes)], 64 * 2**20, 1e-6


def bench(gpus: int, kind: str) -> list[list[str]]:
    cluster = load_topology("h100-ib", nodes=gpus // 8)
    router = Router(cluster)
    groups, size, stagger = scenario(gpus, kind)
    op = "all_to_all" if kind == "a2a" else "all_reduce"
    net = Planner(cluster, router)
    net.collective_time(op, groups[0], size)  # warm the route cache
    rows = []

    t0 = time.perf_counter()
    for _ in range(REPEATS):
        fresh = Planner(cluster, router)
        sim_a = max(fresh.collective_time(op, g, size) for g in groups) * REPEATS
    wall = time.perf_counter() - t0
    ncoll = len(groups) * REPEATS
    rows.append([f"{gpus} GPUs {kind}", "analytic", net.algorithm(op, groups[0], size),
                 str(ncoll), "-", "-", f"{sim_a * 1e3:.2f}", f"{wall:.3f}", f"{ncoll / wall:,.0f}", "-"])

    t0 = time.perf_counter()
    model = FlowModel(cluster)
    chains = [(i * stagger, net.phases(op, g, size) * REPEATS)
              for i, g in enumerate(groups)]
    sim_f = max(run_chains(cluster, chains, model))
    wall = time.perf_counter() - t0
    rows.append([f"{gpus} GPUs {kind}", "flow", net.algorithm(op, groups[0], size),
                 str(ncoll), f"{model.usage.flows_added:,}", f"{model.recomputes:,}", f"{sim_f * 1e3:.2f}",
                 f"{wall:.3f}", f"{ncoll / wall:,.0f}", f"{model.usage.flows_added / wall:,.0f}"])
    return rows


def main() -> None:
    rows = []
    for gpus in (64, 1024):
        for kind in ("dp", "tp", "a2a"):
            rows += bench(gpus, kind)
    print(table(rows, ["scenario", "fidelity", "algo", "collectives", "flows", "recomputes",
                       "sim ms", "wall s", "coll/s", "flows/s"]))


if __name__ == "__main__":
    main()
