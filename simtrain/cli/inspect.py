"""``simtrain list``, ``topology`` and ``mesh``: presets, a cluster, the rank grid of a layout."""

from __future__ import annotations

import argparse
import json
from typing import Any

from simtrain.cli.run import add_setting_flag
from simtrain.cli.types import check_inputs_kept, check_output_file, int_in, nonneg_int, positive_int
from simtrain.errors import SimtrainError
from simtrain.outputs.words import counted
from simtrain.settings import SETTINGS


def _first_formula(func: Any) -> str:
    """The formula a closed-form function's docstring opens with (its first ````...```` span)."""
    import inspect as pyinspect
    import re

    found = re.search(r"``(.+?)``", pyinspect.getdoc(func) or "", re.S)
    return " ".join(found.group(1).split()) if found else "-"


def gpu_rows() -> list[dict[str, Any]]:
    """The GPU presets' key figures: dense BF16/FP8 peak, HBM capacity and bandwidth, NVLink, and
    the flat GEMM efficiency where the preset sets one (None: by GEMM shape)."""
    from simtrain.specs.gpu import GPU_PRESETS
    from simtrain.units import GB, GiB, TFLOPS

    return [{"name": name, "bf16_tflops": g.peak_bf16_flops / TFLOPS,
             "fp8_tflops": None if g.peak_fp8_flops is None else g.peak_fp8_flops / TFLOPS,
             "hbm_gib": g.hbm_bytes / GiB, "hbm_TBps": g.hbm_bandwidth_Bps / (1000 * GB),
             "nvlink_GBps": g.nvlink_Bps / GB, "gemm_efficiency": g.efficiency}
            for name, g in sorted(GPU_PRESETS.items())]


def topology_rows() -> list[dict[str, Any]]:
    """The topology presets' key figures: GPU, GPUs per node, nodes, NICs, fabric."""
    from simtrain.topology.cluster import list_topologies, load_topology
    from simtrain.units import GB

    rows = []
    for name in list_topologies():
        c = load_topology(name)
        fabric = c.fabric
        rows.append({"name": name, "gpu": c.gpu.name, "gpus_per_node": c.gpus_per_node, "nodes": c.num_nodes,
                     "gpus": c.num_gpus, "nics_per_node": fabric.get("nics_per_node", 0),
                     "nic_Gbps": fabric.get("nic_Bps", 0.0) * 8 / GB, "fabric": fabric["kind"],
                     "tiers": fabric.get("tiers", 0), "oversubscription": c.oversubscription})
    return rows


def model_rows() -> list[dict[str, Any]]:
    """The model presets' key figures: parameters (total, active per token), shape, experts."""
    from simtrain.specs.model import list_models, load_model

    return [{"name": name, "params_b": m.params_total / 1e9, "active_params_b": m.params_active / 1e9,
             "layers": m.layers, "hidden": m.hidden, "heads": m.heads, "kv_heads": m.kv_heads or m.heads,
             "experts": m.num_experts, "top_k": m.top_k, "vocab": m.vocab}
            for name, m in ((n, load_model(n)) for n in list_models())]


def schedule_rows() -> list[dict[str, Any]]:
    """The registered schedules (description, activation memory as peak in-flight micro-batches of
    a stage, the bubble's closed form and where it applies) and the example schedule files."""
    from simtrain.schedules import REGISTRY, example_schedules

    rows = []
    for name, rec in REGISTRY.items():
        cf = rec.closed_form
        rows.append({"name": name, "description": rec.description,
                     "peak_in_flight": _first_formula(cf.in_flight) if cf else "-",
                     "bubble": _first_formula(cf.bubble) if cf else "-",
                     "closed_form_applies": cf.condition if cf else "no closed form"})
    rows += [{"name": name, "description": f"schedule file schedules/{name}.csv", "peak_in_flight": "-",
              "bubble": "-", "closed_form_applies": "no closed form"} for name in example_schedules()]
    return rows


def _number(value: float | None, fmt: str = ",.0f") -> str:
    return "-" if value is None else format(value, fmt)


def list_table(what: str, rows: list[dict[str, Any]]) -> str:
    """``simtrain list WHAT`` as a text table."""
    from simtrain.outputs.text_tables import table

    if what == "gpus":
        return table([[r["name"], _number(r["bf16_tflops"]), _number(r["fp8_tflops"]), _number(r["hbm_gib"]),
                       _number(r["hbm_TBps"], ".2f"), _number(r["nvlink_GBps"]),
                       "by shape" if r["gemm_efficiency"] is None else f"{r['gemm_efficiency']:g}"]
                      for r in rows], ["gpu", "BF16 TFLOP/s", "FP8 TFLOP/s", "HBM GiB", "HBM TB/s",
                                       "NVLink GB/s", "GEMM efficiency"])
    if what == "topologies":
        return table([[r["name"], r["gpu"], str(r["gpus_per_node"]), str(r["nodes"]), str(r["gpus"]),
                       f"{r['nics_per_node']} x {r['nic_Gbps']:,.0f}" if r["nics_per_node"] else "-",
                       r["fabric"] + (f", {r['tiers']} tiers" if r["tiers"] else ""),
                       f"{r['oversubscription']:g}:1"]
                      for r in rows], ["topology", "gpu", "GPUs/node", "nodes", "GPUs", "NICs/node x Gb/s",
                                       "fabric", "oversubscription"], align="llrrrrlr")
    if what == "models":
        return table([[r["name"], f"{r['params_b']:,.1f}", f"{r['active_params_b']:,.1f}", str(r["layers"]),
                       str(r["hidden"]), f"{r['heads']}/{r['kv_heads']}",
                       f"{r['experts']} (top {r['top_k']})" if r["experts"] else "-", f"{r['vocab']:,}"]
                      for r in rows], ["model", "params B", "active B", "layers", "hidden", "heads/kv",
                                       "experts", "vocab"])
    return table([[r["name"], r["peak_in_flight"], r["bubble"], r["closed_form_applies"], r["description"]]
                  for r in rows], ["schedule", "peak in flight", "bubble (closed form)", "formulas apply",
                                   "description"], align="lllll")


#: ``simtrain list``'s tables: the rows of each.
LISTS = {"gpus": gpu_rows, "topologies": topology_rows, "models": model_rows, "schedules": schedule_rows}


def cmd_list(args: argparse.Namespace) -> int:
    rows = LISTS[args.what]()
    if args.json:
        print(json.dumps(rows, sort_keys=True))
        return 0
    print(list_table(args.what, rows))
    if args.what == "schedules":
        print("\np: pipeline ranks, m: micro-batches, v: chunks per rank; F, I, W: one stage's forward, "
              "input-gradient and weight-gradient time (B = I + W); memory in activations of one "
              "micro-batch on one plain stage")
    return 0


def cmd_topology(args: argparse.Namespace) -> int:
    from simtrain.outputs.text_tables import fmt_bandwidth, table
    from simtrain.topology.cluster import load_topology, summary

    if args.draw:
        check_output_file(args.draw, (".png", ".svg"), "--draw")
        check_inputs_kept([("--draw", args.draw)], [("topology", args.name), ("--report", args.report or "")])
    elif args.report:
        raise SimtrainError(f"--report {args.report}: colours the links of --draw; give --draw OUT.png too")
    cluster = load_topology(args.name, nodes=args.nodes)
    if args.draw:
        from simtrain.budget import check_drawing

        check_drawing(cluster.spec)  # before the bisection: a drawing of a large cluster is refused at once
    info = summary(cluster)
    if args.draw:
        from simtrain.outputs.topology_plot import draw_topology

        draw_topology(cluster, args.draw, link_utilisation=_utilisation(args.report, cluster))
        info["drawing"] = args.draw
    if args.json:
        print(json.dumps(info, sort_keys=True))
        return 0
    print(f"{info['name']}: {counted(info['num_nodes'], 'node')} x {info['gpus_per_node']} {info['gpu']} = "
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
    from simtrain.specs.strict import read_json, shown

    if path is None:
        return None
    report = read_json(path, f"--report {path}")
    links = report.get("links") if isinstance(report, dict) else None
    links = links.get("utilisation_by_link") if isinstance(links, dict) else None
    if not links or not isinstance(links, dict):
        raise SimtrainError(f"--report {path}: has no link utilisation; write it with "
                            f"simtrain run --network flow")
    out = {}
    for name, value in links.items():
        u, _, v = name.partition("->")
        if not cluster.graph.has_edge(u, v):
            raise SimtrainError(f"--report {path}: link {shown(name)} is not in topology {cluster.name} with "
                                f"{counted(cluster.num_nodes, 'node')} (use the run's topology and --nodes)")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
            raise SimtrainError(f"--report {path}: link {shown(name)}: utilisation {shown(value)} is not a "
                                f"finite number >= 0")
        out[(u, v)] = float(value)
    return out


def _short(group: list[int], most: int = 8) -> str:
    """A group as ``[a, b, ...]``, its first ``most`` ranks and ``...`` when it has more (the JSON
    output lists every rank).

    >>> _short([0, 8, 16], 2)
    '[0, 8, ...]'
    """
    return str(group) if len(group) <= most else "[" + ", ".join(map(str, group[:most])) + ", ...]"


#: The most GPUs one node of ``simtrain mesh --gpus-per-node`` may have: 2**16, a hundred times
#: the largest NVLink domain announced (NVIDIA's NVL576 rack, 576 GPUs).
MAX_GPUS_PER_NODE = 2**16
#: The settings ``simtrain mesh`` takes; each defaults to the default scenario's value.
_MESH = ("gpus", "tp", "cp", "pp", "dp", "ep", "etp", "order")


def cmd_mesh(args: argparse.Namespace) -> int:
    from simtrain.budget import check_ranks
    from simtrain.settings import defaults_note
    from simtrain.specs.parallel import resolve_parallel
    from simtrain.topology.mesh import build_mesh, mesh_report

    gpus_per_node = args.gpus_per_node
    if args.topology:
        from simtrain.topology.cluster import load_topology

        gpus_per_node = load_topology(args.topology, nodes=1).gpus_per_node
    given = {name for name in _MESH if getattr(args, name) is not None}
    values = {name: SETTINGS[name].default if name not in given else getattr(args, name) for name in _MESH}
    try:
        par = resolve_parallel(values.pop("gpus"), **values)
    except SimtrainError as exc:
        raise type(exc)(f"{exc}{defaults_note(str(exc), given)}") from None
    check_ranks(par.world, f"gpus={par.world}")
    mesh = build_mesh(par.tp, par.cp, par.dp, par.pp, ep=par.ep, etp=par.etp, order=par.order,
                      gpus_per_node=gpus_per_node)
    info = mesh_report(mesh, args.rank)
    if args.json:
        print(json.dumps(info, sort_keys=True))
        return 0
    print(f"{counted(mesh.world, 'rank')}, {counted(gpus_per_node, 'GPU')} per node, order {par.order} "
          f"(innermost first)")
    for dim, groups in info["groups"].items():
        shown = " ".join(_short(g) for g in groups[:4]) + (" ..." if len(groups) > 4 else "")
        where = "inside nodes" if info["intra_node"][dim] else "across nodes"
        print(f"{dim.upper():>3} groups: {shown}  ({counted(len(groups), 'group')} of {len(groups[0])}, {where})")
    if args.rank is not None:
        coords = " ".join(f"{d.upper()}={v}" for d, v in reversed(list(info["coords"].items())))
        print(f"rank {args.rank}: {coords}")
    return 0


def add_commands(sub: Any) -> None:
    """Register ``simtrain list``, ``topology`` and ``mesh`` on the main parser's subcommands."""
    p = sub.add_parser("list", help="the presets and their key figures")
    p.add_argument("what", choices=tuple(LISTS))
    p.add_argument("--json", action="store_true", help="print one JSON list of objects")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("topology", help="describe a cluster topology")
    p.add_argument("name", metavar="NAME|FILE", help="topology preset or .toml file")
    p.add_argument("--nodes", type=positive_int, metavar="N", help="number of nodes (default: the topology's)")
    p.add_argument("--draw", metavar="OUT.png|OUT.svg", help="render the graph to a PNG or SVG")
    p.add_argument("--report", metavar="REPORT.json",
                   help="with --draw: colour links by utilisation from a run's report.json (--network flow)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_topology)

    p = sub.add_parser("mesh", help="show the rank grid and communication groups of a layout",
                       description="The rank grid of a layout: the default scenario's, with the values "
                       "given by flags in place of its own.")
    for name in _MESH:
        add_setting_flag(p, SETTINGS[name])
    p.add_argument("--gpus-per-node", type=int_in(1, MAX_GPUS_PER_NODE), default=8, metavar="N",
                   help="GPUs per node (default 8)")
    p.add_argument("--topology", metavar="NAME|FILE", help="take GPUs per node from this topology")
    p.add_argument("--rank", type=nonneg_int, metavar="R", help="print this rank's coordinates")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_mesh)
