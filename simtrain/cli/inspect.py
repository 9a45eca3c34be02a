"""``simtrain list``, ``topology`` and ``mesh``: presets, a cluster, the rank grid of a layout."""

from __future__ import annotations

import argparse
import json
from typing import Any

from simtrain.cli.run import add_setting_flag
from simtrain.cli.types import check_suffix, nonneg_int, positive_int
from simtrain.errors import SimtrainError
from simtrain.settings import SETTINGS


def cmd_list(args: argparse.Namespace) -> int:
    from simtrain.schedules import GENERATORS, example_schedules
    from simtrain.specs.gpu import GPU_PRESETS
    from simtrain.specs.model import list_models
    from simtrain.topology.cluster import list_topologies

    names = {"models": list_models, "gpus": lambda: sorted(GPU_PRESETS),
             "topologies": list_topologies,
             "schedules": lambda: sorted(GENERATORS) + example_schedules()}[args.what]()
    print(json.dumps(names) if args.json else "\n".join(names))
    return 0


def cmd_topology(args: argparse.Namespace) -> int:
    from simtrain.outputs.tables import fmt_bandwidth, table
    from simtrain.topology.cluster import load_topology, summary

    cluster = load_topology(args.name, nodes=args.nodes)
    info = summary(cluster)
    if args.draw:
        from simtrain.outputs.topology_plot import draw_topology

        check_suffix(args.draw, (".png", ".svg"), "--draw")
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
        text = (f"{fmt_bandwidth(bw['min'])}..{fmt_bandwidth(bw['max'])}" if isinstance(bw, dict)
                else fmt_bandwidth(bw))
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
    from simtrain.specs.parallel import resolve_parallel
    from simtrain.topology.mesh import build_mesh, mesh_report

    gpus_per_node = args.gpus_per_node
    if args.topology:
        from simtrain.topology.cluster import load_topology

        gpus_per_node = load_topology(args.topology, nodes=1).gpus_per_node
    par = resolve_parallel(args.gpus, tp=args.tp, cp=args.cp, pp=args.pp, dp=args.dp, ep=args.ep,
                           etp=args.etp, order=args.order)
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


def add_commands(sub: Any) -> None:
    """Register ``simtrain list``, ``topology`` and ``mesh`` on the main parser's subcommands."""
    p = sub.add_parser("list", help="list presets")
    p.add_argument("what", choices=("models", "gpus", "topologies", "schedules"))
    p.add_argument("--json", action="store_true", help="print one JSON list")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("topology", help="describe a cluster topology")
    p.add_argument("name", metavar="NAME|FILE", help="topology preset or .toml file")
    p.add_argument("--nodes", type=positive_int, metavar="N", help="number of nodes (default: the topology's)")
    p.add_argument("--draw", metavar="OUT.png|OUT.svg", help="render the graph to a PNG or SVG")
    p.add_argument("--report", metavar="REPORT.json",
                   help="with --draw: colour links by utilisation from a run's report.json (--network flow)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_topology)

    p = sub.add_parser("mesh", help="show the rank grid and communication groups of a layout")
    add_setting_flag(p, SETTINGS["gpus"], required=True)
    for name in ("tp", "cp", "pp", "dp", "ep", "etp", "order"):
        add_setting_flag(p, SETTINGS[name], with_default=True)
    p.add_argument("--gpus-per-node", type=positive_int, default=8, metavar="N",
                   help="GPUs per node (default 8)")
    p.add_argument("--topology", metavar="NAME|FILE", help="take GPUs per node from this topology")
    p.add_argument("--rank", type=nonneg_int, metavar="R", help="print this rank's coordinates")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_mesh)
