"""``simtrain schedule``: a pipeline schedule alone, with fixed action costs, beside its closed form
(:func:`simtrain.api.schedule.schedule_alone` checks the costs and runs it). The ``--gantt`` file is
checked before the schedule is built."""

from __future__ import annotations

import argparse
import json
from typing import Any

from simtrain.cli.types import check_inputs_kept, check_output_file, costs, nonneg_float, positive_float, positive_int
from simtrain.errors import SimtrainError


def cmd_schedule(args: argparse.Namespace) -> int:
    from simtrain.api.schedule import check_costs, schedule_alone
    from simtrain.cli.run import run_progress
    from simtrain.outputs.text_tables import table
    from simtrain.outputs.view import chart_options
    from simtrain.outputs.words import counted

    F, I, W = args.costs  # noqa: N806,E741
    check_costs(F, I, W, args.comm)
    chart = chart_options(args.ranks, None, args.window, args.xlim)
    if (args.ranks or args.window or args.xlim) and not args.gantt:
        raise SimtrainError("--ranks, --window and --xlim choose what --gantt draws; give --gantt OUT.png too")
    if args.gantt:
        check_output_file(args.gantt, (".png", ".svg"), "--gantt")
        check_inputs_kept([("--gantt", args.gantt)], [("schedule", args.name)])
    with run_progress({"json": args.json}) as bar:  # up to about 8 s of planning and replay (budget)
        alone = schedule_alone(args.name, args.pp, args.microbatches, (F, I, W), comm=args.comm, vpp=args.vpp,
                               progress=bar.phase)
        sched, run = alone.schedule, alone.run
        if args.gantt:
            bar.phase("draw")
            _draw_gantt(args, sched, run, chart, (F, I, W))
    if args.json:
        print(json.dumps(alone.report, sort_keys=True))
        return 0
    closed = run.closed_form
    print(f"{sched.name}: {counted(sched.num_ranks, 'rank')}, {counted(sched.num_microbatches, 'micro-batch')}, "
          f"{counted(sched.num_stages, 'stage')}; costs F,I,W = {F:g},{I:g},{W:g}, p2p latency {args.comm:g}")
    print(f"makespan {run.makespan:g}" + (f"  (closed form {closed:g})" if closed is not None
                                           else "  (no closed form for these settings)"))
    print(f"bubble ratio {run.bubble_ratio:.1%}")
    if alone.note:
        print(alone.note)
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
