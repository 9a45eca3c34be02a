"""Pipeline schedules: a scenario's, as a run lowers it (:func:`build_schedule`), and one alone
with fixed action costs beside its closed form (:func:`schedule_alone`, ``simtrain schedule``).

:func:`schedule_alone` checks the costs before anything is built: F and I must be > 0 (with a
forward or an input gradient of no duration every action of a rank starts and ends at one
instant, and the peak of in-flight micro-batches it measures is 0), W may be 0 (B = I), and no
cost nor the transfer time may exceed :data:`MAX_COST`, so the makespan of any schedule it builds
stays finite; the report is checked before it is returned (:func:`simtrain.results.finite.check_finite`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from simtrain.costs import Shape, pp_activation_bytes
from simtrain.api.checks import check_instance
from simtrain.errors import SimtrainError, SpecError
from simtrain.results.finite import check_finite
from simtrain.network.analytic import AnalyticNetwork
from simtrain.scenario import Scenario
from simtrain.schedules import REGISTRY as SCHEDULES, load_schedule, validate
from simtrain.schedules.ir import Schedule
from simtrain.specs.order import dimension_strides
from simtrain.topology.routing.router import Router
from simtrain.workload.fixed_cost import ScheduleRun, run_schedule, schedule_report
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


#: The largest cost of an action or a transfer: 1e15 units, so that even a schedule of millions
#: of actions sums to a finite makespan (float64 reaches 1.8e308).
MAX_COST = 1e15


def check_costs(F: float, I: float, W: float, comm: float) -> None:  # noqa: E741,N803
    """Refuse costs that give no meaningful schedule (see the module docstring)."""
    given = f"{F:g},{I:g},{W:g}"
    if not all(math.isfinite(c) and c >= 0 for c in (F, I, W, comm)):
        raise SpecError(f"--costs {given}, --comm {comm:g}: each must be a finite number >= 0")
    if not (F > 0 and I > 0):
        raise SimtrainError(f"--costs {given}: F and I must be > 0 (W may be 0: the backward is then I alone)")
    if max(F, I, W) > MAX_COST:
        raise SimtrainError(f"--costs {given}: each cost must be at most {MAX_COST:g}")
    if comm > MAX_COST:
        raise SimtrainError(f"--comm {comm:g}: must be at most {MAX_COST:g}")


@dataclass(frozen=True)
class ScheduleAlone:
    """A schedule replayed alone: the schedule, its replay (timeline, makespan, closed form),
    the JSON-ready report and, for DualPipeV, why it ties ZB-H1 where it does (else empty)."""

    schedule: Schedule
    run: ScheduleRun
    report: dict[str, Any]
    note: str


def schedule_alone(name: str, pp: int, microbatches: int, costs: tuple[float, float, float] = (1.0, 1.0, 1.0), *,
                   comm: float = 0.0, vpp: int | None = None,
                   progress: Callable[[str], None] | None = None) -> ScheduleAlone:
    """Schedule ``name`` (registered, or a CSV file) on ``pp`` ranks with ``microbatches``, each
    plain stage's F, I and W taking ``costs`` and each stage-to-stage transfer ``comm``, replayed
    beside its closed form (``progress`` hears of each phase: plan, replay).

    >>> alone = schedule_alone("1f1b", 4, 8)
    >>> alone.run.makespan, alone.run.closed_form
    (33.0, 33.0)
    """
    from simtrain.schedules import REGISTRY

    check_instance("schedule_alone", "name", name, str, "a schedule name or a CSV file's path")
    for argument, value in (("pp", pp), ("microbatches", microbatches)):
        if check_instance("schedule_alone", argument, value, int) < 1:
            raise SpecError(f"schedule_alone: {argument}={value}: must be >= 1")
    if vpp is not None and check_instance("schedule_alone", "vpp", vpp, int) < 1:
        raise SpecError(f"schedule_alone: vpp={vpp}: must be >= 1")
    check_instance("schedule_alone", "costs", costs, (tuple, list), "(F, I, W)")
    if len(costs) != 3 or not all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in (*costs, comm)):
        raise SpecError(f"schedule_alone: costs={costs!r}, comm={comm!r}: costs must be three numbers F, I, W and "
                        f"comm a number")
    F, I, W = (float(c) for c in costs)  # noqa: N806,E741
    comm = float(comm)
    check_costs(F, I, W, comm)
    if vpp and name in REGISTRY and not REGISTRY[name].takes("vpp"):
        raise SimtrainError(f"--vpp: schedule {name} has no model chunks to interleave "
                            f"(only interleaved-1f1b takes --vpp)")
    params: dict[str, Any] = {"vpp": vpp} if vpp else {}
    if name == "zb-auto":
        params.update(costs=(F, I, W), comm=comm)
    if name in REGISTRY:  # plan and replay together: refused before either starts
        from simtrain.specs.budget import check_schedule

        check_schedule(name, pp, microbatches, vpp or 1, replay=True)
    if progress is not None:
        progress(f"plan {name}")
    sched = load_schedule(name, pp, microbatches, **params)
    if progress is not None:
        progress("replay")
    run = run_schedule(sched, F, I, W, comm=comm)  # the closed form of the schedule built
    report = schedule_report(run)
    check_finite(report, f"schedule {sched.name}")
    return ScheduleAlone(sched, run, report, dualpipev_note(sched, run.makespan, (F, I, W), comm))


def _makespan(name: str, pp: int, m: int, costs: tuple[float, float, float], comm: float) -> float | None:
    try:
        return run_schedule(load_schedule(name, pp, m), *costs, comm=comm).makespan
    except SimtrainError:
        return None


def dualpipev_note(sched: Schedule, makespan: float, costs: tuple[float, float, float], comm: float) -> str:
    """Why a DualPipeV schedule takes exactly ZB-H1's makespan with these costs, when it does, and
    what to change to see them differ; empty otherwise (another schedule, or a different makespan).
    With W = F the two bubbles are equal (DualPipe README: ``(PP/2 - 1)(F&B + B - 3W)`` with
    PP = 2p half stages; Qi et al. 2024: ``(p - 1)(F + I - W)``), and an overlapped F&B pair costs
    F + B here: a schedule alone has no communication to hide behind compute."""
    if sched.name != "dualpipev":
        return ""
    pp, m = sched.num_ranks, sched.num_microbatches
    zb = _makespan("zb-h1", pp, m, costs, comm)
    if zb is None or abs(zb - makespan) > 1e-9 * max(zb, 1.0):
        return ""
    F, I, W = costs  # noqa: N806,E741
    why = (": with W = F DualPipeV's bubble, (p-1)(F+2B-3W)/2, equals ZB-H1's, (p-1)(F+I-W), and" if W == F
           else " with these costs:")
    hint = ""
    for other in ((F, I, W / 2), (F, I, W * 2), (F, 2 * I, W)):
        a, b = _makespan("dualpipev", pp, m, other, comm), _makespan("zb-h1", pp, m, other, comm)
        if a is not None and b is not None and abs(a - b) > 1e-9 * max(a, b, 1.0):
            hint = (f"; --costs {','.join(f'{c:g}' for c in other)} gives {a:g} against ZB-H1's {b:g}")
            break
    return (f"note: the same makespan as zb-h1 ({zb:g}){why} an overlapped F&B pair costs F + B here (a "
            f"schedule alone has no communication to hide){hint}")
