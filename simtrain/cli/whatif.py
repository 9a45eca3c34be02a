"""``simtrain whatif``: which cluster trains a model soonest, and which cheapest.

For each topology (``--topologies`` at ``--gpus`` each, or ``--clusters NAME:GPUS,...`` each at its
own GPU count; and, with ``--sweep KEY=v1,v2``, each value of one topology key) the command
finds the cluster's best layout with the search's machinery (:func:`simtrain.search.simulated_search`:
layouts ranked in closed form, the candidates simulated, the fastest that fits in memory kept),
simulates that layout once more for its full report (energy, cost and time to train of
``--train-tokens``, :mod:`simtrain.energy`), and ranks the clusters by time to train and by cost
to train. A sweep writes each changed topology as a file beside the plots
(:mod:`simtrain.outputs.whatif`), so every candidate loads it as a user's file.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from simtrain.cli.analysis import DEGREE_LISTS, add_expert_flags, add_list_flags, layout_grid
from simtrain.cli.run import add_setting_flag
from simtrain.cli.types import jobs_int, list_type, positive_int
from simtrain.errors import SpecError
from simtrain.outputs.files import output_set
from simtrain.settings import OUTPUTS, SETTINGS

#: The folder of the swept topologies' files, inside --out.
TOPOLOGIES = "whatif-topologies"
#: The files and folder of one whatif run in --out, moved in as one set (the plot last).
WHATIF_FILES = ("whatif.png", "whatif-sweep.png", TOPOLOGIES)

#: Where a sweep key goes when the topology file does not set it (the keys of
#: :mod:`simtrain.topology.spec` and :mod:`simtrain.specs.power`); a key the file sets is changed
#: where it is.
SWEEP_TABLES: dict[str, tuple[str, ...]] = {
    "node": ("nvlink_GBps", "nvlink_latency_us", "nvlink_efficiency", "nvls_efficiency", "nics", "nic_gbps",
             "pcie_GBps", "nic_latency_us"),
    "fabric": ("nodes_per_leaf", "spines", "oversubscription", "core_oversubscription", "switch_latency_us",
               "link_latency_us", "nic_efficiency", "switch_ports", "leaves_per_pod", "cores"),
    "power": ("host_w", "nic_w", "switch_w", "pue"),
    "cost": ("price_per_gpu_hour_usd", "purchase_usd", "depreciation_years", "electricity_usd_per_kwh"),
}
#: Sweep keys whose values are whole numbers.
INT_KEYS = ("nics", "nodes_per_leaf", "spines", "switch_ports", "leaves_per_pod", "cores")
#: The report keys a result row carries.
ROW_KEYS = ("step_time_s", "tokens_per_s", "mfu", "energy_per_step_j", "tokens_per_kwh", "cost_per_step_usd",
            "tokens_per_usd", "train_steps", "time_to_train_s", "energy_to_train_kwh", "cost_to_train_usd")


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


def overridden(data: dict[str, Any], key: str, value: float) -> dict[str, Any]:
    """A copy of topology table ``data`` with ``key`` set to ``value``: where the file sets it, or
    in its table of :data:`SWEEP_TABLES`."""
    out = copy.deepcopy(data)
    for table in (*SWEEP_TABLES, "gpu"):
        if isinstance(out.get(table), dict) and key in out[table]:
            out[table][key] = value
            return out
    table = next(t for t, keys in SWEEP_TABLES.items() if key in keys)
    out.setdefault(table, {})[key] = value
    return out


def _table(topology: str) -> dict[str, Any]:
    from simtrain.specs.strict import read_toml
    from simtrain.topology.cluster import preset_table

    if topology.endswith(".toml") or "/" in topology or "\\" in topology:
        return read_toml(topology)
    return preset_table(topology)


def variants(topologies: list[tuple[str, int | None]], sweep: tuple[str, tuple[float, ...]] | None,
             folder: Path) -> list[dict]:
    """Each cluster to try: its name, its GPUs (None: ``--gpus`` or the topology's own), the swept
    value (None without a sweep) and the topology to load (the name, or the file of the changed
    table). A cluster with its own GPU count is checked to hold them (:func:`cluster_for`)."""
    from simtrain.outputs.whatif import write_topology
    from simtrain.topology.cluster import cluster_for, load_topology

    def check(source: str, gpus: int | None) -> None:
        if gpus is None:
            load_topology(source)
            return
        try:
            cluster_for(source, gpus)
        except SpecError as exc:
            raise SpecError(f"--clusters {name}:{gpus}: {exc}") from None

    out = []
    stems: dict[str, int] = {}
    for name, gpus in topologies:
        label = name if gpus is None else f"{name}, {gpus} GPUs"
        if sweep is None:
            check(name, gpus)
            out.append({"topology": name, "gpus": gpus, "sweep_value": None, "source": name, "label": label})
            continue
        key, values = sweep
        data = _table(name)
        stem = Path(name).stem
        stems[stem] = stems.get(stem, 0) + 1
        if stems[stem] > 1:  # a file and a preset (or two files) of one name: each its own files
            stem = f"{stem}-{stems[stem]}"
        for value in values:
            path = write_topology(overridden(data, key, value), folder / f"{stem}-{key}-{value!r}.toml")
            check(path, gpus)
            out.append({"topology": name, "gpus": gpus, "sweep_value": value, "source": path,
                        "label": f"{label} {key}={value:g}"})
    return out


def best_layout(variant: dict, args: argparse.Namespace, price: float | None, bar: Any = None) -> dict[str, Any]:
    """The fastest layout of one cluster that fits in memory, with its report's energy, cost and
    time-to-train keys (:data:`ROW_KEYS`); ``bar`` (a :class:`~simtrain.outputs.progress.Progress`)
    hears of the search's stages."""
    from simtrain import api
    from simtrain.search import simulated_search
    from simtrain.topology.cluster import load_topology

    cluster = load_topology(variant["source"])
    gpus = variant["gpus"] or args.gpus or cluster.num_gpus
    base = {"model": args.model, "topology": variant["source"], "nodes": -(-gpus // cluster.gpus_per_node),
            "seq": args.seq, "gbs": args.gbs, "train_tokens": args.train_tokens, "price_per_gpu_hour_usd": price}

    def progress(done: int, total: int, label: str) -> None:
        if bar is None:
            return
        if label == "estimate" and done == 0:
            bar.phase(f"{variant['label']}: estimate", total, "layouts")
        elif label in ("start", "resumed"):
            bar.phase(f"{variant['label']}: simulate", total, "candidates")
        bar.update(done)

    try:
        found = simulated_search(base, gpus=gpus, gpus_per_node=cluster.gpus_per_node, top=args.top, jobs=args.jobs,
                                 results=None, resume=False, progress=progress, schedules=args.schedules,
                                 mbss=args.mbs, zeros=args.zero, recomputes=args.recompute, **layout_grid(args))
    except SpecError as exc:
        raise SpecError(f"topology {variant['label']}: {exc}") from None
    fitting = [r for r in found["ranking"] if r["fits_in_memory"]]
    if not fitting and found["failed"]:  # say why they failed rather than that none fits
        first = found["failed"][0]
        raise SpecError(f"topology {variant['label']}: no layout of {gpus} GPUs could be simulated "
                        f"({len(found['failed'])} of {found['candidates_simulated']} failed); {first['label']}: "
                        f"{first['error']}")
    if not fitting:
        raise SpecError(f"topology {variant['label']}: no layout of {gpus} GPUs fits in memory when simulated "
                        f"({found['candidates_simulated']} tried); try more GPUs or --recompute full")
    best = fitting[0]
    report = api.simulate(api.resolve(best["settings"], strict=False)).report
    return {**variant, "gpus": gpus, "gpu": cluster.gpu.name, "layout": best["label"], "ep": best["ep"],
            "settings": best["settings"], **{k: report[k] for k in ROW_KEYS}}


def rank(rows: list[dict]) -> None:
    """``time_rank`` and ``cost_rank`` (None without a price) of each row among the rows of its
    sweep value."""
    for value in dict.fromkeys(r["sweep_value"] for r in rows):
        group = [r for r in rows if r["sweep_value"] == value]
        for i, r in enumerate(sorted(group, key=lambda r: (r["time_to_train_s"], r["label"])), 1):
            r["time_rank"] = i
        priced = sorted((r for r in group if r["cost_to_train_usd"] is not None),
                        key=lambda r: (r["cost_to_train_usd"], r["label"]))
        for r in group:
            r["cost_rank"] = None
        for i, r in enumerate(priced, 1):
            r["cost_rank"] = i


def whatif(args: argparse.Namespace) -> dict[str, Any]:
    """The JSON-ready result of ``simtrain whatif`` (rows ranked, plots written unless --no-plot)."""
    from simtrain.outputs.progress import Progress, wanted
    from simtrain.search import check_expert_grid
    from simtrain.specs.model import load_model

    check_expert_grid(load_model(args.model), args.ep, args.etp, args.moe_dispatchers, args.tp)
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
    names = [name for name, _ in clusters]
    unknown = sorted(set(prices) - set(names))
    if unknown:
        raise SpecError(f"--prices {args.prices}: {unknown[0]} is not one of {flag} {', '.join(names)}")
    out = Path(args.out)
    plot = "whatif.png" if sweep is None else "whatif-sweep.png"
    staged = output_set(out, names=WHATIF_FILES, marker=plot) if (args.plot or sweep) else nullcontext(None)
    with staged as stage:  # this run's own folder, its files moved into --out as one set at the end
        folder = out if stage is None else stage
        todo = variants(clusters, sweep, folder / TOPOLOGIES)
        with Progress(sys.stderr, background=True, enabled=wanted(args.progress, sys.stderr, args.json)) as bar:
            rows = [best_layout(v, args, prices.get(v["topology"], args.price_per_gpu_hour_usd), bar) for v in todo]
        rank(rows)
        rows.sort(key=lambda r: (r["sweep_value"] if r["sweep_value"] is not None else 0, r["time_rank"]))
        plots = {}
        if args.plot:
            from simtrain.outputs.whatif import draw_ranking, draw_sweep

            title = f"{args.model}, {args.train_tokens:,} tokens"
            if sweep is None:
                plots["ranking"] = draw_ranking(rows, folder / plot, title)
            else:
                plots["sweep"] = draw_sweep(rows, sweep[0], folder / plot, title)
    if stage is not None:  # the paths the files have now
        for row in rows:
            if row["sweep_value"] is not None:
                row["source"] = str(out / TOPOLOGIES / Path(row["source"]).name)
        plots = {k: str(out / Path(v).name) for k, v in plots.items()}
    return {"model": args.model, "train_tokens": args.train_tokens, "seq": args.seq, "gbs": args.gbs,
            "sweep": {"key": sweep[0], "values": list(sweep[1])} if sweep else None, "results": rows,
            "plots": plots}


def _money(x: float | None) -> str:
    return "-" if x is None else f"${x:,.0f}"


def cmd_whatif(args: argparse.Namespace) -> int:
    from simtrain.outputs.tables import fmt_duration, fmt_seconds, table

    for name in ("price_per_gpu_hour_usd", "train_tokens", "seq", "gbs", "gpus"):
        if getattr(args, name) is not None:
            SETTINGS[name].validate(getattr(args, name))
    OUTPUTS["progress"].validate(args.progress)
    if args.plot or args.sweep:  # the folder the plots and the swept topologies go to
        from simtrain.cli.types import check_output_folder

        check_output_folder(args.out)
    result = whatif(args)
    if args.json:
        from simtrain.finite import check_finite

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
