"""Pipeline schedules: the IR, the generators (one registry) and CSV files."""

from __future__ import annotations

from simtrain.errors import unknown_name
from simtrain.schedules.ir import Action, Schedule, gpipe, one_f_one_b, parse_action

GENERATORS = {
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
}


def generate(name: str, pp: int, m: int, **params) -> Schedule:
    """Build a registered schedule for ``pp`` ranks and ``m`` micro-batches."""
    try:
        gen = GENERATORS[name]
    except KeyError:
        raise unknown_name("schedule", name, GENERATORS) from None
    return gen(pp, m, **params)


__all__ = ["Action", "Schedule", "GENERATORS", "generate", "parse_action"]
