"""CLI commands that put the closed form beside the simulation: analytic, compare, search."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from simtrain.cli.run import (RunArgs, add_run_flags, add_setting_flag, chart_of, check_out_spares_inputs,
                               imported_json, imported_text, run_args, run_progress)
from simtrain.cli.types import check_inputs_kept, jobs_int, list_type, positive_int
from simtrain.settings import SEARCH_OPTIONS, SETTINGS
from simtrain.specs.parallel import SEARCH_DEGREES


def _resolve(run: RunArgs):
    from simtrain.api.estimate import estimate_scenario

    return estimate_scenario(run.settings)


def cmd_analytic(args: argparse.Namespace) -> int:
    from simtrain.api.estimate import estimate, not_modelled_note
    from simtrain.outputs.text_tables import run_summary
    from simtrain.scenario import scenario_config

    run = run_args(args)
    run.refuse_outputs(("out", "html", "plot", "window", "xlim", "ranks", "streams", "require_fit"),
                       "simtrain analytic writes no files and checks no fit: it prints the closed form's "
                       "estimate (simtrain run or compare writes the outputs)")
    sc = _resolve(run)
    config = scenario_config(sc)
    report = estimate(sc)
    note = not_modelled_note(sc)
    if run.outputs["json"]:
        print(json.dumps({**report, "config": config, "not_modelled": note, **imported_json(run)}, sort_keys=True))
        return 0
    if run.imported is not None:
        print(imported_text(run) + "\n")
    print("closed-form estimate (Megatron-LM's formulas: Narayanan et al. 2021, Korthikanti et al. 2022)\n")
    print(run_summary(report, config, report["num_microbatches"]))
    print(f"\nrecomputed layers per stage: {report['recompute_layers']}")
    if note:
        print(note)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from simtrain.api.compare import COMPARE_HEADER, compare
    from simtrain.api.write import write_outputs
    from simtrain.outputs.html import SideBySide
    from simtrain.outputs.text_tables import table

    run = run_args(args, output_defaults={"out": None})
    chart = chart_of(run.outputs)
    out = run.outputs["out"] or ("out" if run.outputs["html"] else None)  # --html alone writes to out/
    if out is None:
        run.refuse_outputs(("plot", "window", "xlim", "ranks", "streams"),
                           "it acts on timeline.png, which compare writes only with --out DIR or --html; "
                           "give one of them")
    run.refuse_outputs(("require_fit",), "compare reports the fit beside the closed form's and does not fail on "
                       "it (simtrain run --require-fit does)")
    check_out_spares_inputs(run, out)
    with run_progress(run.outputs) as bar:
        bar.phase("resolve")
        sc = _resolve(run)
        found = compare(sc, phase=bar.phase)
        analytic, simulated, rows, notes = found.analytic, found.simulated, found.rows, found.notes
        note = analytic["not_modelled"]
        if out:
            bar.phase("write outputs")
            write_outputs(found.result, out, plot=run.outputs["plot"], html=run.outputs["html"], chart=chart,
                          comparison=SideBySide(COMPARE_HEADER, rows, notes))
    if run.outputs["json"]:
        print(json.dumps({"analytic": analytic, "simulated": simulated, **imported_json(run)}, sort_keys=True))
        return 0
    if run.imported is not None:
        print(imported_text(run) + "\n")
    c = simulated["config"]
    print(f"{c['model']} on {c['gpus']} x {c['gpu']}: TP={c['tp']} CP={c['cp']} PP={c['pp']} DP={c['dp']}, "
          f"{c['schedule']}, seq {c['seq']}, gbs {c['gbs']}, recompute {c['recompute']}"
          + (f" ({sc.parallel.recompute} layers per stage)" if c["recompute"] == "auto" else "") + "\n")
    print(table(rows, COMPARE_HEADER))
    if notes:
        print("\nlargest differences:")
        for line in notes:
            print(f"- {line}")
    if note:
        print(f"\n{note}")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from simtrain.api.search import search
    from simtrain.outputs.progress import Progress, wanted
    from simtrain.outputs.text_tables import table

    results = Path(args.results) if args.results else None
    if results is not None:  # appended to, or replaced without --resume
        check_inputs_kept([("--results", results)], [("--model", args.model), ("--topology", args.topology)])
    for name in SEARCH_OPTIONS:
        if getattr(args, name) is not None:
            SEARCH_OPTIONS[name].validate(getattr(args, name))
    bar = Progress(sys.stderr, background=True, enabled=wanted(args.progress, sys.stderr, args.json))

    def progress(done: int, total: int, label: str) -> None:
        if label == "estimate":
            if done == 0:
                bar.phase("estimate", total, "layouts")
        elif label in ("start", "resumed"):
            bar.phase("simulate", total, "candidates")
        bar.update(done)

    with bar:
        out = search(args.model, args.topology, gpus=args.gpus, seq=args.seq, gbs=args.gbs, nodes=args.nodes,
                     top=args.top, jobs=args.jobs, results=results, resume=args.resume, progress=progress,
                     executor=args.executor, scheduler=args.scheduler, schedules=args.schedules, vpps=args.vpp,
                     mbss=args.mbs, zeros=args.zero, recomputes=args.recompute, **layout_grid(args))
    if args.json:
        from simtrain.results.finite import check_finite

        check_finite(out, "search result")
        print(json.dumps(out, sort_keys=True))
        return 0
    bounded = out["candidates_bounded"]
    print(f"{out['candidates_enumerated']} layouts enumerated, {out['candidates_fit']} fit in memory by the "
          f"closed form, {out['candidates_simulated']} simulated"
          + (f", {bounded} skipped: their step lower bound exceeds the top {args.top}'s" if bounded else ""))
    rows = []
    shown = out["ranking"][:args.top] if args.top else out["ranking"]
    for r in shown:
        fits = "" if r["fits_in_memory"] else "  (simulated peak exceeds memory)"
        rows.append([str(r["simulated_rank"]), str(r["analytic_rank"]), r["label"],
                     f"{r['simulated_mfu']:.1%}", f"{r['analytic_mfu']:.1%}",
                     f"{r['simulated_step_time_s']:.3f}", f"{r['analytic_step_time_s']:.3f}" + fits])
    print(table(rows, ["sim rank", "analytic rank", "layout", "sim MFU", "analytic MFU", "sim step s",
                       "analytic step s"]))
    if len(shown) < len(out["ranking"]):
        print(f"(the top {len(shown)} of {len(out['ranking'])} simulated; --json lists them all)")
    rho = out["spearman"]
    print(f"\nSpearman rank correlation between the two orders: {rho:.3f}" if rho is not None else
          "\nSpearman rank correlation: undefined (fewer than two candidates)")
    for r in out["failed"]:
        print(f"failed: {r['label']}: {r['error']}")
    return 0


#: ``simtrain search``'s lists of values to try: the setting and the default list.
_SEARCH_LISTS = (("vpp", (1,)), ("mbs", (1,)), ("zero", (1,)), ("recompute", ("auto",)))
#: The degrees ``search`` and ``whatif`` try (:data:`simtrain.specs.parallel.SEARCH_DEGREES`).
DEGREE_LISTS = tuple(SEARCH_DEGREES.items())


def add_expert_flags(p: argparse.ArgumentParser) -> None:
    """``--ep``, ``--etp`` and ``--moe-dispatchers``: the MoE degrees and dispatchers to try
    (``search`` and ``whatif``; :func:`simtrain.layout_search.simulated.check_expert_grid` says which are valid)."""
    from simtrain.settings import POSITIVE
    from simtrain.specs.parallel import MOE_DISPATCHERS

    p.add_argument("--ep", dest="ep", type=list_type(int, POSITIVE), metavar="N,..",
                   help="expert-parallel degrees to try, comma-separated, for an MoE model (default: every EP "
                   "that divides the experts and, times the expert TP, the ranks of a pipeline stage)")
    p.add_argument("--etp", dest="etp", type=list_type(int, POSITIVE), metavar="N,..",
                   help="expert tensor-parallel degrees to try, comma-separated, each at most the layout's TP "
                   "(default: the divisors of TP)")
    p.add_argument("--moe-dispatchers", dest="moe_dispatchers", type=list_type(str), metavar="NAME,..",
                   help=f"EP token dispatchers to try where EP > 1, comma-separated: {', '.join(MOE_DISPATCHERS)} "
                   f"(default: all)")


def layout_grid(args: argparse.Namespace) -> dict[str, Any]:
    """The degree and dispatcher lists of ``search`` or ``whatif`` as keywords of
    :func:`simtrain.layout_search.simulated.simulated_search`."""
    return {"tps": args.tp, "cps": args.cp, "pps": args.pp, "eps": args.ep, "etps": args.etp,
            "dispatchers": args.moe_dispatchers}


def add_list_flags(p: argparse.ArgumentParser, lists: tuple[tuple[str, tuple], ...]) -> None:
    """A comma-separated list flag per (setting, default values) of ``lists``, each value checked
    as the setting's own flag checks it (``search`` and ``whatif``)."""
    for name, default in lists:
        s = SETTINGS[name]
        p.add_argument(*s.cli_flags, dest=name, type=list_type(s.flag_kind, s.rule), default=default,
                       metavar=f"{s.metavar},..", help=f"values of --{name.replace('_', '-')} to try, "
                       f"comma-separated (default {','.join(map(str, default))})")


def _add_search_flags(p: argparse.ArgumentParser) -> None:
    for name in ("model", "topology", "gpus"):
        add_setting_flag(p, SETTINGS[name], required=True)
    add_setting_flag(p, SETTINGS["nodes"])
    for name in ("seq", "gbs"):
        add_setting_flag(p, SETTINGS[name], required=True)
    p.add_argument("--schedules", "--schedule", type=list_type(str), default=("1f1b",), metavar="NAME,..",
                   help="pipeline schedules to try, comma-separated (default 1f1b)")
    add_list_flags(p, DEGREE_LISTS + _SEARCH_LISTS)
    add_expert_flags(p)
    p.add_argument("--top", type=positive_int, metavar="K",
                   help="the K fastest by simulation: candidates run in the closed form's order until a lower bound "
                        "of each one left (its busiest rank's compute) shows it slower than the K-th best")
    p.add_argument("--jobs", type=jobs_int, default=min(8, os.cpu_count() or 1), metavar="J",
                   help="parallel processes (with --executor dask and no --scheduler: workers of the local dask "
                   "cluster) (default: the CPUs, at most 8)")
    p.add_argument("--results", metavar="FILE.jsonl", help="append each finished candidate here")
    p.add_argument("--resume", action="store_true", help="skip candidates already in --results")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    for s in SEARCH_OPTIONS.values():
        add_setting_flag(p, s, with_default=True, help=s.flag_help)


def add_commands(sub: Any) -> None:
    """Register analytic, compare and search on the main parser's subcommands."""
    p = sub.add_parser("analytic", help="the closed-form estimate of a configuration (same flags as run)")
    add_run_flags(p)
    p.set_defaults(func=cmd_analytic)

    p = sub.add_parser("compare", help="analytic and simulated side by side, per category")
    add_run_flags(p, helps={"out": "also write the simulated run's outputs to this folder"})
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("search", help="rank layouts by simulated step time, with the analytic rank beside")
    _add_search_flags(p)
    p.set_defaults(func=cmd_search)
