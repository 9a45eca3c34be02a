"""Plain-text tables for the terminal."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from simtrain.results.metrics import BREAKDOWN, StepMetrics
from simtrain.outputs.words import counted
from simtrain.units import GB, MS, US


def fmt_seconds(s: float) -> str:
    """Seconds in s, ms or us, whichever reads best."""
    if s >= 1:
        return f"{s:.3f} s"
    if s >= MS:
        return f"{s / MS:.2f} ms"
    return f"{s / US:.1f} us"


def fmt_bandwidth(bps: float) -> str:
    """Bytes/s as GB/s (10**9)."""
    return f"{bps / GB:,.1f} GB/s"


def table(rows: list[list[str]], header: list[str] | None = None, align: str = "") -> str:
    """Columns aligned by ``align``, one letter per column (``l`` left, ``r`` right); by default
    the first column left, the others right.

    >>> print(table([["a", "1", "x"]], ["name", "n", "what"], align="lrl"))
    name  n  what
    ----  -  ----
    a     1  x
    """
    all_rows = ([header] if header else []) + rows
    columns = len(all_rows[0])
    align = align or "l" + "r" * (columns - 1)
    widths = [max(len(r[i]) for r in all_rows) for i in range(columns)]
    lines = []
    for j, r in enumerate(all_rows):
        cells = [c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(r, widths, align)]
        lines.append("  ".join(cells).rstrip())
        if header and j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run_summary(report: StepMetrics, config: Mapping[str, Any], num_microbatches: int) -> str:
    """The summary ``simtrain run`` (and ``analytic``) prints: the configuration (a report's
    ``config``), the metrics of the step, its breakdown and its communication, each table with
    the sentence that says how to read it against the others."""
    c = config
    step = report["step_time_s"]
    br = report["breakdown_s"]
    head = (f"{c['model']} on {c['gpus']} x {c['gpu']} ({c['topology']}, {counted(c['nodes'], 'node')})  "
            f"TP={c['tp']} CP={c['cp']} PP={c['pp']} DP={c['dp']} EP={c['ep']}  schedule {c['schedule']}  "
            f"seq {c['seq']}  mbs {c['mbs']}  gbs {c['gbs']} ({counted(num_microbatches, 'micro-batch')} "
            f"per pipeline)  ZeRO-{c['zero']}  recompute {c['recompute']}")
    idle = br["bubble"] + br["imbalance"]
    params = ([["parameters", f"{fmt_count(report['params_total'])} total, "
                              f"{fmt_count(report['params_active'])} active per token"]]
              if "params_total" in report else [])
    top = table([
        *params,
        ["step time", fmt_seconds(step)],
        ["tokens/s", f"{report['tokens_per_s']:,.0f}"],
        ["TFLOP/s per GPU", f"{report['tflops_per_gpu']:.1f}"],
        ["MFU / HFU", f"{report['mfu']:.1%} / {report['hfu']:.1%}"],
        ["idle (bubble + imbalance)", f"{_share(idle, step)} = {_share(br['bubble'], step)} + "
                                      f"{_share(br['imbalance'], step)}"],
        ["stage imbalance", f"{report['stage_imbalance']:.3f} (busiest / mean compute)"],
        ["peak memory per stage", " ".join(f"{g:.1f}" for g in report["peak_memory_gib"]) +
         f" GiB of {report['memory_capacity_gib']:.1f}" + ("" if report["fits_in_memory"] else "  DOES NOT FIT")],
    ])
    breakdown = table([[k, fmt_seconds(br[k]), _share(br[k], step)] for k in BREAKDOWN],
                      ["step breakdown", "time", "share"]) + "\n" + textwrap.fill(IDLE_NOTE, NOTE_WIDTH)
    comm_rows = [[k, fmt_seconds(exposed), fmt_seconds(br[k]), fmt_seconds(report["overlapped_comm_s"][k])]
                 for k, exposed in report["exposed_comm_s"].items()
                 if exposed or report["overlapped_comm_s"][k]]
    comm = (table(comm_rows, ["communication", "exposed", "in breakdown", "overlapped"]) + "\n"
            + textwrap.fill(EXPOSED_NOTE, NOTE_WIDTH) if comm_rows else "")
    if comm_rows and report.get("comm_interference"):
        comm += "\n" + textwrap.fill(
            f"communication kernels hold {report['comm_sms']} SMs: compute beside them runs "
            f"{report['comm_interference']:.1%} longer (--comm-interference), which added "
            f"{fmt_seconds(report['comm_slowdown_s'])} to the most slowed rank's compute.", NOTE_WIDTH)
    return "\n\n".join(x for x in (does_not_fit(report), head, top, breakdown, comm, energy_table(report),
                                   perturbation_table(report), step_time_table(report)) if x)


def memory_excess(report: Mapping[str, Any]) -> str:
    """Which stages' peak memory exceeds the capacity, by how much, and what lowers it; empty when
    every stage fits."""
    over = [f"stage {i} by {x:.1f} GiB" for i, x in enumerate(report["memory_excess_gib"]) if x > 0]
    if report["fits_in_memory"] or not over:
        return ""
    return (f"peak memory exceeds the {report['memory_capacity_gib']:.1f} GiB usable per GPU on "
            f"{', '.join(over)}; {LOWER_MEMORY}")


def does_not_fit(report: Mapping[str, Any]) -> str:
    """The warning a summary starts with when a stage does not fit (:func:`memory_excess`)."""
    excess = memory_excess(report)
    return f"DOES NOT FIT: {excess}" if excess else ""


#: What lowers a run's peak memory, as a run that does not fit is told.
LOWER_MEMORY = "recompute more (--recompute full), raise tp/pp/cp or use ZeRO-3"


def fmt_count(n: float) -> str:
    """A large count in T, B or M (10^12, 10^9, 10^6), with three figures at least.

    >>> fmt_count(46_702_792_704), fmt_count(8_030_261_248), fmt_count(671_026_404_352), fmt_count(950)
    ('46.7B', '8.03B', '671B', '950')
    """
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if n >= scale:
            v = n / scale
            return f"{v:.{0 if v >= 100 else 1 if v >= 10 else 2}f}{unit}"
    return f"{n:,.0f}"


def fmt_duration(s: float) -> str:
    """A long time in days or hours, a short one as :func:`fmt_seconds` gives it."""
    if s >= 2 * 86400:
        return f"{s / 86400:,.1f} days"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    return fmt_seconds(s)


def energy_table(report: Mapping[str, Any]) -> str:
    """Energy, cost and time to train of a report (:mod:`simtrain.results.energy`): the rows it has numbers
    for, empty when it has none (a closed-form report, a GPU of unknown power and no price)."""
    r = report
    rows = []
    if r.get("energy_per_step_j") is not None:
        rows += [["energy per step", f"{r['energy_per_step_j'] / 1e3:,.2f} kJ (GPUs "
                  f"{r['gpu_energy_per_step_j'] / 1e3:,.2f} kJ), mean power {r['mean_power_w'] / 1e3:,.1f} kW"],
                 ["tokens per kWh", f"{r['tokens_per_kwh']:,.0f}"]]
    if r.get("cost_per_step_usd") is not None:
        rows += [["cost per step", f"${r['cost_per_step_usd']:,.4f}"],
                 ["tokens per USD", f"{r['tokens_per_usd']:,.0f}"]]
    if r.get("train_steps") is not None:
        parts = [f"{r['train_steps']:,} steps", fmt_duration(r["time_to_train_s"])]
        if r.get("energy_to_train_kwh") is not None:
            parts.append(f"{r['energy_to_train_kwh'] / 1e3:,.1f} MWh")
        if r.get("cost_to_train_usd") is not None:
            parts.append(f"${r['cost_to_train_usd']:,.0f}")
        tokens = r.get("config", {}).get("train_tokens")
        rows.append([f"to train {tokens:,} tokens" if tokens else "to train", ", ".join(parts)])
    return table(rows, ["energy and cost", ""], align="ll") if rows else ""


def _share(seconds: float, step: float) -> str:
    return f"{seconds / step:.1%}" if step else "-"


#: Width of the notes under the tables, in characters.
NOTE_WIDTH = 100
#: How the breakdown's idle categories read against the Gantt chart.
IDLE_NOTE = ("bubble + imbalance: the compute stream's idle time with no communication running, the "
             "gaps of the Gantt chart; imbalance is the busiest rank's compute beyond the mean (the time "
             "the others wait for it), bubble the rest (pipeline fill and drain).")
#: How the exposed communication reads against the breakdown.
EXPOSED_NOTE = ("exposed: the time a kind runs while the compute stream is idle; the breakdown charges each "
                "such moment to one kind only, in the order tp, cp, ep, pp, dp, so exposed minus in "
                "breakdown is the time the kind ran under another kind's exposed communication.")


def perturbation_table(report: Mapping[str, Any]) -> str:
    """What the perturbations of a run cost (:mod:`simtrain.api.perturbations`): the step without them and
    each perturbing setting alone; empty without perturbations."""
    p = report.get("perturbations") or {}
    if not p:
        return ""
    base = p["baseline_step_s"]
    rows = [["without perturbations", fmt_seconds(base)],
            ["with all of them", f"{fmt_seconds(base + p['cost_s'])} (+{p['cost_s'] / base:.1%})"]]
    rows += [[f"--{k.replace('_', '-')} alone", f"+{fmt_seconds(v)} (+{v / base:.1%})"]
             for k, v in p["cost_by_setting_s"].items()]
    touched = []
    if p["gpus_slowed"]:
        touched.append(f"{len(p['gpus_slowed'])} GPUs slowed")
    if p["gpus_of_another_generation"]:
        touched.append(f"{len(p['gpus_of_another_generation'])} GPUs of another generation")
    links = len(p["links_degraded"]) + len(p["links_failed"])
    if links:
        touched.append(f"{links} links degraded or failed")
    return table(rows, ["perturbations", "step time"], "lr") + "\ntouched: " + ", ".join(touched)


def step_time_table(report: Mapping[str, Any]) -> str:
    """The steady steps' time distribution of a run of several steps; empty for one step."""
    stats = report.get("step_time_stats") or {}
    if len(report.get("step_times_s") or []) < 2:
        return ""
    rows = [[k[:-2], fmt_seconds(stats[k])] for k in ("mean_s", "p50_s", "p90_s", "p99_s", "min_s", "max_s")]
    slow = stats.get("slow_steps") or {}
    note = f"\nslow steps (--slow-steps): {', '.join(str(int(k) + 1) for k in slow)}" if slow else ""
    return table(rows, [f"{stats['steps']} steady steps", "step time"], "lr") + note
