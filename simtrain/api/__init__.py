"""The Python API, one module per verb: what the command line and the notebooks call.

- :mod:`~simtrain.api.resolve`: settings (names and numbers) into a typed :class:`Scenario`;
- :mod:`~simtrain.api.simulate`: one simulated step, its timeline and report;
- :mod:`~simtrain.api.write`: its report, trace, Gantt chart and HTML report as files;
- :mod:`~simtrain.api.estimate`: the closed form's estimate of a scenario;
- :mod:`~simtrain.api.compare`: both side by side, category by category;
- :mod:`~simtrain.api.collective`: one collective on a topology, nccl-tests style;
- :mod:`~simtrain.api.calibrate`: a layout's kernels timed on a device into a calibration table;
- :mod:`~simtrain.api.search`: a model's layouts ranked by simulated step time;
- :mod:`~simtrain.api.whatif`: clusters ranked by time and cost to train;
- :mod:`~simtrain.api.presets`: the presets and their key figures;
- :mod:`~simtrain.api.inspect`: a cluster and the rank grid of a layout, described;
- :mod:`~simtrain.api.schedule`: a scenario's pipeline schedule, or one alone with fixed costs;
- :mod:`~simtrain.api.checks` checks the arguments of every function here.

Only these modules and ``outputs/`` touch the filesystem. The package ``simtrain`` exports the
verbs by name (``simtrain.simulate``); ``simtrain.api`` holds the same names.
"""

from simtrain.api.calibrate import calibrate
from simtrain.api.collective import collective
from simtrain.api.compare import Comparison, compare
from simtrain.api.estimate import estimate, estimate_scenario, not_modelled_note
from simtrain.api.resolve import auto_recompute, ledger_recompute, load_config, resolve, resolve_with, with_settings
from simtrain.api.inspect import describe_mesh, describe_topology
from simtrain.api.presets import presets
from simtrain.api.schedule import ScheduleAlone, build_schedule, schedule_alone
from simtrain.api.search import search
from simtrain.api.simulate import SimResult, simulate
from simtrain.api.whatif import WhatIfQuery, whatif
from simtrain.api.write import write_outputs
from simtrain.scenario import RunOptions, Scenario, scenario_config
from simtrain.topology.cluster import cluster_for

__all__ = ["Comparison", "RunOptions", "Scenario", "ScheduleAlone", "SimResult", "WhatIfQuery", "auto_recompute",
           "build_schedule", "calibrate", "cluster_for", "collective", "compare", "describe_mesh",
           "describe_topology", "estimate", "estimate_scenario", "ledger_recompute", "load_config",
           "not_modelled_note", "presets", "resolve", "resolve_with", "scenario_config", "schedule_alone",
           "search", "simulate", "whatif", "with_settings", "write_outputs"]
