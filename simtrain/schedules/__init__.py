"""Pipeline schedules: the IR, the generators (one registry) and CSV files.

Registered generators (``generate(name, pp, m, **params)``):

================== ============================================================================
name               params
================== ============================================================================
gpipe              --
1f1b               --
interleaved-1f1b   ``vpp`` (model chunks per rank, default 2), ``group`` (Megatron's
                   micro-batch group size, default pp)
zb-h1              --
zb-h2              --
zb-v               --
dualpipe           -- (pp even, m even, m >= 2 pp)
dualpipev          -- (m >= 2 pp)
zb-auto            ``costs=(F, I, W)`` (numbers or per-stage lists), ``comm``, ``mem_limit``
================== ============================================================================

Unknown params are ignored by the generators that take none.
"""

from __future__ import annotations

from pathlib import Path

from simtrain.errors import ScheduleError, unknown_name
from simtrain.schedules.auto import zb_auto
from simtrain.schedules.csvio import read_schedule_csv, schedule_from_csv, schedule_to_csv
from simtrain.schedules.dualpipe import dualpipe, dualpipev
from simtrain.schedules.generators_basic import interleaved_1f1b
from simtrain.schedules.ir import Action, Schedule, gpipe, one_f_one_b, parse_action
from simtrain.schedules.replay import Replay, replay, scaled_costs
from simtrain.schedules.validate import closed_form_makespan, validate
from simtrain.schedules.zero_bubble import zb_h1, zb_h2, zb_v

GENERATORS = {
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
    "interleaved-1f1b": interleaved_1f1b,
    "zb-h1": zb_h1,
    "zb-h2": zb_h2,
    "zb-v": zb_v,
    "dualpipe": dualpipe,
    "dualpipev": dualpipev,
    "zb-auto": zb_auto,
}


def example_schedules() -> list[str]:
    """Names of the example schedule files shipped in schedules/ (usable like built-in names)."""
    from simtrain.presets import preset_dir

    return sorted(p.name[:-4] for p in preset_dir("schedules").iterdir() if p.name.endswith(".csv"))


def generate(name: str, pp: int, m: int, **params) -> Schedule:
    """Build a registered schedule for ``pp`` ranks and ``m`` micro-batches."""
    try:
        gen = GENERATORS[name]
    except KeyError:
        raise unknown_name("schedule", name, list(GENERATORS) + example_schedules()) from None
    return gen(pp, m, **params)


def load_schedule(name_or_path: str | Path, pp: int, m: int, **params) -> Schedule:
    """A registered schedule by name, or a schedule CSV file (a path ending in ``.csv``).

    A CSV must have ``pp`` rows (ranks) and use exactly ``m`` micro-batches; ``params`` are
    passed to the generator (ignored for a CSV).
    """
    text = str(name_or_path)
    if not text.lower().endswith(".csv"):
        if text in GENERATORS or text not in example_schedules():
            return generate(text, pp, m, **params)
        from simtrain.presets import preset_dir

        example = preset_dir("schedules").joinpath(f"{text}.csv")
        sched = schedule_from_csv(example.read_text(encoding="utf-8"), f"schedules/{text}.csv")
    else:
        sched = read_schedule_csv(text)
    if sched.num_ranks != pp:
        raise ScheduleError(f"{text}: the schedule has {sched.num_ranks} ranks (rows) but the pipeline "
                            f"has pp={pp}")
    if sched.num_microbatches != m:
        raise ScheduleError(f"{text}: the schedule uses {sched.num_microbatches} micro-batches "
                            f"(0..{sched.num_microbatches - 1}) but the step has m={m}")
    return sched


__all__ = ["Action", "Schedule", "GENERATORS", "Replay", "generate", "load_schedule", "parse_action",
           "replay", "scaled_costs", "validate", "closed_form_makespan", "schedule_to_csv",
           "schedule_from_csv", "read_schedule_csv"]
