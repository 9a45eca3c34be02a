"""Pipeline schedules: the IR, one registry of schedule records, CSV files, validation, replay.

``generate(name, pp, m, **params)`` builds a registered schedule (the generators that take no
parameters ignore unknown ones); ``load_schedule`` also takes a CSV file or the name of an example
file. The registered schedules (generated from their records):

"""

from __future__ import annotations

from simtrain.schedules.csvio import read_schedule_csv, schedule_from_csv, schedule_to_csv
from simtrain.schedules.ir import Action, Schedule, parse_action
from simtrain.schedules.record import ScheduleRecord
from simtrain.schedules.registry import REGISTRY, Registry, example_schedules, generate, load_schedule
from simtrain.schedules.replay import Replay, replay, scaled_costs
from simtrain.schedules.validate import validate

if __doc__ is not None:
    __doc__ += REGISTRY.describe() + "\n"

__all__ = ["Action", "Schedule", "ScheduleRecord", "Registry", "REGISTRY", "Replay",
           "example_schedules", "generate", "load_schedule", "parse_action", "replay", "scaled_costs",
           "validate", "schedule_to_csv", "schedule_from_csv", "read_schedule_csv"]
