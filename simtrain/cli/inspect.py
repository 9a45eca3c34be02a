"""``simtrain list``, ``topology`` and ``mesh``: presets, a cluster, the rank grid of a layout."""

from __future__ import annotations

import argparse
import json
from typing import Any

from simtrain.api.inspect import MESH_SETTINGS
from simtrain.api.presets import PRESET_TABLES
from simtrain.cli.run import add_setting_flag
from simtrain.cli.types import check_inputs_kept, check_output_file, int_in, nonneg_int, positive_int
from simtrain.outputs.words import counted
from simtrain.settings import SETTINGS


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


def cmd_list(args: argparse.Namespace) -> int:
    from simtrain.api.presets import presets

    rows = presets(args.what)
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
    from simtrain.api.inspect import describe_topology
    from simtrain.outputs.text_tables import fmt_bandwidth, table

    if args.draw:
        check_output_file(args.draw, (".png", ".svg"), "--draw")
        check_inputs_kept([("--draw", args.draw)], [("topology", args.name), ("--report", args.report or "")])
    info = describe_topology(args.name, nodes=args.nodes, draw=args.draw, report=args.report)
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
def cmd_mesh(args: argparse.Namespace) -> int:
    from simtrain.api.inspect import describe_mesh

    given = {name: getattr(args, name) for name in MESH_SETTINGS if getattr(args, name) is not None}
    info = describe_mesh(given, gpus_per_node=args.gpus_per_node, topology=args.topology, rank=args.rank)
    if args.json:
        print(json.dumps(info, sort_keys=True))
        return 0
    print(f"{counted(info['world'], 'rank')}, {counted(info['gpus_per_node'], 'GPU')} per node, order "
          f"{info['order']} (innermost first)")
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
    p.add_argument("what", choices=tuple(PRESET_TABLES))
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
    for name in MESH_SETTINGS:
        add_setting_flag(p, SETTINGS[name])
    p.add_argument("--gpus-per-node", type=int_in(1, MAX_GPUS_PER_NODE), default=8, metavar="N",
                   help="GPUs per node (default 8)")
    p.add_argument("--topology", metavar="NAME|FILE", help="take GPUs per node from this topology")
    p.add_argument("--rank", type=nonneg_int, metavar="R", help="print this rank's coordinates")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_mesh)
