"""A lower bound of a simulated step's time, from its schedule and per-chunk pass costs alone.

Each rank runs its compute one operation at a time on its one compute stream, and communication
beside it can only slow it (``comm_interference >= 0``; :mod:`simtrain.engine.simulator`). So a step lasts at
least the compute of its busiest pipeline rank: for each action of the rank's schedule, the F, I
and W time (:func:`~simtrain.workload.stages.chunk_pass_times`) of the model chunk its stage holds
(B = I + W; an overlapped F&B pair both halves). Recompute, the
optimizer step, the TP-chunked GEMMs of ``--tp-comm-overlap`` (smaller, no faster) and every
communication only add to it.

The bound holds where every rank computes with the costs those passes are priced at: it is not
given (None) with compute jitter, a straggler, throttled or slow node, another GPU in some node,
skewed MoE routing (which moves expert work between ranks), or several steps (the report times
the last one, which other ranks' previous step may overlap). A search skips a layout only where
this bound proves it slower than the layouts it already ranks (:mod:`simtrain.layout_search.simulated`);
``tests/workload/test_bound.py`` checks it against simulated steps of every schedule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simtrain.workload.options import WorkloadOptions
from simtrain.workload.stages import chunk_pass_times, split_layers

if TYPE_CHECKING:
    from simtrain.scenario import Scenario

#: Relative slack below the summed pass costs: the lowering adds the same kernel times per op
#: rather than per pass, so its sums may differ from these in the last bits.
ROUNDING = 1e-9


def step_lower_bound(scenario: "Scenario") -> float | None:
    """Seconds the simulated step of ``scenario`` lasts at least (module docstring), or None
    where the bound is not known to hold."""
    from simtrain.api.schedule import build_schedule

    if scenario.jitter.any or scenario.perturbations.any or scenario.routing.skew > 0:
        return None
    if scenario.options.steps != 1:  # the report times the last step, not all of them
        return None
    opts = WorkloadOptions(fold=scenario.fold, routing=scenario.routing, calibration=scenario.calibration)
    schedule = build_schedule(scenario, opts)
    model, par, gpu = scenario.model, scenario.parallel, scenario.gpu
    chunks = split_layers(model, par, gpu, schedule.chain_length, opts)
    costs = chunk_pass_times(model, par, gpu, chunks, opts)
    per_kind = [{"F": f, "I": i, "W": w, "B": i + w} for f, i, w in costs]
    chunk_of = {stage: k for chain in schedule.chain_list() for k, stage in enumerate(chain)}
    busiest = 0.0
    for actions in schedule.actions:
        total = 0.0
        for action in actions:
            for half in action.halves():
                total += per_kind[chunk_of[half.stage]][half.kind]
        busiest = max(busiest, total)
    return busiest * (1.0 - ROUNDING)
