"""``simtrain calibrate``: measure the kernels of a layout on the local GPU into a calibration file.

The flags describe the scenario as for ``simtrain run`` (model, tp, cp, ep, mbs, seq, attention,
fp8, ...); every distinct kernel one step of that layout runs on one rank is timed with PyTorch
(:class:`~simtrain.costs.measure.TorchTimer`) and written as CSV (``--out``). A later
``simtrain run --calibration FILE`` takes these times instead of the kernel model's.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from simtrain.cli.run import add_run_flags, run_args, run_progress
from simtrain.cli.types import check_inputs_kept, check_output_file, int_in
from simtrain.api.calibrate import calibrate
from simtrain.costs.kernels import Kernel

DEFAULT_OUT = "calibration.csv"
#: The most runs of one kernel ``--warmup`` and ``--repeat`` ask for (a few seconds of a large GEMM).
MAX_RUNS = 10_000


class CountedTimer:
    """``time_of`` that also reports how many kernels it has timed to ``done(count)`` (a progress
    bar's update), keeping the timer's ``device`` for the table's comment."""

    def __init__(self, time_of: Callable[[Kernel], float], done: Callable[[int], None]):
        self.time_of, self.done, self.count = time_of, done, 0
        self.device = getattr(time_of, "device", "a stand-in timer")

    def __call__(self, kernel: Kernel) -> float:
        seconds = self.time_of(kernel)
        self.count += 1
        self.done(self.count)
        return seconds


def cmd_calibrate(args: argparse.Namespace) -> int:
    from simtrain.costs.measure import TorchTimer

    run = run_args(args, output_defaults={"out": DEFAULT_OUT})
    check_output_file(run.outputs["out"], ("",), "--out")  # before any kernel is timed
    check_inputs_kept([("--out", run.outputs["out"])], run.inputs)
    timer = TorchTimer(device=args.device, warmup=args.warmup, repeat=args.repeat)
    with run_progress(run.outputs) as bar:  # each kernel runs warmup + repeat times: can take minutes
        bar.phase("measure", unit="kernels")
        count, comment = calibrate(run.settings, run.outputs["out"], CountedTimer(timer, bar.update))
    if run.outputs["json"]:
        import json

        print(json.dumps({"kernels": count, "comment": comment, "out": run.outputs["out"]}, sort_keys=True))
        return 0
    print(f"{comment}\nwrote {run.outputs['out']} ({count} kernels)")
    return 0


def add_command(sub: Any) -> None:
    """Register ``simtrain calibrate`` on the main parser's subcommands."""
    p = sub.add_parser("calibrate", help="measure a layout's kernels with PyTorch on the local GPU",
                       description="Time every distinct kernel one step of the layout runs (GEMMs, "
                       "attention, elementwise) with PyTorch on the local GPU and write them as a "
                       "calibration CSV for simtrain run --calibration. Needs the calibrate extra: "
                       "pip install 'simtrain[calibrate]'.")
    add_run_flags(p, helps={"out": f"calibration CSV to write (default {DEFAULT_OUT})"})
    p.add_argument("--device", default="cuda", help="PyTorch device to measure on (default cuda)")
    p.add_argument("--warmup", type=int_in(0, MAX_RUNS), default=3, metavar="N",
                   help="untimed runs per kernel (default 3)")
    p.add_argument("--repeat", type=int_in(1, MAX_RUNS), default=10, metavar="N",
                   help="timed runs per kernel (default 10)")
    p.set_defaults(func=cmd_calibrate)
