"""Files of ``simtrain whatif``: the topology variants a sweep runs, and its bar and line plots.

A sweep changes one key of each topology file; :func:`write_topology` writes the changed table
as TOML so that every candidate (possibly in another process) loads it by path, as it would load
a file of its user's. The plots use matplotlib's object API on the Agg canvas (imported inside
the functions, as :mod:`simtrain.outputs.topology_plot` does), written atomically.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simtrain.outputs.files import atomic_open

#: Seconds in a day, for the time-to-train axis.
DAY_S = 86400.0


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))  # a basic TOML string: JSON's escapes are TOML's


def topology_toml(data: Mapping[str, Any]) -> str:
    """A topology table (top-level values, then one level of tables) as TOML text.

    >>> print(topology_toml({"gpu": "h100-sxm", "nodes": 2, "node": {"gpus": 8, "nvswitch": True}}))
    gpu = "h100-sxm"
    nodes = 2
    <BLANKLINE>
    [node]
    gpus = 8
    nvswitch = true
    <BLANKLINE>
    """
    lines = [f"{k} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, Mapping)]
    for name, table in data.items():
        if isinstance(table, Mapping):
            lines += ["", f"[{name}]"] + [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def write_topology(data: Mapping[str, Any], path: str | Path) -> str:
    """Write :func:`topology_toml` of ``data`` to ``path`` (its folder created); the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path) as fh:
        fh.write(topology_toml(data))
    return str(path)


def _figure(panels: int):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0 * panels, 4.2), dpi=110)
    FigureCanvasAgg(fig)
    return fig, [fig.add_subplot(1, panels, i + 1) for i in range(panels)]


def _save(fig, path: str | Path) -> str:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", metadata={"Software": None})
    return str(path)


def draw_ranking(rows: Sequence[Mapping[str, Any]], path: str | Path, title: str) -> str:
    """Bars of each cluster's time to train (days) and, where it has a price, its cost to train
    (USD), clusters in the order of ``rows``."""
    priced = [r for r in rows if r.get("cost_to_train_usd") is not None]
    fig, axes = _figure(2 if priced else 1)
    names = [r["label"] for r in rows]
    axes[0].bar(names, [r["time_to_train_s"] / DAY_S for r in rows], color="#1f77b4")
    axes[0].set_ylabel("time to train (days)")
    if priced:
        axes[1].bar([r["label"] for r in priced], [r["cost_to_train_usd"] for r in priced], color="#ff7f0e")
        axes[1].set_ylabel("cost to train (USD)")
    for ax in axes:
        ax.tick_params(axis="x", labelrotation=20)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    return _save(fig, path)


def draw_sweep(rows: Sequence[Mapping[str, Any]], key: str, path: str | Path, title: str) -> str:
    """Step time and (where priced) cost per step against the swept value, one line per cluster."""
    priced = any(r.get("cost_per_step_usd") is not None for r in rows)
    fig, axes = _figure(2 if priced else 1)
    for name in dict.fromkeys(r["topology"] for r in rows):
        mine = sorted((r for r in rows if r["topology"] == name), key=lambda r: r["sweep_value"])
        xs = [r["sweep_value"] for r in mine]
        axes[0].plot(xs, [r["step_time_s"] for r in mine], marker="o", label=name)
        if priced:
            axes[1].plot(xs, [r["cost_per_step_usd"] for r in mine], marker="o", label=name)
    axes[0].set_ylabel("step time (s)")
    if priced:
        axes[1].set_ylabel("cost per step (USD)")
    for ax in axes:
        ax.set_xlabel(key)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    return _save(fig, path)
