"""Chains of phases sharing one flow model, run outside the engine.

The ``collective`` command, benchmarks and tests run collectives (or bare transfers) this way on
a :class:`~simtrain.network.solver.FlowModel`, every chain sharing the links with the others.
"""

from __future__ import annotations

from typing import Sequence

from simtrain.network.phases import Phase
from simtrain.network.solver import FlowModel, FlowSpec
from simtrain.topology.cluster import Cluster


def run_chains(cluster: Cluster, chains: Sequence[tuple[float, Sequence[Phase]]],
               model: FlowModel | None = None, check: bool = False) -> list[float]:
    """Run chains of phases on one flow model: chain ``i`` starts at ``chains[i][0]`` and its
    phases run one after another (each a transfer); all chains share the links. Returns each
    chain's finish time (its start if it has no phase). Pass ``model`` to inspect it afterwards;
    ``check`` asserts the model's ``check_capacity`` at every event."""
    model = model if model is not None else FlowModel(cluster)
    finish = [0.0] * len(chains)
    starts = sorted((float(s), i) for i, (s, _) in enumerate(chains))
    owner: dict[int, tuple[int, int]] = {}  # transfer id -> (chain, phase index)
    next_id = 0

    def launch(t: float, c: int, k: int) -> None:
        nonlocal next_id
        phases = chains[c][1]
        if k >= len(phases):
            finish[c] = t
            return
        owner[next_id] = (c, k)
        model.add(t, next_id, phases[k].flows, phases[k].latency_s)
        next_id += 1

    pos = 0
    while True:
        te = model.next_event_s()
        if check:
            model.check_capacity()
        ts = starts[pos][0] if pos < len(starts) else None
        if ts is not None and (te is None or ts <= te):
            while pos < len(starts) and starts[pos][0] == ts:
                launch(ts, starts[pos][1], 0)
                pos += 1
            continue
        if te is None:
            return finish
        for tid in model.advance(te):
            c, k = owner.pop(tid)
            launch(model.finish_s[tid], c, k + 1)


def run_transfers(cluster: Cluster, transfers: Sequence[tuple[float, Sequence[FlowSpec], float]],
                  model: FlowModel | None = None, check: bool = False) -> list[float]:
    """Finish time of each ``(start_s, flows, latency_s)`` transfer, all sharing the links."""
    chains = [(start, [Phase(tuple((tuple(l), float(b)) for l, b in flows), float(lat))])
              for start, flows, lat in transfers]
    return run_chains(cluster, chains, model, check)
