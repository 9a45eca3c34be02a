"""The presets and their key figures: GPUs, topologies, models and schedules (``simtrain list``)."""

from __future__ import annotations

from typing import Any, Callable

from simtrain.api.checks import check_instance
from simtrain.errors import unknown_name


def _first_formula(func: Any) -> str:
    """The formula a closed-form function's docstring opens with (its first ````...```` span)."""
    import inspect
    import re

    found = re.search(r"``(.+?)``", inspect.getdoc(func) or "", re.S)
    return " ".join(found.group(1).split()) if found else "-"


def gpu_rows() -> list[dict[str, Any]]:
    """The GPU presets' key figures: dense BF16/FP8 peak, HBM capacity and bandwidth, NVLink, and
    the flat GEMM efficiency where the preset sets one (None: by GEMM shape)."""
    from simtrain.specs.gpu import GPU_PRESETS
    from simtrain.units import GB, GiB, TFLOPS

    return [{"name": name, "bf16_tflops": g.peak_bf16_flops / TFLOPS,
             "fp8_tflops": None if g.peak_fp8_flops is None else g.peak_fp8_flops / TFLOPS,
             "hbm_gib": g.hbm_bytes / GiB, "hbm_TBps": g.hbm_bandwidth_Bps / (1000 * GB),
             "nvlink_GBps": g.nvlink_Bps / GB, "gemm_efficiency": g.efficiency}
            for name, g in sorted(GPU_PRESETS.items())]


def topology_rows() -> list[dict[str, Any]]:
    """The topology presets' key figures: GPU, GPUs per node, nodes, NICs, fabric."""
    from simtrain.topology.cluster import list_topologies, load_topology
    from simtrain.units import GB

    rows = []
    for name in list_topologies():
        c = load_topology(name)
        fabric = c.fabric
        rows.append({"name": name, "gpu": c.gpu.name, "gpus_per_node": c.gpus_per_node, "nodes": c.num_nodes,
                     "gpus": c.num_gpus, "nics_per_node": fabric.get("nics_per_node", 0),
                     "nic_Gbps": fabric.get("nic_Bps", 0.0) * 8 / GB, "fabric": fabric["kind"],
                     "tiers": fabric.get("tiers", 0), "oversubscription": c.oversubscription})
    return rows


def model_rows() -> list[dict[str, Any]]:
    """The model presets' key figures: parameters (total, active per token), shape, experts."""
    from simtrain.specs.model import list_models, load_model

    return [{"name": name, "params_b": m.params_total / 1e9, "active_params_b": m.params_active / 1e9,
             "layers": m.layers, "hidden": m.hidden, "heads": m.heads, "kv_heads": m.kv_heads or m.heads,
             "experts": m.num_experts, "top_k": m.top_k, "vocab": m.vocab}
            for name, m in ((n, load_model(n)) for n in list_models())]


def schedule_rows() -> list[dict[str, Any]]:
    """The registered schedules (description, activation memory as peak in-flight micro-batches of
    a stage, the bubble's closed form and where it applies) and the example schedule files."""
    from simtrain.schedules import REGISTRY, example_schedules

    rows = []
    for name, rec in REGISTRY.items():
        cf = rec.closed_form
        rows.append({"name": name, "description": rec.description,
                     "peak_in_flight": _first_formula(cf.in_flight) if cf else "-",
                     "bubble": _first_formula(cf.bubble) if cf else "-",
                     "closed_form_applies": cf.condition if cf else "no closed form"})
    rows += [{"name": name, "description": f"schedule file schedules/{name}.csv", "peak_in_flight": "-",
              "bubble": "-", "closed_form_applies": "no closed form"} for name in example_schedules()]
    return rows


#: Each kind of preset: the function giving its rows.
PRESET_TABLES: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "gpus": gpu_rows, "topologies": topology_rows, "models": model_rows, "schedules": schedule_rows}


def presets(what: str) -> list[dict[str, Any]]:
    """The presets of kind ``what`` (a key of :data:`PRESET_TABLES`), one JSON-ready row each.

    >>> [r["name"] for r in presets("gpus")][:2]
    ['a100-80g', 'b200']
    """
    check_instance("presets", "what", what, str, f"one of {', '.join(PRESET_TABLES)}")
    if what not in PRESET_TABLES:
        raise unknown_name("kind of preset", what, PRESET_TABLES)
    return PRESET_TABLES[what]()
