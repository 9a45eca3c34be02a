"""``simtrain whatif``: which cluster trains a model soonest, and which cheapest
(:func:`simtrain.api.whatif.whatif`).

``--topologies`` at ``--gpus`` each, or ``--clusters NAME:GPUS,...`` each at its own GPU count;
``--sweep KEY=v1,v2`` runs each value of one topology key; ``--prices NAME=USD,...`` prices a
GPU-hour per topology.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from simtrain.cli.analysis import DEGREE_LISTS, add_expert_flags, add_list_flags, layout_grid
from simtrain.cli.run import add_setting_flag
from simtrain.cli.types import jobs_int, list_type, positive_int
from simtrain.errors import SpecError
from simtrain.settings import OUTPUTS, SETTINGS

from simtrain.api.whatif import INT_KEYS, SWEEP_TABLES


def parse_sweep(text: str) -> tuple[str, tuple[float, ...]]:
    """``KEY=v1,v2,...``: a topology key and its numbers (whole numbers for :data:`INT_KEYS`)."""
    key, sep, values = text.partition("=")
    key = key.strip()
    valid = sorted(k for keys in SWEEP_TABLES.values() for k in keys)
    if not sep or key not in valid:
        raise SpecError(f"--sweep {text}: expected KEY=v1,v2,... with KEY one of {', '.join(valid)}")
    try:
        parsed = list_type(int if key in INT_KEYS else float)(values)
    except argparse.ArgumentTypeError as exc:
        raise SpecError(f"--sweep {text}: {exc}") from None
    return key, tuple(dict.fromkeys(parsed))


def parse_prices(text: str | None) -> dict[str, float]:
    """``--prices NAME=USD,...``: the price of a GPU-hour of each named topology."""
    out: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, _, usd = item.partition("=")
        try:
            value = float(usd)
        except ValueError:
            value = float("nan")
        if not name.strip() or not 0 < value < float("inf"):
            raise SpecError(f"--prices {text}: {item!r}: expected NAME=USD with USD a finite number > 0")
        if name.strip() in out:
            raise SpecError(f"--prices {text}: {name.strip()} is given twice; give each price once")
        out[name.strip()] = value
    return out


def parse_clusters(text: str) -> list[tuple[str, int]]:
    """``--clusters NAME:GPUS,...``: each topology (preset or file) with its GPU count, each name
    once; a count is a whole number >= 1."""
    out: dict[str, int] = {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        name, sep, count = item.rpartition(":")
        name, count = name.strip(), count.strip()
        if not sep or not name or not count.isdigit() or int(count) < 1:
            raise SpecError(f"--clusters {text}: {item!r}: expected NAME:GPUS with GPUS a whole number >= 1 "
                            f"(e.g. h100-ib:256)")
        if name in out:
            raise SpecError(f"--clusters {text}: {name} is given twice; give each cluster once (to compare "
                            f"sizes of one topology, copy its file under another name)")
        out[name] = int(count)
    if not out:
        raise SpecError(f"--clusters {text!r}: expected NAME:GPUS,NAME:GPUS,... (see simtrain list topologies)")
    return list(out.items())


def whatif(args: argparse.Namespace) -> dict[str, Any]:
    """The JSON-ready result of ``simtrain whatif`` (rows ranked, plots written unless --no-plot)."""
    from simtrain.api.whatif import WhatIfQuery, whatif as run_whatif
    from simtrain.outputs.progress import Progress, wanted

    sweep = parse_sweep(args.sweep) if args.sweep else None
    prices = parse_prices(args.prices)
    if args.clusters is not None:
        if args.gpus is not None:
            raise SpecError(f"--gpus {args.gpus} with --clusters: each cluster names its own GPU count "
                            f"(NAME:GPUS); drop --gpus")
        clusters, flag = parse_clusters(args.clusters), "--clusters"
    else:
        names = [t.strip() for t in args.topologies.split(",")]
        if not any(names) or "" in names[:-1] or len(set(filter(None, names))) < len(list(filter(None, names))):
            twice = next((n for n in names if n and names.count(n) > 1), None)
            why = f"{twice} is given twice" if twice else "an empty name"
            raise SpecError(f"--topologies {args.topologies!r}: {why}; expected NAME,NAME,... each once "
                            f"(see simtrain list topologies)")
        names = [n for n in names if n]
        clusters, flag = [(name, None) for name in names], "--topologies"
    query = WhatIfQuery(model=args.model, train_tokens=args.train_tokens, seq=args.seq, gbs=args.gbs, gpus=args.gpus,
                        top=args.top, jobs=args.jobs, schedules=tuple(args.schedules), mbss=tuple(args.mbs),
                        zeros=tuple(args.zero), recomputes=tuple(args.recompute), grid=layout_grid(args))
    names = [name for name, _ in clusters]
    unknown = sorted(set(prices) - set(names))
    if unknown:
        raise SpecError(f"--prices {args.prices}: {unknown[0]} is not one of {flag} {', '.join(names)}")
    with Progress(sys.stderr, background=True, enabled=wanted(args.progress, sys.stderr, args.json)) as bar:
        return run_whatif(query, clusters, sweep=sweep, prices=prices, price_per_gpu_hour_usd=args.price_per_gpu_hour_usd,
                          out=args.out, plot=args.plot, bar=bar)


def _money(x: float | None) -> str:
    return "-" if x is None else f"${x:,.0f}"


def cmd_whatif(args: argparse.Namespace) -> int:
    from simtrain.outputs.text_tables import fmt_duration, fmt_seconds, table

    for name in ("price_per_gpu_hour_usd", "train_tokens", "seq", "gbs", "gpus"):
        if getattr(args, name) is not None:
            SETTINGS[name].validate(getattr(args, name))
    OUTPUTS["progress"].validate(args.progress)
    if args.plot or args.sweep:  # the folder the plots and the swept topologies go to
        from simtrain.cli.types import check_output_folder

        check_output_folder(args.out)
    result = whatif(args)
    if args.json:
        from simtrain.results.finite import check_finite

        check_finite(result, "whatif result")
        print(json.dumps(result, sort_keys=True))
        return 0
    key = result["sweep"]["key"] if result["sweep"] else None
    rows = [[str(r["time_rank"]), str(r["cost_rank"] or "-"), r["topology"],
             *([f"{r['sweep_value']:g}"] if key else []), f"{r['gpus']} x {r['gpu']}", r["layout"],
             fmt_seconds(r["step_time_s"]), f"{r['mfu']:.1%}", fmt_duration(r["time_to_train_s"]),
             "-" if r["energy_to_train_kwh"] is None else f"{r['energy_to_train_kwh'] / 1e3:,.1f}",
             _money(r["cost_to_train_usd"])] for r in result["results"]]
    header = ["time rank", "cost rank", "topology", *([key] if key else []), "GPUs", "best layout", "step",
              "MFU", "time to train", "MWh", "cost to train"]
    print(f"{result['model']}: {result['train_tokens']:,} tokens, seq {result['seq']}, gbs {result['gbs']}\n")
    print(table(rows, header, align="rrl" + ("r" if key else "") + "llrrrrr"))
    if all(r["cost_rank"] is None for r in result["results"]):
        print("\nno price: give --price-per-gpu-hour USD, --prices NAME=USD,... or a [cost] table in the topology")
    for path in result["plots"].values():
        print(f"\nwrote {path}")
    return 0


def add_command(sub: Any) -> None:
    """Register ``simtrain whatif`` on the main parser's subcommands."""
    p = sub.add_parser("whatif", help="rank clusters by time and cost to train a model, each at its best layout")
    add_setting_flag(p, SETTINGS["model"], required=True)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topologies", metavar="NAME|FILE,..",
                       help="topology presets or .toml files to compare, comma-separated, each with --gpus GPUs")
    which.add_argument("--clusters", metavar="NAME:GPUS,..", help="topology presets or .toml files to compare, "
                       "each with its own GPU count, e.g. h100-ib:256,b200-ib:256,a100-hdr:512")
    add_setting_flag(p, SETTINGS["gpus"], help="GPUs of every cluster of --topologies (default: each topology's own)")
    add_setting_flag(p, SETTINGS["train_tokens"], required=True, help="tokens of the training run whose time and "
                     "cost rank the clusters")
    for name in ("seq", "gbs"):
        add_setting_flag(p, SETTINGS[name], with_default=True)
    add_setting_flag(p, SETTINGS["price_per_gpu_hour_usd"], help="price of a GPU-hour of every cluster (default: "
                     "each topology's [cost] table)")
    p.add_argument("--prices", metavar="NAME=USD,..",
                   help="price of a GPU-hour per topology (the names of --topologies or --clusters), over "
                   "--price-per-gpu-hour")
    p.add_argument("--sweep", metavar="KEY=V,..", help="run each value of one topology key (nic_gbps, nvlink_GBps, "
                   "oversubscription, ...) and plot step time and cost against it")
    p.add_argument("--schedules", "--schedule", type=list_type(str), default=("1f1b",), metavar="NAME,..",
                   help="pipeline schedules to try (default 1f1b)")
    add_list_flags(p, DEGREE_LISTS + (("mbs", (1,)), ("zero", (1,)), ("recompute", ("auto",))))
    add_expert_flags(p)
    p.add_argument("--top", type=positive_int, metavar="K",
                   help="per cluster, simulate until the K fastest layouts are proven (search --top); 1 finds the best "
                        "with the fewest simulations")
    p.add_argument("--jobs", type=jobs_int, default=min(8, os.cpu_count() or 1), metavar="J",
                   help="parallel processes (default: the CPUs, at most 8)")
    add_setting_flag(p, OUTPUTS["out"], with_default=True, help="folder of the plot and a sweep's topology files "
                     "(default out)")
    p.add_argument("--no-plot", dest="plot", action="store_false", help="skip the plot")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_setting_flag(p, OUTPUTS["progress"], with_default=True, help=OUTPUTS["progress"].flag_help)
    p.set_defaults(func=cmd_whatif)
