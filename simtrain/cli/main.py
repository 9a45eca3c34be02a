"""Command line: a thin layer over :mod:`simtrain.api`.

Every user error is one line on stderr and exit status 2; a traceback means a bug.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from simtrain.cli.types import costs, fraction, nonneg_float, nonneg_int, positive_int
from simtrain.errors import SimtrainError


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise SimtrainError(f"{self.prog}: {message} (see {self.prog} --help)")


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE.toml", help="experiment TOML with the same keys as the flags")
    p.add_argument("--model", help="model preset or file (.toml, or a Hugging Face config.json)")
    p.add_argument("--topology", help="topology preset or .toml file")
    p.add_argument("--nodes", type=positive_int, help="nodes in the cluster (default: enough for --gpus)")
    p.add_argument("--gpus", type=positive_int, help="GPUs used (default: all of the topology)")
    for dim, text in (("tp", "tensor"), ("pp", "pipeline"), ("dp", "data"), ("cp", "context"),
                      ("ep", "expert"), ("etp", "expert tensor")):
        p.add_argument(f"--{dim}", type=positive_int, help=f"{text} parallel degree")
    p.add_argument("--vpp", type=positive_int, help="virtual pipeline chunks per rank (interleaved)")
    p.add_argument("--schedule", metavar="NAME|FILE.csv", help="pipeline schedule (see simtrain list schedules)")
    p.add_argument("--seq", type=positive_int, help="sequence length, tokens")
    p.add_argument("--mbs", type=positive_int, help="micro-batch size, sequences")
    p.add_argument("--gbs", type=positive_int, help="global batch size, sequences")
    p.add_argument("--zero", type=nonneg_int, help="ZeRO stage 0-3 (default 1)")
    p.add_argument("--sp", dest="sp", action="store_true", default=None, help="sequence parallelism (default on)")
    p.add_argument("--no-sp", dest="sp", action="store_false", help="no sequence parallelism")
    p.add_argument("--recompute", metavar="none|selective|full|N", help="activation recompute policy")
    p.add_argument("--order", help="rank order, innermost first (default tp-cp-ep-dp-pp)")
    p.add_argument("--first-stage-layers", type=positive_int, help="layers on the first pipeline chunk")
    p.add_argument("--last-stage-layers", type=positive_int, help="layers on the last pipeline chunk")
    p.add_argument("--balance-stages", action="store_true", default=None,
                   help="move layers off the first and last stages to equalise stage times")
    p.add_argument("--network", help="network model: analytic (default), flow (max-min fair flows on the "
                   "topology graph) or none (free communication)")
    p.add_argument("--collective-algo", help="force a collective algorithm in flow mode: ring, tree, "
                   "hierarchical, nvls, direct (default: chosen per message like NCCL's tuner)")
    p.add_argument("--efficiency", type=fraction, help="fraction of peak FLOP/s a GEMM reaches")
    p.add_argument("--routing-skew", type=nonneg_float, help="MoE expert popularity skew (Zipf exponent; "
                   "default 0 = uniform routing)")
    p.add_argument("--routing-seed", type=nonneg_int, help="seed of the skewed expert popularity (default 0)")
    p.add_argument("--no-fold", dest="fold", action="store_false", default=None,
                   help="simulate every rank instead of one representative per pipeline rank")
    p.add_argument("--max-events", type=positive_int, help="stop after this many operations "
                   "(default 50,000,000; a normal run stays far below)")
    p.add_argument("--require-fit", action="store_true",
                   help="fail (exit 2) when a stage's peak memory exceeds the GPU's capacity")
    p.add_argument("--out", default="out", help="output folder (default out/)")
    p.add_argument("--no-plot", action="store_true", help="skip timeline.png")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")


_RUN_KEYS = ("model", "topology", "nodes", "gpus", "tp", "pp", "dp", "cp", "ep", "etp", "vpp", "schedule",
             "seq", "mbs", "gbs", "zero", "sp", "recompute", "order", "network", "efficiency", "fold",
             "max_events", "first_stage_layers", "last_stage_layers", "balance_stages", "collective_algo", "routing_skew", "routing_seed")


def _settings(args: argparse.Namespace) -> dict[str, Any] | None:
    from simtrain import api

    settings: dict[str, Any] = {}
    if args.config:
        settings.update(api.load_config(args.config))
    flags = {k: getattr(args, k) for k in _RUN_KEYS if getattr(args, k) is not None}
    if not settings and not flags:
        return None  # the embedded default scenario
    settings.update(flags)
    return settings


def cmd_run(args: argparse.Namespace) -> int:
    from simtrain import api
    from simtrain.outputs.tables import run_summary

    result = api.simulate(api.resolve(_settings(args)))
    if getattr(args, "require_fit", False) and not result.report["fits_in_memory"]:
        over = [f"stage {i} by {x:.1f} GiB" for i, x in enumerate(result.report["memory_excess_gib"]) if x > 0]
        raise SimtrainError(f"--require-fit: peak memory exceeds the {result.report['memory_capacity_gib']:.1f} "
                            f"GiB usable per GPU on {', '.join(over)}; recompute more (--recompute full), "
                            f"raise tp/pp/cp or use ZeRO-3")
    paths = api.write_outputs(result, args.out, plot=not args.no_plot)
    if args.json:
        print(json.dumps({**result.report, "wall_s": result.wall_s, "outputs": paths}, sort_keys=True))
    else:
        print(run_summary(result.report))
        print(f"\nwrote {', '.join(paths.values())}  ({result.report['num_events']:,} operations "
              f"simulated in {result.wall_s:.2f} s)")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from simtrain.schedules import GENERATORS, example_schedules
    from simtrain.specs.gpu import GPU_PRESETS
    from simtrain.specs.model import list_models
    from simtrain.topology.cluster import list_topologies

    names = {"models": list_models, "gpus": lambda: sorted(GPU_PRESETS),
             "topologies": list_topologies,
             "schedules": lambda: sorted(GENERATORS) + example_schedules()}[args.what]()
    if args.json:
        print(json.dumps(names))
    else:
        print("\n".join(names))
    return 0


def cmd_topology(args: argparse.Namespace) -> int:
    from simtrain.outputs.tables import fmt_bandwidth, table
    from simtrain.topology.cluster import load_topology, summary

    cluster = load_topology(args.name, nodes=args.nodes)
    info = summary(cluster)
    if args.draw:
        from simtrain.outputs.topology_plot import draw_topology

        _check_suffix(args.draw, (".png", ".svg"), "--draw")
        draw_topology(cluster, args.draw, link_utilisation=_utilisation(args.report, cluster))
        info["drawing"] = args.draw
    if args.json:
        print(json.dumps(info, sort_keys=True))
        return 0
    print(f"{info['name']}: {info['num_nodes']} nodes x {info['gpus_per_node']} {info['gpu']} = "
          f"{info['num_gpus']} GPUs; fabric {info['fabric'].get('kind')}")
    print(table([[k, str(v)] for k, v in info["nodes_by_kind"].items()], ["node kind", "count"]))
    print()
    rows = []
    for tier, count in info["links_by_kind"].items():
        bw = info["bandwidth_by_tier_Bps"][tier]
        text = fmt_bandwidth(bw) if not isinstance(bw, dict) else f"{fmt_bandwidth(bw['min'])}..{fmt_bandwidth(bw['max'])}"
        rows.append([tier, str(count), text])
    print(table(rows, ["link tier", "links", "bandwidth per direction"]))
    print(f"\nbisection bandwidth {fmt_bandwidth(info['bisection_bandwidth_Bps'])}, "
          f"oversubscription {info['oversubscription']:g}:1")
    if args.draw:
        print(f"wrote {args.draw}")
    return 0


def _utilisation(path: str | None, cluster) -> dict | None:
    """Link utilisation from a flow-fidelity report.json, keyed by graph edge."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            report = json.load(fh)
    except OSError as exc:
        raise SimtrainError(f"--report {path}: cannot read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise SimtrainError(f"--report {path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    links = report.get("links", {}).get("utilisation_by_link") if isinstance(report, dict) else None
    if not links:
        raise SimtrainError(f"--report {path}: has no link utilisation; write it with "
                            f"simtrain run --network flow")
    out = {}
    for name, value in links.items():
        u, _, v = name.partition("->")
        if not cluster.graph.has_edge(u, v):
            raise SimtrainError(f"--report {path}: link {name} is not in topology {cluster.name} with "
                                f"{cluster.num_nodes} nodes (use the run's topology and --nodes)")
        out[(u, v)] = float(value)
    return out


def cmd_mesh(args: argparse.Namespace) -> int:
    from simtrain.topology.mesh import DEFAULT_ORDER, build_mesh, mesh_report
    from simtrain.specs.parallel import resolve_parallel

    gpus_per_node = args.gpus_per_node
    if args.topology:
        from simtrain.topology.cluster import load_topology

        gpus_per_node = load_topology(args.topology, nodes=1).gpus_per_node
    par = resolve_parallel(args.gpus, tp=args.tp, cp=args.cp, pp=args.pp, dp=args.dp, ep=args.ep,
                           etp=args.etp, order=args.order or DEFAULT_ORDER)
    mesh = build_mesh(par.tp, par.cp, par.dp, par.pp, ep=par.ep, etp=par.etp, order=par.order,
                      gpus_per_node=gpus_per_node)
    info = mesh_report(mesh, args.rank)
    if args.json:
        print(json.dumps(info, sort_keys=True))
        return 0
    print(f"{mesh.world} ranks, {gpus_per_node} GPUs per node, order {par.order} (innermost first)")
    for dim, groups in info["groups"].items():
        shown = " ".join(str(g) for g in groups[:4]) + (" ..." if len(groups) > 4 else "")
        where = "inside nodes" if info["intra_node"][dim] else "across nodes"
        print(f"{dim.upper():>3} groups: {shown}  ({len(groups)} groups of {len(groups[0])}, {where})")
    if args.rank is not None:
        coords = " ".join(f"{d.upper()}={v}" for d, v in reversed(list(info["coords"].items())))
        print(f"rank {args.rank}: {coords}")
    return 0


def cmd_schedule(args: argparse.Namespace) -> int:
    from simtrain.outputs.tables import table
    from simtrain.workload.fixed_cost import run_schedule, schedule_report
    from simtrain.schedules import load_schedule

    F, I, W = args.costs  # noqa: N806,E741
    params = {"vpp": args.vpp} if args.vpp else {}
    if args.name == "zb-auto":
        params.update(costs=(F, I, W), comm=args.comm)
    sched = load_schedule(args.name, args.pp, args.microbatches, **params)
    run = run_schedule(sched, F, I, W, comm=args.comm, vpp=args.vpp or 1)
    if args.gantt:
        _check_suffix(args.gantt, (".png", ".svg"), "--gantt")
        from simtrain.outputs.gantt import draw_gantt

        title = (f"{sched.name}: p={sched.num_ranks}, m={sched.num_microbatches}"
                 + (f", v={args.vpp}" if args.vpp else "") + f", F,I,W = {F:g},{I:g},{W:g}, p2p {args.comm:g}"
                 + f"; makespan {run.makespan:g}")
        draw_gantt(run.timeline, args.gantt, title=title, textbook=True,
                   rank_labels={r: f"rank {r}" for r in range(sched.num_ranks)},
                   time_label="time (units of the given costs)")
    report = schedule_report(run)
    if args.json:
        print(json.dumps(report, sort_keys=True))
        return 0
    closed = run.closed_form
    print(f"{sched.name}: {sched.num_ranks} ranks, {sched.num_microbatches} micro-batches, "
          f"{sched.num_stages} stages; costs F,I,W = {F:g},{I:g},{W:g}, p2p latency {args.comm:g}")
    print(f"makespan {run.makespan:g}" + (f"  (closed form {closed:g})" if closed is not None
                                           else "  (no closed form for these settings)"))
    print(f"bubble ratio {run.bubble_ratio:.1%}")
    rows = [[str(r), f"{run.idle_per_rank[r]:g}", f"{run.peak_inflight[r]:g}",
             " ".join(str(a) for a in sched.actions[r][:12]) + (" ..." if len(sched.actions[r]) > 12 else "")]
            for r in range(sched.num_ranks)]
    print(table(rows, ["rank", "idle", "peak in-flight", "actions"]))
    if args.gantt:
        print(f"wrote {args.gantt}")
    return 0


def _check_suffix(path: str, suffixes: tuple[str, ...], flag: str) -> None:
    if not path.lower().endswith(suffixes):
        raise SimtrainError(f"{flag} {path}: the file name must end in {' or '.join(suffixes)}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="simtrain", description="Simulate one training step of a large "
                     "transformer on a GPU cluster, event by event.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("run", help="simulate one training step (no flags: the default scenario)")
    _add_run_flags(p)
    p.set_defaults(func=cmd_run)

    from simtrain.cli.analysis import add_commands
    from simtrain.cli.collective import add_collective_command

    add_commands(sub, _add_run_flags, _settings)
    add_collective_command(sub)

    p = sub.add_parser("schedule", help="run a pipeline schedule alone with fixed action costs")
    p.add_argument("name", metavar="NAME|FILE.csv", help="schedule name or CSV file")
    p.add_argument("--pp", type=positive_int, required=True, help="pipeline ranks")
    p.add_argument("--microbatches", type=positive_int, required=True, help="micro-batches per step")
    p.add_argument("--vpp", type=positive_int, help="model chunks per rank (interleaved-1f1b)")
    p.add_argument("--costs", type=costs, default=(1.0, 1.0, 1.0), metavar="F,I,W",
                   help="cost of F, I and W for one plain stage (default 1,1,1)")
    p.add_argument("--comm", type=nonneg_float, default=0.0, help="p2p latency between stages (default 0)")
    p.add_argument("--gantt", metavar="OUT.png|OUT.svg", help="draw the textbook picture")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_schedule)

    p = sub.add_parser("list", help="list presets")
    p.add_argument("what", choices=("models", "gpus", "topologies", "schedules"))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("topology", help="describe a cluster topology")
    p.add_argument("name", metavar="NAME|FILE", help="topology preset or .toml file")
    p.add_argument("--nodes", type=positive_int, help="number of nodes")
    p.add_argument("--draw", metavar="OUT.png", help="render the graph to a PNG or SVG")
    p.add_argument("--report", metavar="REPORT.json",
                   help="with --draw: colour links by utilisation from a run's report.json (--network flow)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_topology)

    p = sub.add_parser("mesh", help="show the rank grid and communication groups of a layout")
    p.add_argument("--gpus", type=positive_int, required=True)
    for dim in ("tp", "cp", "pp"):
        p.add_argument(f"--{dim}", type=positive_int, default=1)
    p.add_argument("--dp", type=positive_int, help="default: gpus / (tp*cp*pp)")
    p.add_argument("--ep", type=positive_int, default=1)
    p.add_argument("--etp", type=positive_int, help="expert tensor parallel degree (default tp)")
    p.add_argument("--order", help="innermost first, default tp-cp-ep-dp-pp")
    p.add_argument("--gpus-per-node", type=positive_int, default=8)
    p.add_argument("--topology", help="take GPUs per node from this topology")
    p.add_argument("--rank", type=nonneg_int, help="print this rank's coordinates")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_mesh)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        return args.func(args)
    except SimtrainError as exc:
        print(f"simtrain: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("simtrain: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
