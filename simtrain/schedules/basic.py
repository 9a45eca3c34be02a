"""The two classic schedules: GPipe and (non-interleaved) 1F1B."""

from __future__ import annotations

from simtrain.schedules.ir import Action, Schedule
from simtrain.schedules.record import ClosedForm, Costs, ScheduleRecord


def gpipe(pp: int, m: int, **_: object) -> Schedule:
    """GPipe (Huang et al. 2019): all forwards, then all backwards in reverse order.

    Makespan with uniform stages: (m + p - 1)(F + B); peak in-flight micro-batches m per rank.
    """
    actions = []
    for r in range(pp):
        actions.append(tuple([Action(r, "F", k) for k in range(m)] +
                             [Action(r, "B", k) for k in range(m)]))
    return Schedule("gpipe", pp, m, tuple(range(pp)), tuple(actions))


def one_f_one_b(pp: int, m: int, **_: object) -> Schedule:
    """1F1B, non-interleaved (PipeDream-Flush; Narayanan et al. 2021, section 2.2.1).

    Rank r runs min(p - r - 1, m) warm-up forwards, then alternates one forward and one backward,
    then drains the remaining backwards. Makespan with uniform stages: (m + p - 1)(F + B); peak
    in-flight micro-batches min(p - r, m) on rank r.
    """
    actions = []
    for r in range(pp):
        warm = min(pp - r - 1, m)
        row = [Action(r, "F", k) for k in range(warm)]
        f, b = warm, 0
        while f < m:
            row.append(Action(r, "F", f))
            f += 1
            row.append(Action(r, "B", b))
            b += 1
        row += [Action(r, "B", k) for k in range(b, m)]
        actions.append(tuple(row))
    return Schedule("1f1b", pp, m, tuple(range(pp)), tuple(actions))


def fill_drain_bubble(p: int, m: int, c: Costs, v: int) -> float:
    """``(p - 1)(F + B)``: the fill and drain of a pipeline of p stages (GPipe, Huang et al.
    2019; 1F1B, Narayanan et al. 2021; the course notes' ``(p - 1) t_mb``).
    :func:`~simtrain.schedules.replay.replay` of our generators gives exactly ``m(F + B)``
    plus this for any costs."""
    return (p - 1) * c.total


def one_f_one_b_in_flight(p: int, stage: int, m: int, v: int) -> float:
    """``min(p - stage, m)``: 1F1B's warm-up forwards plus one (the course notes; Narayanan et
    al. 2021, section 2.2.1)."""
    return min(p - stage, m)


def _gpipe_in_flight(p: int, stage: int, m: int, v: int) -> float:
    """``m``: all forwards run before the first backward (Huang et al. 2019)."""
    return m


def _always(p: int, m: int, v: int) -> bool:
    return True


GPIPE = ScheduleRecord(
    "gpipe", gpipe, "All forwards, then all backwards (Huang et al. 2019)",
    closed_form=ClosedForm(fill_drain_bubble, _gpipe_in_flight, _always, "any pp, m"))

ONE_F_ONE_B = ScheduleRecord(
    "1f1b", one_f_one_b, "One forward, one backward (PipeDream-Flush; Narayanan et al. 2021)",
    closed_form=ClosedForm(fill_drain_bubble, one_f_one_b_in_flight, _always, "any pp, m"))

#: This module's schedules, read by :mod:`simtrain.schedules.registry`.
RECORDS = (GPIPE, ONE_F_ONE_B)
