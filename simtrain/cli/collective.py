"""``simtrain collective``: time one collective on a topology, nccl-tests style.

``collective_report`` is the library entry point, ``add_collective_command`` registers the CLI
subcommand on the main parser's subparsers. Bandwidths follow nccl-tests ``doc/PERFORMANCE.md``
(algbw = S / t, busbw = algbw x bus factor); sizes accept nccl-tests' binary suffixes (``K``,
``M``, ``G``, ``T`` = powers of 1024, also ``KiB``...), ``KB``, ``MB``, ``GB``, ``TB`` = powers of
1000, plain numbers = bytes.

Concurrent groups (``concurrent_groups = K``): group ``k`` is the first group with every rank
shifted by ``k * s``, where ``s`` is the smallest positive shift that keeps the ``K`` groups
disjoint: ``--gpus 8`` gives the next consecutive blocks of 8, ``--ranks 0,8,...,56`` (one GPU
per node) gives the other local GPU indices, i.e. the DP groups of a TP8 layout.

A size is at most :data:`MAX_SIZE_BYTES`, and the report is printed only when every number in it
is finite (:func:`simtrain.finite.check_finite`).
"""

from __future__ import annotations

import argparse
import json
import re
from fractions import Fraction
from typing import Any

from simtrain.network.algorithms import ALGORITHMS, bandwidths, normalize_op, select_algorithm
from simtrain.cli.types import positive_int
from simtrain.errors import SpecError
from simtrain.finite import check_finite
from simtrain.network.chains import run_chains
from simtrain.network.models import MODELS
from simtrain.network.links import summarize_links
from simtrain.network.planner import Planner
from simtrain.network.solver import FlowModel
from simtrain.outputs.tables import fmt_seconds
from simtrain.outputs.words import counted
from simtrain.topology.cluster import Cluster, load_topology
from simtrain.topology.routes import Router
from simtrain.specs.strict import clip, shown
from simtrain.units import GB, MB, TB, GiB, KB, KiB, MiB, TiB

CLI_OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "p2p")
COLLECTIVE_NETWORKS = tuple(name for name, r in MODELS.items() if r.times_collectives)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*$")
_MULT = {"": 1, "b": 1, "k": KiB, "kib": KiB, "m": MiB, "mib": MiB, "g": GiB, "gib": GiB, "t": TiB, "tib": TiB,
         "kb": int(KB), "mb": int(MB), "gb": int(GB), "tb": int(TB)}
#: The largest message: 1 EiB, a million times the memory of a 72-GPU NVLink domain (GB200 NVL72:
#: 13.5 TB of HBM), so any real collective fits and every time computed from it stays finite.
MAX_SIZE_BYTES = 2**60


def parse_size(text: str) -> int:
    """``256M`` -> 268435456, ``1G`` -> 2**30, ``64KiB`` -> 65536, ``1GB`` -> 10**9, ``4096``,
    ``1.5e3`` -> 1500; a size that is not a whole number of bytes (``1.5``, ``1.1K``) is an error."""
    m = _SIZE.match(str(text))
    mult = _MULT.get(m.group(2).lower()) if m else None
    if mult is None:
        raise SpecError(f"size {shown(text)}: expected bytes as a number with an optional suffix K, M, "
                        f"G, T (powers of 1024, also KiB..TiB) or KB, MB, GB, TB (powers of 1000)")
    if not float(m.group(1)) * mult <= MAX_SIZE_BYTES:
        raise SpecError(f"size {shown(text)}: more than {MAX_SIZE_BYTES:,} bytes (1 EiB), the largest "
                        f"message timed")
    value = Fraction(m.group(1)) * mult
    if value.denominator != 1:
        raise SpecError(f"size {shown(text)}: {float(value):g} bytes is not a whole number of bytes")
    return int(value)


def _groups(first: list[int], k: int, num_gpus: int) -> list[tuple[int, ...]]:
    if k == 1:
        return [tuple(first)]
    for s in range(1, num_gpus if k * len(first) <= num_gpus else 1):  # k groups need k x size GPUs
        shifted = [tuple(g + i * s for g in first) for i in range(k)]
        flat = [g for grp in shifted for g in grp]
        if max(flat) >= num_gpus:
            break
        if len(set(flat)) == len(flat):
            return shifted
    raise SpecError(f"--concurrent-groups {k}: {k} disjoint shifted copies of ranks {first} do not "
                    f"fit in {num_gpus} GPUs; use --nodes to add nodes or fewer groups")


def _ranks(op: str, gpus: int | None, ranks: list[int] | None, cluster: Cluster) -> list[int]:
    n = cluster.num_gpus
    where = f"topology {cluster.name} ({counted(cluster.num_nodes, 'node')} x {cluster.gpus_per_node} GPUs)"
    if (gpus is None) == (ranks is None):
        raise SpecError("give either --gpus N or --ranks a,b,... (not both)")
    if gpus is not None:
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
            raise SpecError(f"--gpus {gpus!r}: must be an integer >= 1")
        if gpus > n:
            raise SpecError(f"--gpus {gpus}: more than the {n} GPUs of {where}; use --nodes")
        group = list(range(gpus))
    else:
        group = list(ranks)
        if not group:
            raise SpecError("--ranks: empty; give GPU indices like 0,8,16")
        for r in group:
            if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < n:
                raise SpecError(f"--ranks: rank {shown(r)} is out of range [0, {n}) for {where}; "
                                f"use --nodes to add nodes")
        if len(set(group)) != len(group):
            raise SpecError(f"--ranks {clip(','.join(map(str, group)))}: ranks repeat")
    if op == "p2p":
        if ranks is not None and len(group) != 2:
            raise SpecError(f"p2p: --ranks needs exactly two ranks (source,destination), got {len(group)}")
        group = [group[0], group[-1]]
    return group


def collective_report(op: str, *, size_bytes: float, gpus: int | None = None,
                      ranks: list[int] | None = None, topology: str | Cluster,
                      nodes: int | None = None, algo: str | None = None,
                      network: str = "analytic", concurrent_groups: int = 1,
                      nvls: bool | None = None, top_links: int = 5) -> dict[str, Any]:
    """Time ``op`` on ``size_bytes`` over a group (``gpus`` = ranks 0..N-1, or explicit ``ranks``;
    p2p: from the first rank to the last), ``concurrent_groups`` disjoint copies at once (module
    docstring), priced by the same :class:`~simtrain.network.planner.Planner` as ``simtrain run``.
    ``nvls`` enables or disables NVLink SHARP (None: as the topology says). Keys: op, size_bytes,
    time_s (last group done), algbw_Bps, busbw_Bps (None when the time is 0), algorithm, protocol,
    channels, network, ranks, groups, uncontended_time_s (closed form, one group), topology,
    nodes; flow mode adds flows, recomputes and top_links (most loaded links)."""
    name = normalize_op(op)
    if network not in COLLECTIVE_NETWORKS:
        raise SpecError(f"--network {network!r}: must be one of {', '.join(COLLECTIVE_NETWORKS)}")
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, (int, float)) or not 0 <= size_bytes <= MAX_SIZE_BYTES:
        raise SpecError(f"--size {shown(size_bytes)}: must be a number of bytes from 0 to {MAX_SIZE_BYTES:,}")
    if isinstance(concurrent_groups, bool) or not isinstance(concurrent_groups, int) or concurrent_groups < 1:
        raise SpecError(f"--concurrent-groups {concurrent_groups!r}: must be an integer >= 1")
    cluster = load_topology(topology, nodes=nodes) if isinstance(topology, str) else topology
    router = Router(cluster)
    group = _ranks(name, gpus, ranks, cluster)
    groups = _groups(group, concurrent_groups, cluster.num_gpus)
    nvls = cluster.nvls if nvls is None else nvls
    algorithm = select_algorithm(name, group, size_bytes, cluster, router, force=algo, nvls=nvls)
    net = Planner(cluster, router, algo=algorithm, nvls=nvls)
    one = net.price(name, group, size_bytes)
    report: dict[str, Any] = {"op": name.replace("_", "-"), "size_bytes": size_bytes,
                              "algorithm": algorithm, "protocol": one.protocol, "channels": one.channels,
                              "network": network, "ranks": group, "groups": [list(g) for g in groups],
                              "uncontended_time_s": one.time_s, "topology": cluster.name,
                              "nodes": cluster.num_nodes}
    if network == "analytic":  # no contention between groups: the slowest group
        time_s = max(net.collective_time(name, g, size_bytes) for g in groups)
    else:
        model = FlowModel(cluster)
        time_s = max(run_chains(cluster, [(0.0, net.phases(name, g, size_bytes)) for g in groups],
                                model), default=0.0)
        report.update(flows=model.usage.flows_added, recomputes=model.recomputes,
                      top_links=summarize_links(model.usage, cluster, time_s, top_links))
    algbw, busbw = bandwidths(name, len(group), size_bytes, time_s)
    report.update(time_s=time_s, algbw_Bps=algbw if time_s > 0 else None,
                  busbw_Bps=busbw if time_s > 0 else None)
    check_finite(report, f"{name.replace('_', '-')} of {size_bytes:,} bytes")
    return report


# ---- CLI ------------------------------------------------------------------------------------
def _size_arg(text: str) -> int:
    try:
        return parse_size(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _ranks_arg(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid rank list {shown(text)}: expected integers like 0,8,16") from None


def _fmt_bw(bps: float | None) -> str:
    return "-" if bps is None else f"{bps / GB:,.1f}"


def _fmt_ranks(ranks: list[int]) -> str:
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    text = ",".join(map(str, ranks))
    return text if len(text) <= 40 else text[:37] + "..."


def format_report(rep: dict[str, Any]) -> str:
    from simtrain.outputs.tables import table

    k = len(rep["groups"])
    head = (f"{rep['op']} of {rep['size_bytes']:,} bytes on {len(rep['ranks'])} GPUs (ranks "
            f"{_fmt_ranks(rep['ranks'])}{f', x {k} concurrent groups' if k > 1 else ''}), "
            f"topology {rep['topology']} ({counted(rep['nodes'], 'node')}), network {rep['network']}")
    rows = [[rep["algorithm"], rep["protocol"], str(rep["channels"]), fmt_seconds(rep["time_s"]),
             _fmt_bw(rep["algbw_Bps"]), _fmt_bw(rep["busbw_Bps"]), fmt_seconds(rep["uncontended_time_s"])]]
    out = [head, table(rows, ["algorithm", "protocol", "channels", "time", "algbw GB/s", "busbw GB/s",
                              "uncontended"])]
    if rep.get("top_links"):
        links = [[r["link"], r["tier"], f"{r['bytes'] / MB:,.1f}", f"{r['capacity_Bps'] / GB:,.1f}",
                  f"{100 * r['mean_utilisation']:.0f}%", f"{100 * r['peak_utilisation']:.0f}%"]
                 for r in rep["top_links"]]
        out += ["", table(links, ["most loaded links", "tier", "MB", "achievable GB/s", "mean util",
                                  "peak util"])]
    return "\n".join(out)


def cmd_collective(args: argparse.Namespace) -> int:
    rep = collective_report(args.op, size_bytes=args.size, gpus=args.gpus, ranks=args.ranks,
                            topology=args.topology, nodes=args.nodes, algo=args.algo,
                            network=args.network, concurrent_groups=args.concurrent_groups,
                            nvls=args.nvls)
    print(json.dumps(rep, sort_keys=True) if args.json else format_report(rep))
    return 0


def add_collective_command(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``simtrain collective`` on the main parser's subparsers; returns the parser."""
    p = subparsers.add_parser("collective", help="time one collective on a topology (nccl-tests style)")
    p.add_argument("op", choices=CLI_OPS)
    p.add_argument("--size", type=_size_arg, required=True, metavar="BYTES",
                   help="bytes (nccl-tests sizes): 256M, 1G, 64KiB = powers of 1024; 1GB = 10**9")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--gpus", type=positive_int, metavar="N", help="ranks 0..N-1")
    who.add_argument("--ranks", type=_ranks_arg, metavar="A,B,..", help="explicit GPU indices")
    p.add_argument("--topology", required=True, help="topology preset or .toml file")
    p.add_argument("--nodes", type=positive_int, help="number of nodes (default: the topology's)")
    p.add_argument("--algo", help=f"force an algorithm: {', '.join(ALGORITHMS)} (default: tuner)")
    p.add_argument("--nvls", action=_OneWay, default=None,
                   help="enable (--no-nvls: disable) NVLink SHARP on NVSwitch nodes (default: the topology's nvls)")
    p.add_argument("--network", choices=COLLECTIVE_NETWORKS, default="analytic",
                   help="analytic (closed form) or flow (max-min fair flows, shows contention)")
    p.add_argument("--concurrent-groups", type=positive_int, default=1, metavar="K",
                   help="run K disjoint shifted copies of the group at once")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_collective)
    return p


class _OneWay(argparse.BooleanOptionalAction):
    """``--X`` / ``--no-X`` where giving both is an error rather than the last one winning."""

    def __call__(self, parser, namespace, values, option_string=None):
        before = getattr(namespace, self.dest)
        super().__call__(parser, namespace, values, option_string)
        if before is not None and before != getattr(namespace, self.dest):
            parser.error(f"{option_string}: {'--' + self.dest} and {'--no-' + self.dest} both given; give one")
