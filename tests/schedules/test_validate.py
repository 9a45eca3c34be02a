"""Validation: every built-in validates and replays over its range; a bad action is named by rank and
cell and marked on the grid."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import BUILTIN_SCHEDULES, UNIT_COSTS, built_in
from simtrain.errors import ScheduleError
from simtrain.schedules import generate, parse_action, replay, scaled_costs, validate
from simtrain.schedules.interleaved import valid_groups
from simtrain.schedules.ir import Action, Schedule
from simtrain.schedules.validate import format_grid


FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("name", BUILTIN_SCHEDULES)
def test_small_sweep_validates(name):
    for p in range(1, 7):
        for m in range(1, 3 * p + 3):
            kws = [{}]
            if name == "interleaved-1f1b":
                kws = [{"vpp": v, "group": g} for v in (1, 2, 3) for g in valid_groups(p, m)[:2]]
            for kw in kws:
                try:
                    s = generate(name, p, m, **kw)
                except ScheduleError:
                    assert name in ("dualpipe", "dualpipev", "interleaved-1f1b")
                    continue
                validate(s)
                r = replay(s, scaled_costs(s, *UNIT_COSTS))
                assert r.makespan > 0
                assert len(r.start) == p and all(len(a) == len(t) for a, t in zip(s.actions, r.start))


@pytest.mark.parametrize("name", BUILTIN_SCHEDULES)
@FAST
@given(data=st.data())
def test_builtins_validate_and_replay(name, data):
    s, p, m, v = data.draw(built_in(name))
    assert s.num_ranks == p and s.num_microbatches == m
    validate(s)
    r = replay(s, scaled_costs(s, 1.0, 1.3, 0.7), comm=0.1)
    # every rank's compute is the whole model's F + I + W for m micro-batches, spread over ranks
    assert sum(r.busy) == pytest.approx(m * p * (1.0 + 1.3 + 0.7))
    assert all(i >= -1e-9 for i in r.idle)


def _a(text: str) -> Action:
    return parse_action(text)


def _zb(p=2, m=4) -> list[list[Action]]:
    return [list(row) for row in generate("zb-h1", p, m).actions]


@pytest.mark.quick
def test_validate_marks_cell():
    rows = _zb()
    rows[1][3] = Action(1, "W", 3)  # W before its I
    with pytest.raises(ScheduleError) as e:
        validate(Schedule("t", 2, 4, (0, 1), tuple(map(tuple, rows))))
    first, *grid = str(e.value).splitlines()
    assert first.startswith("schedule t: rank 1, cell 3: 1W3 before its input gradient 1I3")
    assert "[1W3]" in grid[1] and grid[1].startswith("rank 1 |")


@pytest.mark.quick
@pytest.mark.parametrize("mutate, pattern", [
    (lambda rows: rows[0].pop(), r"rank 0, cell 11: missing action 0W3"),
    (lambda rows: rows[0].insert(2, Action(0, "F", 1)), r"rank 0, cell 2: duplicate action 0F1"),
    (lambda rows: rows[1].insert(0, Action(0, "F", 3)), r"rank 1, cell 0: .*stage 0 is on rank 0"),
    (lambda rows: rows[0].append(Action(0, "F", 9)), r"rank 0, cell \d+: .*micro-batch 9 out of range"),
    (lambda rows: rows[0].append(Action(7, "F", 0)), r"rank 0, cell \d+: .*stage 7 out of range"),
    (lambda rows: rows[1].insert(2, Action(1, "B", 0)), r"rank 1, cell 2: .*already has a split"),
])
def test_validate_errors(mutate, pattern):
    rows = _zb()
    mutate(rows)
    with pytest.raises(ScheduleError, match=pattern):
        validate(Schedule("t", 2, 4, (0, 1), tuple(map(tuple, rows))))


@pytest.mark.quick
def test_validate_deadlock_and_layout():
    # rank 1 wants micro-batch 1 first; rank 0 sends it only after micro-batch 0's backward
    rows = (tuple(map(_a, "0F0 0I0 0W0 0F1 0I1 0W1".split())),
            tuple(map(_a, "1F1 1I1 1F0 1I0 1W0 1W1".split())))
    with pytest.raises(ScheduleError, match=r"rank 0, cell 1: deadlock: 0I0 waits .*rank 1 cell 0 1F1") as e:
        validate(Schedule("t", 2, 2, (0, 1), rows))
    assert "[0I0]" in str(e.value) and "[1F1]" in str(e.value)
    with pytest.raises(ScheduleError, match=r"stage_to_rank\[1\] = 5"):
        validate(Schedule("t", 2, 4, (0, 5), generate("zb-h1", 2, 4).actions))


@pytest.mark.quick
def test_format_grid_window():
    s = generate("1f1b", 2, 40)
    text = format_grid(s, {1: 50})
    assert "[1F25]" in text and "...(44)" in text and "(23 more)" in text
