"""``simtrain collective``: time one collective on a topology, nccl-tests style
(:func:`simtrain.api.collective.collective`).

Sizes accept nccl-tests' binary suffixes (``K``, ``M``, ``G``, ``T`` = powers of 1024, also
``KiB``...), ``KB``, ``MB``, ``GB``, ``TB`` = powers of 1000, plain numbers = bytes.
"""

from __future__ import annotations

import argparse
import json
import re
from fractions import Fraction
from typing import Any

from simtrain.api.collective import COLLECTIVE_NETWORKS, MAX_SIZE_BYTES, collective
from simtrain.cli.types import positive_int
from simtrain.errors import SpecError
from simtrain.network.algorithms import ALGORITHMS
from simtrain.outputs.text_tables import fmt_seconds
from simtrain.outputs.words import counted
from simtrain.specs.strict import shown
from simtrain.units import GB, MB, TB, GiB, KB, KiB, MiB, TiB

CLI_OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "p2p")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*$")
_MULT = {"": 1, "b": 1, "k": KiB, "kib": KiB, "m": MiB, "mib": MiB, "g": GiB, "gib": GiB, "t": TiB, "tib": TiB,
         "kb": int(KB), "mb": int(MB), "gb": int(GB), "tb": int(TB)}


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
    from simtrain.outputs.text_tables import table

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
    rep = collective(args.op, size_bytes=args.size, gpus=args.gpus, ranks=args.ranks,
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
