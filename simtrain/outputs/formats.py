"""The output-format registry: every file a run writes, one record each, in the order written.

A format is its writer (a module of :mod:`simtrain.outputs`) plus one record in :data:`FORMATS`:
its name (the key of the paths :func:`simtrain.api.write_outputs` returns), its file name, when a
run writes it and how. :func:`simtrain.api.write_outputs` writes every format a run wants, into
one staging folder that moves into place as a set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class OutputRun:
    """What a writer reads: the run (``result``, a :class:`simtrain.api.SimResult`), what the
    caller asked for (``plot``, ``html``, the Gantt ``chart`` options, a side-by-side
    ``comparison``), and what several formats share (the ``memory`` timeline, the trace's
    ``counters``, the charts' ``title``)."""

    result: Any
    plot: bool
    html: bool
    chart: Any
    comparison: Any
    memory: Any
    counters: Any
    title: str


@dataclass(frozen=True)
class OutputFormat:
    """One file of a run: written as ``file`` when ``wanted(run)``, by ``write(run, path)``."""

    name: str
    file: str
    description: str
    wanted: Callable[[OutputRun], bool]
    write: Callable[[OutputRun, str], None]


def _report(run: OutputRun, path: str) -> None:
    from simtrain.outputs.files import write_json_atomic

    write_json_atomic(run.result.report, path)


def _trace(run: OutputRun, path: str) -> None:
    from simtrain.outputs.trace import write_trace

    write_trace(run.result.timeline, path, rank_labels=run.result.rank_labels, counters=run.counters)


def _timeline(run: OutputRun, path: str) -> None:
    from simtrain.outputs.gantt import draw_gantt

    sc, chart = run.result.scenario, run.chart
    draw_gantt(run.result.timeline, path, title=run.title, rank_labels=run.result.rank_labels, memory=run.memory,
               memory_capacity_bytes=sc.gpu.usable_memory_bytes, ranks=chart.ranks, streams=chart.streams,
               window=chart.window)


def _step_times(run: OutputRun, path: str) -> None:
    from simtrain.outputs.step_times import draw_step_times

    report = run.result.report
    draw_step_times(report["step_times_s"], report["step_time_stats"], path, title=run.title)


def _html(run: OutputRun, path: str) -> None:
    from simtrain.outputs.html import write_html_report

    r = run.result
    write_html_report(path, r.timeline, title=run.title, report=r.report, rank_labels=r.rank_labels,
                      memory=run.memory, capacity_bytes=r.scenario.gpu.usable_memory_bytes, comparison=run.comparison)


#: Every output format, in the order a run writes them.
FORMATS: tuple[OutputFormat, ...] = (
    OutputFormat("report", "report.json", "the report: every metric and the configuration", lambda run: True, _report),
    OutputFormat("trace", "trace.json", "Chrome/Perfetto trace of every span, with memory and link counters",
                 lambda run: True, _trace),
    OutputFormat("timeline", "timeline.png", "Gantt chart of the step, with each rank's memory",
                 lambda run: run.plot, _timeline),
    OutputFormat("step_times", "step_times.png", "each step's time, where a run simulates several",
                 lambda run: run.plot and len(run.result.report["step_times_s"]) > 1, _step_times),
    OutputFormat("html", "report.html", "interactive report: timeline, breakdown, memory",
                 lambda run: run.html, _html),
)
