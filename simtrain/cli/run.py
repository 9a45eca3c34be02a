"""``simtrain run``, and the run flags ``analytic`` and ``compare`` share.

The setting flags come from :data:`simtrain.settings.SETTINGS`, one per setting (two for a bool
with both spellings, ``--sp``/``--no-sp``). The flags about the command's output rather than the
scenario (``--config``, ``--require-fit``, ``--out``, ``--no-plot``, ``--json``) are defined here.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from simtrain.cli.types import setting_type
from simtrain.errors import SimtrainError
from simtrain.settings import DEFAULT_SCENARIO, SCENARIO_KEYS, SETTINGS, Setting


def add_setting_flag(p: argparse.ArgumentParser, setting: Setting, *, required: bool = False,
                     with_default: bool = False) -> None:
    """The flag(s) of one setting. A flag not given leaves None (so the settings table, a
    ``--config`` file or the default scenario decide), unless ``with_default``."""
    default = setting.default if with_default else None
    if setting.kind is bool:
        if setting.cli_flags:
            p.add_argument(*setting.cli_flags, dest=setting.name, action="store_true", default=default,
                           help=setting.flag_help)
        if setting.off_flag:
            p.add_argument(setting.off_flag, dest=setting.name, action="store_false", default=default,
                           help=setting.off_help)
        return
    p.add_argument(*setting.cli_flags, dest=setting.name, type=setting_type(setting), default=default,
                   metavar=setting.metavar, required=required,
                   help=setting.help if required else setting.flag_help)


def add_run_flags(p: argparse.ArgumentParser, out_help: str = "output folder (default out/)") -> None:
    """``--config``, every setting's flag, and the output flags."""
    p.add_argument("--config", metavar="FILE.toml",
                   help="experiment TOML: settings as keys (tp = 8, sp = false, ...); flags override it")
    for setting in SETTINGS.values():
        add_setting_flag(p, setting)
    p.add_argument("--require-fit", action="store_true",
                   help="fail (exit 2) when a stage's peak memory exceeds the GPU's capacity")
    p.add_argument("--out", default="out", metavar="DIR", help=out_help)
    p.add_argument("--no-plot", action="store_true", help="skip timeline.png")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")


def run_settings(args: argparse.Namespace) -> dict[str, Any] | None:
    """The settings of ``--config`` with the flags given on top; None when neither is given (the
    default scenario)."""
    from simtrain import api

    settings: dict[str, Any] = {}
    if args.config:
        settings.update(api.load_config(args.config))
    flags = {name: getattr(args, name) for name in SETTINGS if getattr(args, name) is not None}
    if not settings and not flags:
        return None
    settings.update(flags)
    return settings


def cmd_run(args: argparse.Namespace) -> int:
    from simtrain import api
    from simtrain.outputs.tables import run_summary

    result = api.simulate(api.resolve(run_settings(args)))
    report = result.report
    if args.require_fit and not report["fits_in_memory"]:
        over = [f"stage {i} by {x:.1f} GiB" for i, x in enumerate(report["memory_excess_gib"]) if x > 0]
        raise SimtrainError(f"--require-fit: peak memory exceeds the {report['memory_capacity_gib']:.1f} "
                            f"GiB usable per GPU on {', '.join(over)}; recompute more (--recompute full), "
                            f"raise tp/pp/cp or use ZeRO-3")
    paths = api.write_outputs(result, args.out, plot=not args.no_plot)
    if args.json:
        print(json.dumps({**report, "wall_s": result.wall_s, "outputs": paths}, sort_keys=True))
    else:
        print(run_summary(report, report["config"], report["num_microbatches"]))
        print(f"\nwrote {', '.join(paths.values())}  ({report['num_events']:,} operations "
              f"simulated in {result.wall_s:.2f} s)")
    return 0


def add_command(sub: Any) -> None:
    """Register ``simtrain run`` on the main parser's subcommands."""
    scenario = ", ".join(f"--{k.replace('_', '-')}" for k in SCENARIO_KEYS)
    default = " ".join(f"{k}={v}" for k, v in DEFAULT_SCENARIO.items())
    p = sub.add_parser("run", help="simulate one training step (no flags: the default scenario)",
                       description=f"Simulate one training step. Given none of {scenario}, the default "
                       f"scenario runs ({default}) with the other flags applied; otherwise a setting "
                       f"not given takes its default.")
    add_run_flags(p)
    p.set_defaults(func=cmd_run)
