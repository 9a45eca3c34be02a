"""The step-time distribution of a run of several steps (``--steps N``, with ``--jitter`` or
``--slow-steps``): each step's time in order and their histogram, with the mean and the 50th,
90th and 99th percentiles of the steady steps marked (:func:`simtrain.results.metrics.step_time_stats`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simtrain.units import MS


def draw_step_times(times_s: list[float], stats: Mapping[str, Any], path: str, title: str = "") -> None:
    """Write the chart of ``times_s`` (seconds per step) and ``stats`` to the PNG ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ms = [t / MS for t in times_s]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6), constrained_layout=True)
    slow = {int(k) for k in stats.get("slow_steps", {})}
    left.bar(range(1, len(ms) + 1), ms, color=["#d62728" if k in slow else "#1f77b4" for k in range(len(ms))])
    left.set_xlabel("step")
    left.set_ylabel("step time (ms)")
    left.set_ylim(min(ms) * 0.98, max(ms) * 1.01)
    steady = ms[1:] if len(ms) > 1 else ms
    right.hist(steady, bins=min(30, max(5, len(steady) // 2)), color="#1f77b4")
    for key, style in (("mean_s", "-"), ("p50_s", "--"), ("p90_s", "-."), ("p99_s", ":")):
        right.axvline(stats[key] / MS, color="black", linestyle=style, label=f"{key[:-2]} {stats[key] / MS:.2f} ms")
    right.set_xlabel("steady step time (ms)")
    right.set_ylabel("steps")
    right.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=100)
    plt.close(fig)
