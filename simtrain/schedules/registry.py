"""The schedule registry: every built-in pipeline schedule by name, one record per line.

A schedule is a family module defining its generator and its
:class:`~simtrain.schedules.record.ScheduleRecord` (generator, parameters, closed forms, peak
in-flight micro-batches, parameter copies); adding one is that module plus one line in
:data:`FAMILIES`. Everything that names a schedule reads its record here:
:func:`generate` and :func:`load_schedule`, the closed-form model, ``simtrain schedule`` and the
configuration search.

A :class:`Registry` is immutable; :meth:`Registry.with_record` returns a new one with one more
record, so a schedule can be tried without changing :data:`REGISTRY`. It keeps the last
:data:`RECENT` schedules it generated, by their arguments: a generator is a pure function of them
and a schedule cannot change, and ``--recompute auto`` builds the run's schedule once to plan
its memory and again to lower it (zb-auto's, planned for given costs, takes up to a second).
"""

from __future__ import annotations

import importlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from simtrain.specs.budget import check_schedule
from simtrain.errors import ScheduleError, SpecError, unknown_name
from simtrain.presets import preset_dir
from simtrain.schedules.combined import combine_1f1b
from simtrain.schedules.csvio import read_schedule_csv, schedule_from_csv
from simtrain.schedules.ir import Schedule
from simtrain.schedules.record import ScheduleRecord


#: How many generated schedules a registry keeps (module docstring).
RECENT = 4


def example_schedules() -> list[str]:
    """Names of the example schedule files shipped in schedules/ (usable like built-in names)."""
    return sorted(p.name[:-4] for p in preset_dir("schedules").iterdir() if p.name.endswith(".csv"))


class Registry(Mapping[str, ScheduleRecord]):
    """An immutable table of schedule records by name, in registration order."""

    def __init__(self, records: Iterable[ScheduleRecord]):
        table: dict[str, ScheduleRecord] = {}
        for rec in records:
            if rec.name in table:
                raise ValueError(f"schedule {rec.name!r} is registered twice")
            table[rec.name] = rec
        self._records = MappingProxyType(table)
        self._recent: OrderedDict[tuple[object, ...], Schedule] = OrderedDict()  # (name, pp, m, params) -> schedule
        for rec in table.values():
            if rec.ranked_as is not None and rec.ranked_as not in self.closed_form_names():
                raise ValueError(f"schedule {rec.name!r} is ranked as {rec.ranked_as!r}, which has no "
                                 f"closed form here")

    def __getitem__(self, name: str) -> ScheduleRecord:
        return self._records[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def with_record(self, record: ScheduleRecord) -> "Registry":
        """A new registry holding these records and ``record``."""
        return Registry([*self._records.values(), record])

    def record(self, name: str) -> ScheduleRecord:
        """The record of ``name``; a :class:`SpecError` listing the valid names otherwise."""
        try:
            return self._records[name]
        except KeyError:
            raise unknown_name("schedule", name, list(self._records) + example_schedules()) from None

    def generate(self, name: str, pp: int, m: int, **params: object) -> Schedule:
        """Build the schedule ``name`` for ``pp`` ranks and ``m`` micro-batches; one beyond
        :data:`simtrain.specs.budget.MAX_SCHEDULE_CELLS` is refused before it is built."""
        record = self.record(name)
        vpp = params.get("vpp")
        check_schedule(name, pp, m, vpp if isinstance(vpp, int) and not isinstance(vpp, bool) else 1)
        key = (name, pp, m, tuple(sorted(params.items())))
        try:
            hash(key)
        except TypeError:  # a parameter that cannot be a key (a list): generated every time
            return record.generator(pp, m, **params)
        sched = self._recent.get(key)
        if sched is None:
            sched = self._recent[key] = record.generator(pp, m, **params)
            if len(self._recent) > RECENT:
                self._recent.popitem(last=False)
        else:
            self._recent.move_to_end(key)
        return sched

    def load(self, name_or_path: str | Path, pp: int, m: int, combined_1f1b: bool = False,
             **params: object) -> Schedule:
        """A registered schedule by name, an example file by name (see :func:`example_schedules`)
        or a schedule CSV file (a path ending in ``.csv``); with ``combined_1f1b``, its steady
        state paired by :func:`~simtrain.schedules.combined.combine_1f1b` (1f1b and
        interleaved-1f1b only).

        A file must have ``pp`` rows (ranks) and use exactly ``m`` micro-batches; ``params`` are
        passed to the generator (ignored for a file).
        """
        sched = self._load(name_or_path, pp, m, **params)
        return combine_1f1b(sched) if combined_1f1b else sched

    def _load(self, name_or_path: str | Path, pp: int, m: int, **params: object) -> Schedule:
        text = str(name_or_path)
        if not text.lower().endswith(".csv"):
            if text in self or text not in example_schedules():
                return self.generate(text, pp, m, **params)
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

    def check_vpp(self, name: str, vpp: int) -> None:
        """A one-line :class:`SpecError` when ``vpp`` > 1 model chunks per rank are asked of a
        schedule that does not interleave them: a registered schedule whose generator takes no
        ``vpp`` (its chunks per rank are fixed: one, or two for the V-shaped ones), or a schedule
        file (its stages are where the file puts them)."""
        if vpp == 1:
            return
        takers = [n for n, rec in self._records.items() if rec.takes("vpp")]
        rec = self._records.get(name)
        if rec is not None and rec.takes("vpp"):
            return
        what = ("has no virtual stages to interleave" if rec is not None
                else "is a schedule file: its rows place the stages")
        verb = "takes" if len(takers) == 1 else "take"
        raise SpecError(f"--vpp {vpp}: schedule {name} {what}; only {', '.join(takers)} {verb} --vpp "
                        f"(drop --vpp, or use --schedule {takers[0]})")

    def closed_form_names(self) -> tuple[str, ...]:
        """The schedules with a closed form, in registration order."""
        return tuple(n for n, rec in self._records.items() if rec.closed_form is not None)

    def closed_form(self, name: str) -> ScheduleRecord:
        """The record of ``name`` when it has a closed form; otherwise a one-line
        :class:`SpecError` naming the schedule and the ones that have one."""
        rec = self._records.get(name)
        if rec is not None and rec.closed_form is not None:
            return rec
        why = (f"{name} has no published closed form" if rec is not None else
               f"{name!r} is not a registered schedule (a schedule file has no closed form)")
        raise SpecError(f"schedule {name!r}: the closed-form model has bubble formulas for "
                        f"{', '.join(self.closed_form_names())} only; {why}")

    def makespan(self, name: str, pp: int, m: int, F: float, I: float, W: float,  # noqa: E741,N803
                 vpp: int = 1) -> float | None:
        """The closed-form makespan of schedule ``name`` (see
        :meth:`~simtrain.schedules.record.ScheduleRecord.makespan`); None where there is no
        formula, including a name that is not registered (a schedule file)."""
        rec = self._records.get(name)
        return None if rec is None else rec.makespan(pp, m, F, I, W, vpp)

    def ranking_schedule(self, name: str) -> str:
        """The schedule whose closed form ranks ``name`` in a configuration search: itself, or
        the upper bound its record names; a :class:`SpecError` when there is neither."""
        rec = self.record(name)
        if rec.closed_form is None and rec.ranked_as is not None:
            return rec.ranked_as
        return self.closed_form(name).name

    def describe(self) -> str:
        """The registered schedules as a reStructuredText definition list: each name with its
        description, its parameters and where its closed form applies."""
        lines = []
        for rec in self._records.values():
            lines += [rec.name, f"    {rec.description}."]
            lines += [f"    ``{p.name}``: {p.help}; default {p.default}; {p.valid}." for p in rec.params]
            if rec.closed_form is not None:
                lines.append(f"    Closed form: {rec.closed_form.condition}.")
            else:
                lines.append("    No closed form." + (f" A search ranks it as {rec.ranked_as}, an upper bound."
                                                      if rec.ranked_as else ""))
        return "\n".join(lines)


#: The family modules of the built-in schedules, in registration order; each defines ``RECORDS``.
#: A new schedule is a new module here (its generator and record) and one line in this list.
FAMILIES = (
    "simtrain.schedules.basic",
    "simtrain.schedules.interleaved",
    "simtrain.schedules.zero_bubble",
    "simtrain.schedules.dualpipe",
    "simtrain.schedules.auto",
)

#: The built-in schedules.
REGISTRY = Registry(rec for family in FAMILIES for rec in importlib.import_module(family).RECORDS)


def generate(name: str, pp: int, m: int, **params: object) -> Schedule:
    """Build a registered schedule for ``pp`` ranks and ``m`` micro-batches."""
    return REGISTRY.generate(name, pp, m, **params)


def load_schedule(name_or_path: str | Path, pp: int, m: int, **params: Any) -> Schedule:
    """A registered schedule by name, an example file by name, or a schedule CSV file (see
    :meth:`Registry.load`)."""
    return REGISTRY.load(name_or_path, pp, m, **params)
