"""The pipeline schedule of a scenario, as a run lowers it."""

from __future__ import annotations

from typing import Any

from simtrain.costs import Shape, pp_activation_bytes
from simtrain.network.analytic import AnalyticNetwork
from simtrain.scenario import Scenario
from simtrain.schedules import REGISTRY as SCHEDULES, load_schedule, validate
from simtrain.schedules.ir import Schedule
from simtrain.specs.order import dimension_strides
from simtrain.topology.routing.router import Router
from simtrain.workload.options import WorkloadOptions
from simtrain.workload.stages import chunk_pass_times, split_layers


def build_schedule(scenario: Scenario, opts: WorkloadOptions | None = None) -> Schedule:
    """The pipeline schedule of ``scenario`` (validated where it comes from a file: replaying a
    built-in generator's output at 8,192 micro-batches takes a second, and
    ``tests/schedules/test_validate.py`` validates every generator); a schedule planned for given costs
    (zb-auto) plans with the real per-stage costs and the real stage-to-stage transfer time."""
    par, model = scenario.parallel, scenario.model
    opts = opts or WorkloadOptions()
    params: dict[str, Any] = {"vpp": par.vpp, "combined_1f1b": par.overlap_moe_expert_parallel_comm}
    record = SCHEDULES.get(par.schedule)
    if record is not None and record.takes("costs"):
        chunks = split_layers(model, par, scenario.gpu, par.pp, opts)
        per_stage = chunk_pass_times(model, par, scenario.gpu, chunks, opts)
        net = AnalyticNetwork(scenario.cluster, Router(scenario.cluster))
        nodes = scenario.cluster.gpus_per_node
        # the next pipeline stage's first rank (:func:`~simtrain.specs.order.dimension_strides`)
        sizes = {"tp": par.tp, "cp": par.cp, "ep": 1, "dp": par.dp, "pp": par.pp}
        pp_stride = dimension_strides(par.order, sizes)["pp"]
        comm = max(net.p2p_time(0, min(par.world - 1, stride), pp_activation_bytes(model, Shape.of(par)))
                   for stride in (pp_stride, nodes)) if par.pp > 1 else 0.0
        params.update(costs=tuple(tuple(c[k] for c in per_stage) for k in range(3)), comm=comm)
    schedule = load_schedule(par.schedule, par.pp, par.num_microbatches, **params)
    if record is None:  # a user's file; the built-in generators are validated by their tests
        validate(schedule)
    return schedule

