"""Plain-text tables for the terminal."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simtrain.metrics import BREAKDOWN, StepMetrics
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


def table(rows: list[list[str]], header: list[str] | None = None) -> str:
    """Left-aligned first column, right-aligned others."""
    all_rows = ([header] if header else []) + rows
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(all_rows[0]))]
    lines = []
    for j, r in enumerate(all_rows):
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
        if header and j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run_summary(report: StepMetrics, config: Mapping[str, Any], num_microbatches: int) -> str:
    """The summary ``simtrain run`` (and ``analytic``) prints: the configuration (a report's
    ``config``), then the metrics of the step."""
    c = config
    step = report["step_time_s"]
    head = (f"{c['model']} on {c['gpus']} x {c['gpu']} ({c['topology']}, {c['nodes']} nodes)  "
            f"TP={c['tp']} CP={c['cp']} PP={c['pp']} DP={c['dp']} EP={c['ep']}  schedule {c['schedule']}  "
            f"seq {c['seq']}  mbs {c['mbs']}  gbs {c['gbs']} ({num_microbatches} micro-batches "
            f"per pipeline)  ZeRO-{c['zero']}  recompute {c['recompute']}")
    top = table([
        ["step time", fmt_seconds(step)],
        ["tokens/s", f"{report['tokens_per_s']:,.0f}"],
        ["TFLOP/s per GPU", f"{report['tflops_per_gpu']:.1f}"],
        ["MFU / HFU", f"{report['mfu']:.1%} / {report['hfu']:.1%}"],
        ["bubble", f"{report['bubble_ratio']:.1%}"],
        ["stage imbalance", f"{report['stage_imbalance']:.3f} (busiest / mean compute)"],
        ["peak memory per stage", " ".join(f"{g:.1f}" for g in report["peak_memory_gib"]) +
         f" GiB of {report['memory_capacity_gib']:.1f}" + ("" if report["fits_in_memory"] else "  DOES NOT FIT")],
    ])
    excess = [(i, x) for i, x in enumerate(report["memory_excess_gib"]) if x > 0]
    if excess:
        top += "\n" + "; ".join(f"stage {i} exceeds the capacity by {x:.1f} GiB" for i, x in excess)
    rows = []
    for k in BREAKDOWN:
        v = report["breakdown_s"][k]
        rows.append([k, fmt_seconds(v), f"{v / step:.1%}" if step else "-"])
    br = table(rows, ["step breakdown", "time", "share"])
    comm_rows = []
    for k, exposed in report["exposed_comm_s"].items():
        over = report["overlapped_comm_s"][k]
        if exposed or over:
            comm_rows.append([k, fmt_seconds(exposed), fmt_seconds(over)])
    comm = table(comm_rows, ["communication", "exposed", "overlapped"]) if comm_rows else ""
    return "\n\n".join(x for x in (head, top, br, comm) if x)
