"""simtrain: a discrete-event simulator of one training step of a large transformer on a GPU cluster.

The verbs (:mod:`simtrain.api`, one module each)::

    import simtrain
    scenario = simtrain.resolve({"model": "llama3-70b", "topology": "h100-ib", "gpus": 64, "tp": 8, "pp": 4})
    result = simtrain.simulate(scenario)          # timeline and report
    simtrain.write_outputs(result, "out")         # report.json, trace.json, timeline.png
    simtrain.compare(scenario)                    # the closed form beside the simulation

and the building blocks the notebooks and the manual use: topologies, meshes, schedules, the
closed form's search, the Gantt chart. Every name is imported on first use (``import simtrain``
loads nothing else), so the command line starts fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

#: Each public name: (the module that defines it, its name there).
_EXPORTS: dict[str, tuple[str, str]] = {
    # the verbs and what they take and return
    **{name: ("simtrain.api.resolve", name) for name in ("resolve", "resolve_with", "with_settings", "load_config")},
    **{name: ("simtrain.scenario", name) for name in ("Scenario", "RunOptions", "scenario_config")},
    "simulate": ("simtrain.api.simulate", "simulate"), "SimResult": ("simtrain.api.simulate", "SimResult"),
    "write_outputs": ("simtrain.api.write", "write_outputs"),
    "estimate": ("simtrain.api.estimate", "estimate"),
    "estimate_scenario": ("simtrain.api.estimate", "estimate_scenario"),
    "compare": ("simtrain.api.compare", "compare"), "Comparison": ("simtrain.api.compare", "Comparison"),
    "collective": ("simtrain.api.collective", "collective"),
    "calibrate": ("simtrain.api.calibrate", "calibrate"),
    "search": ("simtrain.api.search", "search"),
    "whatif": ("simtrain.api.whatif", "whatif"), "WhatIfQuery": ("simtrain.api.whatif", "WhatIfQuery"),
    "presets": ("simtrain.api.presets", "presets"),
    "describe_topology": ("simtrain.api.inspect", "describe_topology"),
    "describe_mesh": ("simtrain.api.inspect", "describe_mesh"),
    "schedule_alone": ("simtrain.api.schedule", "schedule_alone"),
    "ScheduleAlone": ("simtrain.api.schedule", "ScheduleAlone"),
    # clusters and layouts
    "load_topology": ("simtrain.topology.cluster", "load_topology"),
    "build_topology": ("simtrain.topology.cluster", "build_topology"),
    "topology_summary": ("simtrain.topology.cluster", "summary"),
    "build_mesh": ("simtrain.topology.mesh", "build_mesh"),
    # pipeline schedules
    **{name: ("simtrain.schedules", name) for name in ("load_schedule", "generate", "example_schedules",
                                                       "schedule_to_csv")},
    "run_schedule": ("simtrain.workload.fixed_cost", "run_schedule"),
    # the closed form's search and its comparison with the simulation
    "closed_form_search": ("simtrain.analytic.search", "closed_form_search"),
    "format_plan": ("simtrain.analytic.search", "format_plan"),
    "side_by_side": ("simtrain.analytic.compare", "side_by_side"),
    "largest_differences": ("simtrain.analytic.compare", "largest_differences"),
    # reading and drawing a result
    "memory_timeline": ("simtrain.results.metrics", "memory_timeline"),
    "draw_gantt": ("simtrain.outputs.gantt", "draw_gantt"),
    "KIND_COLOURS": ("simtrain.outputs.colors", "KIND_COLOURS"),
    # errors
    "SimtrainError": ("simtrain.errors", "SimtrainError"), "SpecError": ("simtrain.errors", "SpecError"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (then cached here)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'simtrain' has no attribute {name!r}")
    module, attr = _EXPORTS[name]
    value = getattr(import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
