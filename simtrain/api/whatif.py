"""What-if: which cluster trains a model soonest, and which cheapest.

For each cluster (a topology at a GPU count; and, with a sweep ``(key, values)``, each value of one
topology key) :func:`whatif` finds the cluster's best layout with the search's machinery
(:func:`simtrain.layout_search.simulated.simulated_search`: layouts ranked in closed form, the candidates
simulated, the fastest that fits in memory kept), simulates that layout once more for its full
report (energy, cost and time to train, :mod:`simtrain.results.energy`), and ranks the clusters by time
to train and by cost to train. A sweep writes each changed topology as a file beside the plots
(:mod:`simtrain.outputs.whatif`), so every candidate loads it as a user's file.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simtrain.api.resolve import resolve
from simtrain.api.search import DEGREES
from simtrain.api.simulate import simulate
from simtrain.errors import SpecError
from simtrain.outputs.files import output_set
from simtrain.outputs.whatif import write_topology
from simtrain.layout_search.simulated import check_expert_grid, simulated_search
from simtrain.specs.model import load_model
from simtrain.specs.strict import read_toml
from simtrain.topology.cluster import cluster_for, load_topology, preset_table

#: The folder of the swept topologies' files, inside --out.
TOPOLOGIES = "whatif-topologies"
#: The files and folder of one whatif run in --out, moved in as one set (the plot last).
WHATIF_FILES = ("whatif.png", "whatif-sweep.png", TOPOLOGIES)

#: Where a sweep key goes when the topology file does not set it (the keys of
#: :mod:`simtrain.topology.spec` and :mod:`simtrain.specs.power`); a key the file sets is changed
#: where it is.
SWEEP_TABLES: dict[str, tuple[str, ...]] = {
    "node": ("nvlink_GBps", "nvlink_latency_us", "nvlink_efficiency", "nvls_efficiency", "nics", "nic_gbps",
             "pcie_GBps", "nic_latency_us"),
    "fabric": ("nodes_per_leaf", "spines", "oversubscription", "core_oversubscription", "switch_latency_us",
               "link_latency_us", "nic_efficiency", "switch_ports", "leaves_per_pod", "cores"),
    "power": ("host_w", "nic_w", "switch_w", "pue"),
    "cost": ("price_per_gpu_hour_usd", "purchase_usd", "depreciation_years", "electricity_usd_per_kwh"),
}
#: Sweep keys whose values are whole numbers.
INT_KEYS = ("nics", "nodes_per_leaf", "spines", "switch_ports", "leaves_per_pod", "cores")
#: The report keys a result row carries.
ROW_KEYS = ("step_time_s", "tokens_per_s", "mfu", "energy_per_step_j", "tokens_per_kwh", "cost_per_step_usd",
            "tokens_per_usd", "train_steps", "time_to_train_s", "energy_to_train_kwh", "cost_to_train_usd")


@dataclass(frozen=True)
class WhatIfQuery:
    """What every cluster is asked: train ``train_tokens`` of ``model`` at ``seq`` and ``gbs`` on
    ``gpus`` GPUs (None: each cluster's own), at the best layout a search finds (``top``, ``jobs``
    and the lists to try, as :func:`simtrain.api.search.search` takes them; ``grid``: the degree
    and dispatcher lists ``tps``, ``cps``, ``pps``, ``eps``, ``etps``, ``dispatchers``; by default
    the search's degrees, :data:`~simtrain.api.search.DEGREES`, and every valid MoE degree)."""

    model: str
    train_tokens: int
    seq: int
    gbs: int
    gpus: int | None = None
    top: int | None = None
    jobs: int = 1
    schedules: tuple[str, ...] = ("1f1b",)
    mbss: tuple[int, ...] = (1,)
    zeros: tuple[int, ...] = (1,)
    recomputes: tuple[str, ...] = ("auto",)
    grid: dict[str, Any] = field(default_factory=lambda: dict(DEGREES))


def overridden(data: dict[str, Any], key: str, value: float) -> dict[str, Any]:
    """A copy of topology table ``data`` with ``key`` set to ``value``: where the file sets it, or
    in its table of :data:`SWEEP_TABLES`."""
    out = copy.deepcopy(data)
    for table in (*SWEEP_TABLES, "gpu"):
        if isinstance(out.get(table), dict) and key in out[table]:
            out[table][key] = value
            return out
    table = next(t for t, keys in SWEEP_TABLES.items() if key in keys)
    out.setdefault(table, {})[key] = value
    return out


def _table(topology: str) -> dict[str, Any]:
    if topology.endswith(".toml") or "/" in topology or "\\" in topology:
        return read_toml(topology)
    return preset_table(topology)


def variants(topologies: list[tuple[str, int | None]], sweep: tuple[str, tuple[float, ...]] | None,
             folder: Path) -> list[dict]:
    """Each cluster to try: its name, its GPUs (None: ``--gpus`` or the topology's own), the swept
    value (None without a sweep) and the topology to load (the name, or the file of the changed
    table). A cluster with its own GPU count is checked to hold them (:func:`cluster_for`)."""
    def check(source: str, gpus: int | None) -> None:
        if gpus is None:
            load_topology(source)
            return
        try:
            cluster_for(source, gpus)
        except SpecError as exc:
            raise SpecError(f"--clusters {name}:{gpus}: {exc}") from None

    out = []
    stems: dict[str, int] = {}
    for name, gpus in topologies:
        label = name if gpus is None else f"{name}, {gpus} GPUs"
        if sweep is None:
            check(name, gpus)
            out.append({"topology": name, "gpus": gpus, "sweep_value": None, "source": name, "label": label})
            continue
        key, values = sweep
        data = _table(name)
        stem = Path(name).stem
        stems[stem] = stems.get(stem, 0) + 1
        if stems[stem] > 1:  # a file and a preset (or two files) of one name: each its own files
            stem = f"{stem}-{stems[stem]}"
        for value in values:
            path = write_topology(overridden(data, key, value), folder / f"{stem}-{key}-{value!r}.toml")
            check(path, gpus)
            out.append({"topology": name, "gpus": gpus, "sweep_value": value, "source": path,
                        "label": f"{label} {key}={value:g}"})
    return out


def best_layout(variant: dict, query: WhatIfQuery, price: float | None, bar: Any = None) -> dict[str, Any]:
    """The fastest layout of one cluster that fits in memory, with its report's energy, cost and
    time-to-train keys (:data:`ROW_KEYS`); ``bar`` (a :class:`~simtrain.outputs.progress.Progress`)
    hears of the search's stages."""
    cluster = load_topology(variant["source"])
    gpus = variant["gpus"] or query.gpus or cluster.num_gpus
    base = {"model": query.model, "topology": variant["source"], "nodes": -(-gpus // cluster.gpus_per_node),
            "seq": query.seq, "gbs": query.gbs, "train_tokens": query.train_tokens, "price_per_gpu_hour_usd": price}

    def progress(done: int, total: int, label: str) -> None:
        if bar is None:
            return
        if label == "estimate" and done == 0:
            bar.phase(f"{variant['label']}: estimate", total, "layouts")
        elif label in ("start", "resumed"):
            bar.phase(f"{variant['label']}: simulate", total, "candidates")
        bar.update(done)

    try:
        found = simulated_search(base, gpus=gpus, gpus_per_node=cluster.gpus_per_node, top=query.top,
                                 jobs=query.jobs, results=None, resume=False, progress=progress,
                                 schedules=query.schedules, mbss=query.mbss, zeros=query.zeros,
                                 recomputes=query.recomputes, **query.grid)
    except SpecError as exc:
        raise SpecError(f"topology {variant['label']}: {exc}") from None
    fitting = [r for r in found["ranking"] if r["fits_in_memory"]]
    if not fitting and found["failed"]:  # say why they failed rather than that none fits
        first = found["failed"][0]
        raise SpecError(f"topology {variant['label']}: no layout of {gpus} GPUs could be simulated "
                        f"({len(found['failed'])} of {found['candidates_simulated']} failed); {first['label']}: "
                        f"{first['error']}")
    if not fitting:
        raise SpecError(f"topology {variant['label']}: no layout of {gpus} GPUs fits in memory when simulated "
                        f"({found['candidates_simulated']} tried); try more GPUs or --recompute full")
    best = fitting[0]
    report = simulate(resolve(best["settings"], strict=False)).report
    return {**variant, "gpus": gpus, "gpu": cluster.gpu.name, "layout": best["label"], "ep": best["ep"],
            "settings": best["settings"], **{k: report[k] for k in ROW_KEYS}}


def rank(rows: list[dict]) -> None:
    """``time_rank`` and ``cost_rank`` (None without a price) of each row among the rows of its
    sweep value."""
    for value in dict.fromkeys(r["sweep_value"] for r in rows):
        group = [r for r in rows if r["sweep_value"] == value]
        for i, r in enumerate(sorted(group, key=lambda r: (r["time_to_train_s"], r["label"])), 1):
            r["time_rank"] = i
        priced = sorted((r for r in group if r["cost_to_train_usd"] is not None),
                        key=lambda r: (r["cost_to_train_usd"], r["label"]))
        for r in group:
            r["cost_rank"] = None
        for i, r in enumerate(priced, 1):
            r["cost_rank"] = i


def whatif(query: WhatIfQuery, clusters: list[tuple[str, int | None]], *,
           sweep: tuple[str, tuple[float, ...]] | None = None, prices: dict[str, float] | None = None,
           price_per_gpu_hour_usd: float | None = None, out: str | Path = "out", plot: bool = True,
           bar: Any = None) -> dict[str, Any]:
    """Each cluster of ``clusters`` (topology name or file, GPU count or None: ``query.gpus`` or
    the topology's own), and with ``sweep`` each value of one topology key, at its best layout for
    ``query``, ranked by time and cost to train (``prices``: a GPU-hour's price per topology name,
    over ``price_per_gpu_hour_usd``, over the topology's own [cost] table). With ``plot`` the
    ranking (or the sweep) is drawn into ``out``, where a sweep also writes its topology files;
    ``bar`` (a :class:`~simtrain.outputs.progress.Progress`) hears of each search's stages.
    Returns the JSON-ready result: ``results`` (one row per cluster, with ``time_rank`` and
    ``cost_rank``), ``plots`` and the query's model, tokens, seq, gbs and sweep."""
    check_expert_grid(load_model(query.model), query.grid.get("eps"), query.grid.get("etps"),
                      query.grid.get("dispatchers"), query.grid.get("tps", DEGREES["tps"]))
    prices = prices or {}
    out = Path(out)
    picture = "whatif.png" if sweep is None else "whatif-sweep.png"
    staged = output_set(out, names=WHATIF_FILES, marker=picture) if (plot or sweep) else nullcontext(None)
    with staged as stage:  # this run's own folder, its files moved into --out as one set at the end
        folder = out if stage is None else stage
        todo = variants(clusters, sweep, folder / TOPOLOGIES)
        rows = [best_layout(v, query, prices.get(v["topology"], price_per_gpu_hour_usd), bar) for v in todo]
        rank(rows)
        rows.sort(key=lambda r: (r["sweep_value"] if r["sweep_value"] is not None else 0, r["time_rank"]))
        plots: dict[str, str] = {}
        if plot:
            from simtrain.outputs.whatif import draw_ranking, draw_sweep

            title = f"{query.model}, {query.train_tokens:,} tokens"
            if sweep is None:
                plots["ranking"] = draw_ranking(rows, folder / picture, title)
            else:
                plots["sweep"] = draw_sweep(rows, sweep[0], folder / picture, title)
    if stage is not None:  # the paths the files have now
        for row in rows:
            if row["sweep_value"] is not None:
                row["source"] = str(out / TOPOLOGIES / Path(row["source"]).name)
        plots = {k: str(out / Path(v).name) for k, v in plots.items()}
    return {"model": query.model, "train_tokens": query.train_tokens, "seq": query.seq, "gbs": query.gbs,
            "sweep": {"key": sweep[0], "values": list(sweep[1])} if sweep else None, "results": rows,
            "plots": plots}
