"""Write a simulated step's files: report, trace, Gantt chart and HTML report, as one set.

Only the API's writers and ``outputs/`` touch the filesystem.
"""

from __future__ import annotations

from pathlib import Path

from simtrain.api.simulate import SimResult
from simtrain.api.checks import check_instance, check_path
from simtrain.outputs.html import SideBySide
from simtrain.outputs.view import ChartOptions
from simtrain.outputs.words import counted


def write_outputs(result: SimResult, out_dir: str | Path, plot: bool = True, *, html: bool = False,
                  chart: ChartOptions | None = None, comparison: SideBySide | None = None) -> dict[str, str]:
    """Write report.json, trace.json, (unless ``plot`` is false) timeline.png showing what
    ``chart`` selects and (with ``html``) report.html, with ``comparison`` in it, into ``out_dir``."""
    from simtrain.results.metrics import memory_timeline
    from simtrain.outputs.files import final_paths, output_set
    from simtrain.outputs.formats import FORMATS, OutputRun
    from simtrain.outputs.trace import run_counters

    check_instance("write_outputs", "result", result, SimResult, "the result of simtrain.simulate")
    check_path("write_outputs", "out_dir", out_dir)
    sc = result.scenario
    memory = memory_timeline(result.timeline, result.static_bytes)
    title = (f"{sc.model.name} on {sc.parallel.world} x {sc.gpu.name}: TP{sc.parallel.tp} "
             f"CP{sc.parallel.cp} PP{sc.parallel.pp} DP{sc.parallel.dp}, {sc.parallel.schedule}, "
             f"{counted(sc.parallel.num_microbatches, 'micro-batch')}")
    run = OutputRun(result, plot, html, chart or ChartOptions(), comparison, memory,
                    run_counters(memory, result.link_series), title)
    paths: dict[str, str] = {}
    with output_set(out_dir) as out:  # a folder of this run's own, moved into place as one set
        for fmt in FORMATS:
            if fmt.wanted(run):
                paths[fmt.name] = str(out / fmt.file)
                fmt.write(run, paths[fmt.name])
    return final_paths(out_dir, paths)

