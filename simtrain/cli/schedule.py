"""``simtrain schedule``: a pipeline schedule alone, with fixed action costs, beside its closed form.

The costs are checked before anything is built: F and I must be > 0 (with a forward or an input
gradient of no duration every action of a rank starts and ends at one instant, and the peak of
in-flight micro-batches it measures is 0), W may be 0 (B = I), and no cost nor ``--comm`` may
exceed :data:`MAX_COST`, so the makespan of any schedule the command builds stays finite. The
``--gantt`` file is checked before the schedule is built, and the report before it is printed or
drawn (:func:`simtrain.finite.check_finite`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from simtrain.cli.types import check_inputs_kept, check_output_file, costs, nonneg_float, positive_float, positive_int
from simtrain.errors import SimtrainError
from simtrain.finite import check_finite

#: The largest cost of an action or a transfer: 1e15 units, so that even a schedule of millions
#: of actions sums to a finite makespan (float64 reaches 1.8e308).
MAX_COST = 1e15


def check_costs(F: float, I: float, W: float, comm: float) -> None:  # noqa: E741,N803
    """Refuse costs that give no meaningful schedule (see the module docstring)."""
    given = f"{F:g},{I:g},{W:g}"
    if not (F > 0 and I > 0):
        raise SimtrainError(f"--costs {given}: F and I must be > 0 (W may be 0: the backward is then I alone)")
    if max(F, I, W) > MAX_COST:
        raise SimtrainError(f"--costs {given}: each cost must be at most {MAX_COST:g}")
    if comm > MAX_COST:
        raise SimtrainError(f"--comm {comm:g}: must be at most {MAX_COST:g}")


def cmd_schedule(args: argparse.Namespace) -> int:
    from simtrain.outputs.text_tables import table
    from simtrain.outputs.view import chart_options
    from simtrain.outputs.words import counted
    from simtrain.schedules import REGISTRY, load_schedule
    from simtrain.workload.fixed_cost import run_schedule, schedule_report

    F, I, W = args.costs  # noqa: N806,E741
    check_costs(F, I, W, args.comm)
    chart = chart_options(args.ranks, None, args.window, args.xlim)
    if (args.ranks or args.window or args.xlim) and not args.gantt:
        raise SimtrainError("--ranks, --window and --xlim choose what --gantt draws; give --gantt OUT.png too")
    if args.vpp and args.name in REGISTRY and not REGISTRY[args.name].takes("vpp"):
        raise SimtrainError(f"--vpp: schedule {args.name} has no model chunks to interleave "
                            f"(only interleaved-1f1b takes --vpp)")
    if args.gantt:
        check_output_file(args.gantt, (".png", ".svg"), "--gantt")
        check_inputs_kept([("--gantt", args.gantt)], [("schedule", args.name)])
    params = {"vpp": args.vpp} if args.vpp else {}
    if args.name == "zb-auto":
        params.update(costs=(F, I, W), comm=args.comm)
    if args.name in REGISTRY:  # plan and replay together: refused before either starts
        from simtrain.budget import check_schedule

        check_schedule(args.name, args.pp, args.microbatches, args.vpp or 1, replay=True)
    from simtrain.cli.run import run_progress

    with run_progress({"json": args.json}) as bar:  # up to about 8 s of planning and replay (budget)
        bar.phase(f"plan {args.name}")
        sched = load_schedule(args.name, args.pp, args.microbatches, **params)
        bar.phase("replay")
        run = run_schedule(sched, F, I, W, comm=args.comm)  # the closed form of the schedule built
        report = schedule_report(run)
        check_finite(report, f"schedule {sched.name}")
        if args.gantt:
            bar.phase("draw")
            _draw_gantt(args, sched, run, chart, (F, I, W))
    if args.json:
        print(json.dumps(report, sort_keys=True))
        return 0
    closed = run.closed_form
    print(f"{sched.name}: {counted(sched.num_ranks, 'rank')}, {counted(sched.num_microbatches, 'micro-batch')}, "
          f"{counted(sched.num_stages, 'stage')}; costs F,I,W = {F:g},{I:g},{W:g}, p2p latency {args.comm:g}")
    print(f"makespan {run.makespan:g}" + (f"  (closed form {closed:g})" if closed is not None
                                           else "  (no closed form for these settings)"))
    print(f"bubble ratio {run.bubble_ratio:.1%}")
    note = dualpipev_note(sched, run.makespan, (F, I, W), args.comm)
    if note:
        print(note)
    rows = [[str(r), f"{run.idle_per_rank[r]:g}", f"{run.peak_inflight[r]:g}",
             " ".join(str(a) for a in sched.actions[r][:12]) + (" ..." if len(sched.actions[r]) > 12 else "")]
            for r in range(sched.num_ranks)]
    print(table(rows, ["rank", "idle", "peak in-flight", "actions"]))
    if args.gantt:
        print(f"wrote {args.gantt}")
    return 0


def _draw_gantt(args: argparse.Namespace, sched: Any, run: Any, chart: Any, costs: tuple[float, float, float]) -> None:
    """``--gantt``: the replayed schedule drawn as a textbook chart."""
    from simtrain.outputs.gantt import draw_gantt

    F, I, W = costs  # noqa: N806,E741
    title = (f"{sched.name}: p={sched.num_ranks}, m={sched.num_microbatches}"
             + (f", v={args.vpp}" if args.vpp else "") + f", F,I,W = {F:g},{I:g},{W:g}, p2p {args.comm:g}"
             + f"; makespan {run.makespan:g}")
    draw_gantt(run.timeline, args.gantt, title=title, textbook=True, ranks=chart.ranks, window=chart.window,
               rank_labels={r: f"rank {r}" for r in range(sched.num_ranks)},
               time_label="time (units of the given costs)")


def _makespan(name: str, pp: int, m: int, costs: tuple[float, float, float], comm: float) -> float | None:
    from simtrain.schedules import load_schedule
    from simtrain.workload.fixed_cost import run_schedule

    try:
        return run_schedule(load_schedule(name, pp, m), *costs, comm=comm).makespan
    except SimtrainError:
        return None


def dualpipev_note(sched: Any, makespan: float, costs: tuple[float, float, float], comm: float) -> str:
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


def add_command(sub: Any) -> None:
    """Register ``simtrain schedule`` on the main parser's subcommands."""
    p = sub.add_parser("schedule", help="run a pipeline schedule alone with fixed action costs")
    p.add_argument("name", metavar="NAME|FILE.csv", help="schedule name or CSV file")
    p.add_argument("--pp", type=positive_int, required=True, metavar="P", help="pipeline ranks")
    p.add_argument("--microbatches", type=positive_int, required=True, metavar="M", help="micro-batches per step")
    p.add_argument("--vpp", type=positive_int, metavar="V", help="model chunks per rank, 2 or more: required by interleaved-1f1b (vpp 1 is plain 1f1b)")
    p.add_argument("--costs", type=costs, default=(1.0, 1.0, 1.0), metavar="F,I,W",
                   help="cost of F, I and W for one plain stage (default 1,1,1)")
    p.add_argument("--comm", type=nonneg_float, default=0.0, metavar="C",
                   help="p2p latency between stages (default 0)")
    p.add_argument("--gantt", metavar="OUT.png|OUT.svg", help="draw the textbook picture")
    p.add_argument("--window", metavar="START:END|mb:A:B",
                   help="time window of the picture: START:END in units of the costs, or mb:A:B for "
                        "micro-batches A to B-1 (default: the whole schedule)")
    p.add_argument("--xlim", type=positive_float, metavar="T",
                   help="end of the picture's time axis, in units of the costs: the axis runs from 0 to T, so "
                        "pictures of schedules of different makespans share one axis (default: the makespan)")
    p.add_argument("--ranks", metavar="R,R,...", help="ranks drawn in the picture (default: all)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_schedule)
