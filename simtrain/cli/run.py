"""``simtrain run``, and the run flags ``analytic`` and ``compare`` share.

The setting flags come from the settings table, one per setting (two for a bool with both
spellings, ``--sp``/``--no-sp``): :data:`~simtrain.settings.SETTINGS` for the scenario and
:data:`~simtrain.settings.OUTPUTS` for the command's output (``--out``, ``--no-plot``, ``--json``,
``--require-fit``). Every one is also a key of a ``--config`` TOML file. A job of another
framework comes in through ``--from-torchtitan`` or ``--from-megatron`` (:mod:`simtrain.importers`).
Values are taken in this order, each over the one before: the default scenario, ``--config`` or
the imported job, the flags.
"""

from __future__ import annotations

import argparse
import gc
import json
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from simtrain.cli.types import setting_type
from simtrain.errors import SimtrainError
from simtrain.settings import DEFAULT_SCENARIO, OUTPUTS, SETTINGS, Setting


def add_setting_flag(p: argparse.ArgumentParser, setting: Setting, *, required: bool = False,
                     with_default: bool = False, help: str = "") -> None:
    """The flag(s) of one setting. A flag not given leaves None (so the settings table, a
    ``--config`` file or the default scenario decide), unless ``with_default``."""
    default = setting.default if with_default else None
    text = help or (setting.help if required else setting.flag_help)
    if setting.kind is bool:
        if setting.cli_flags:
            p.add_argument(*setting.cli_flags, dest=setting.name, action="store_true", default=default,
                           help=text)
        if setting.off_flag:
            p.add_argument(setting.off_flag, dest=setting.name, action="store_false", default=default,
                           help=setting.off_help)
        return
    p.add_argument(*setting.cli_flags, dest=setting.name, type=setting_type(setting), default=default,
                   metavar=setting.metavar, required=required, help=text)


def setting_flags(settings: Mapping[str, Any]) -> list[str]:
    """The flags that give ``settings`` (the inverse of parsing them), in the table's order.

    >>> setting_flags({"pp": 2, "sp": False, "model": "llama3-8b"})
    ['--model', 'llama3-8b', '--pp', '2', '--no-sp']
    """
    out: list[str] = []
    for name, setting in {**SETTINGS, **OUTPUTS}.items():
        value = settings.get(name)
        if value is None:
            continue
        if setting.kind is bool:
            out += list(setting.cli_flags[:1]) if value else [setting.off_flag] if setting.off_flag else []
        else:
            out += [setting.cli_flags[0], str(value)]
    return out


def add_run_flags(p: argparse.ArgumentParser, helps: Mapping[str, str] | None = None) -> None:
    """``--config``, the job imports, every setting's flag and the output flags; ``helps``
    replaces the help of some of them (``{"out": ...}``)."""
    helps = helps or {}
    p.add_argument("--config", metavar="FILE.toml",
                   help="experiment TOML: settings as keys (tp = 8, sp = false, out = \"runs/a\", ...); "
                        "flags override it")
    p.add_argument("--from-torchtitan", metavar="FILE.toml",
                   help="take the scenario from a torchtitan job TOML ([model], [parallelism], [training], "
                        "[activation_checkpoint]); flags override it")
    p.add_argument("--from-megatron", metavar="ARGS|FILE",
                   help="take the scenario from Megatron-LM arguments: a quoted argument string or a launch "
                        "script (torchrun ... pretrain_gpt.py --tensor-model-parallel-size 8 ...); flags "
                        "override it")
    for setting in (*SETTINGS.values(), *OUTPUTS.values()):
        add_setting_flag(p, setting, help=helps.get(setting.name, ""))


@dataclass(frozen=True)
class RunArgs:
    """What the run flags ask for: the scenario settings given (by ``--config``, an imported
    job or the flags), the output settings (every key of :data:`~simtrain.settings.OUTPUTS`)
    and the imported job, if any."""

    settings: dict[str, Any]
    outputs: dict[str, Any]
    imported: Any = None  # simtrain.importers.Imported
    flags: dict[str, Any] = field(default_factory=dict)  # the settings given as flags
    inputs: tuple[tuple[str, str], ...] = ()  # (flag, path) of each input that may be a file
    given_outputs: tuple[str, ...] = ()  # the output settings given (as flags or by --config)

    def refuse_outputs(self, names: tuple[str, ...], why: str) -> None:
        """A one-line error naming the first of the output settings ``names`` that was given,
        with ``why`` it has no effect."""
        for name in names:
            if name in self.given_outputs:
                setting = OUTPUTS[name]
                value = self.outputs[name]
                flag = (setting.off_flag if not value else setting.cli_flags[0]) if setting.kind is bool \
                    else f"{setting.cli_flags[0]} {value}"
                raise SimtrainError(f"{flag}: {why}")


#: Settings whose value may name an input file (a model TOML or config.json, a topology TOML, a
#: schedule CSV, a calibration CSV).
FILE_SETTINGS = ("model", "topology", "schedule", "calibration")


def run_args(args: argparse.Namespace, output_defaults: Mapping[str, Any] | None = None) -> RunArgs:
    """The settings of ``--config`` or of an imported job with the flags given on top, and the
    output settings (their table defaults, then ``output_defaults``, ``--config``, the flags)."""
    from simtrain import api

    flags = {name: getattr(args, name) for name in SETTINGS if getattr(args, name) is not None}
    out_flags = {name: getattr(args, name) for name in OUTPUTS if getattr(args, name) is not None}
    sources = [f for f in ("config", "from_torchtitan", "from_megatron") if getattr(args, f)]
    if len(sources) > 1:
        raise SimtrainError(f"{' and '.join('--' + f.replace('_', '-') for f in sources)}: give one of them "
                            f"(flags override it)")
    settings: dict[str, Any] = {}
    imported = None
    if args.config:
        settings = api.load_config(args.config)
    elif args.from_torchtitan or args.from_megatron:
        from simtrain.importers import from_megatron, from_torchtitan

        imported = (from_torchtitan(args.from_torchtitan, flags) if args.from_torchtitan
                    else from_megatron(args.from_megatron, flags))
        settings = dict(imported.settings)
    outputs = {**{n: s.default for n, s in OUTPUTS.items()}, **(output_defaults or {}),
               **{k: v for k, v in settings.items() if k in OUTPUTS}, **out_flags}
    scenario = {**{k: v for k, v in settings.items() if k not in OUTPUTS}, **flags}
    inputs = [(f"--{name.replace('_', '-')}", getattr(args, name)) for name in ("config", "from_torchtitan",
                                                                                   "from_megatron") if getattr(args, name)]
    inputs += [(f"--{name}", scenario[name]) for name in FILE_SETTINGS if isinstance(scenario.get(name), str)]
    given = tuple(n for n in OUTPUTS if n in out_flags or n in settings)
    return RunArgs(scenario, outputs, imported, flags, tuple(inputs), given)


def check_out_spares_inputs(run: RunArgs, out: str | None) -> None:
    """Refuse, before the run, an output folder ``out`` where a file of the output set (which
    replaces the whole set of an earlier run) is one of the run's input files."""
    if out is not None:
        import os

        from simtrain.cli import types
        from simtrain.outputs.files import OUTPUT_NAMES

        types.check_inputs_kept([(f"--out {out}", os.path.join(out, n)) for n in OUTPUT_NAMES], run.inputs)


def imported_text(run: RunArgs) -> str:
    """What an imported job became: its keys ignored, and the equivalent ``simtrain run`` command
    (the job's settings with the flags given on top)."""
    job = run.imported
    ignored = f"; ignored (no effect on one step): {', '.join(job.ignored)}" if job.ignored else ""
    command = " ".join(setting_flags({**job.settings, **run.flags}))
    return "\n".join([textwrap.fill(f"{job.framework} job {job.source}{ignored}", 100, subsequent_indent="  "),
                      f"as simtrain settings: simtrain run {command}"])


def imported_json(run: RunArgs) -> dict[str, Any]:
    """The ``imported`` entry of ``--json`` output (empty when no job was imported)."""
    job = run.imported
    if job is None:
        return {}
    return {"imported": {"framework": job.framework, "source": job.source, "settings": job.settings,
                         "ignored": list(job.ignored)}}


def chart_of(outputs: Mapping[str, Any]):
    """The Gantt options (``--ranks``, ``--streams``, ``--window``, ``--xlim``) of the output settings, checked
    before anything is simulated, as is the output folder (``--out``, when given): a file, a
    special file or a folder that cannot be written is refused before the run."""
    from simtrain.cli.types import check_output_folder
    from simtrain.outputs.view import chart_options

    if outputs.get("out") is not None:
        check_output_folder(outputs["out"])
    return chart_options(outputs["ranks"], outputs["streams"], outputs["window"], outputs["xlim"])


def cmd_run(args: argparse.Namespace) -> int:
    from simtrain import api
    from simtrain.outputs.text_tables import memory_excess, run_summary

    run = run_args(args)
    chart = chart_of(run.outputs)
    check_out_spares_inputs(run, run.outputs["out"])
    with run_progress(run.outputs) as bar:
        bar.phase("resolve")
        scenario = api.resolve(run.settings)
        # the cluster graph (a million edges at 100,000 GPUs) lives through the run: out of the
        # cycle collector's full passes, which would otherwise traverse it again and again; given
        # back after, for a caller that runs main() again in the same process (a test, a notebook)
        gc.freeze()
        try:
            bar.phase("simulate")
            result = api.simulate(scenario)
            report = result.report
            if run.outputs["require_fit"] and not report["fits_in_memory"]:
                raise SimtrainError(f"--require-fit: {memory_excess(report)}")
            bar.phase("write outputs")
            paths = api.write_outputs(result, run.outputs["out"], plot=run.outputs["plot"], html=run.outputs["html"],
                                      chart=chart)
        finally:
            gc.unfreeze()
    if run.outputs["json"]:
        print(json.dumps({**report, "wall_s": result.wall_s, "outputs": paths, **imported_json(run)},
                         sort_keys=True))
    else:
        if run.imported is not None:
            print(imported_text(run) + "\n")
        print(run_summary(report, report["config"], report["num_microbatches"]))
        note = _compute_note(report) + _expert_note(scenario)
        if note:
            print(note)
        print(f"\nwrote {', '.join(paths.values())}  ({report['num_events']:,} operations "
              f"simulated in {result.wall_s:.2f} s)")
    return 0


def run_progress(outputs: Mapping[str, Any]) -> Any:
    """The progress bar of a command (:mod:`simtrain.outputs.progress`): on stderr, redrawn in the
    background, drawn only on a terminal as ``--progress`` and ``--json`` say."""
    import sys

    from simtrain.outputs.progress import Progress, wanted

    mode = OUTPUTS["progress"].validate(outputs.get("progress") or "auto")
    return Progress(sys.stderr, background=True, enabled=wanted(mode, sys.stderr, bool(outputs.get("json"))))


def _compute_note(report: dict[str, Any]) -> str:
    """How the layers split over the pipeline chunks, and where the kernel times came from."""
    from simtrain.workload.stages import describe_split

    chunks = report["layers_per_chunk"]
    lines = [f"layers per pipeline chunk: {describe_split(chunks)}"] if len(chunks) > 1 else []
    src = report["kernel_sources"]
    if src["measured"] or src["interpolated"]:
        lines.append(f"calibration {report['config']['calibration']}: {src['measured']} kernels measured, "
                     f"{src['interpolated']} interpolated, {src['model']} from the kernel model")
    return "\n" + "\n".join(lines) if lines else ""


#: What the published H100 MoE runs measured against the simulation (docs/validation.md), by where
#: each EP group sits: the largest |error| %, inside one node and across 2 nodes, and the (lowest,
#: highest) error % across 4 and 8 nodes. ``tests/validation/test_published_h100.py`` holds the
#: published rows to these.
PUBLISHED_EP_ERROR_PCT = {"one node": 3.0, "2 nodes": 6.0, "4 and 8 nodes": (-17.0, 12.0)}


def _expert_note(scenario: Any) -> str:
    """What the published runs say of a layout whose expert-parallel groups span nodes
    (docs/validation.md, "Where the MoE runs miss"); empty where each group sits in one node."""
    from simtrain.topology.mesh import build_mesh

    par = scenario.parallel
    if par.ep <= 1:
        return ""
    mesh = build_mesh(par.tp, par.cp, par.dp, par.pp, ep=par.ep, etp=par.etp, order=par.order,
                      gpus_per_node=scenario.cluster.gpus_per_node)
    if mesh.intra_node("ep"):
        return ""
    nodes = len({mesh.node_of(rank) for rank in mesh.group_of("ep", 0)})
    bands = PUBLISHED_EP_ERROR_PCT
    slow, fast = bands["4 and 8 nodes"]
    return "\n" + textwrap.fill(
        f"expert parallelism: each EP group of {par.ep} GPUs spans {nodes} nodes. Published H100 MoE runs "
        f"measured, against the simulation: with EP groups across 2 nodes (HybridEP) within {bands['2 nodes']:g}%; "
        f"across 4 and 8 nodes from {-slow:g}% slower to {fast:g}% faster, by software release; inside one node "
        f"within {bands['one node']:g}% (docs/validation.md).", 100, break_on_hyphens=False)


def add_command(sub: Any) -> None:
    """Register ``simtrain run`` on the main parser's subcommands."""
    default = " ".join(f"{k}={v}" for k, v in DEFAULT_SCENARIO.items())
    p = sub.add_parser("run", help="simulate one training step (no flags: the default scenario)",
                       description=f"Simulate one training step of the default scenario ({default}) "
                       f"with the values given by flags, --config or an imported job in place of its "
                       f"own, one value at a time: --pp 1 changes pp and nothing else.")
    add_run_flags(p)
    p.set_defaults(func=cmd_run)
