"""The fixed-cost replay: peaks in flight of every schedule, communication and per-stage costs, a
deadlock naming every blocked rank; the makespan alone equal to the replay's."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import UNIT_COSTS
from simtrain.errors import ScheduleError
from simtrain.schedules import generate, replay
from simtrain.schedules.ir import Action, Schedule
from simtrain.schedules.replay import DeadlockError, makespan

pytestmark = pytest.mark.quick


@pytest.mark.parametrize("p", range(1, 9))
def test_peak_inflight(p):
    for m in (p, 2 * p, 2 * p + 3):
        assert replay(generate("gpipe", p, m), UNIT_COSTS).peak_inflight == tuple([float(m)] * p)
        assert replay(generate("1f1b", p, m), UNIT_COSTS).peak_inflight == tuple(float(p - r) for r in range(p))
        # ZB-H1: every rank holds p (paper: same number in flight on every stage), the peak of 1F1B
        assert replay(generate("zb-h1", p, m), UNIT_COSTS).peak_inflight == tuple([float(p)] * p)
    for m in (2 * p, 3 * p + 1):
        # ZB-H2: (2p - 1) M_B
        assert replay(generate("zb-h2", p, m), UNIT_COSTS).peak_inflight == tuple([2.0 * p - 1] * p)
        # ZB-V: 1F1B's peak p (2p half-size chunk activations) on every rank
        zv = replay(generate("zb-v", p, m), UNIT_COSTS)
        assert zv.peak_inflight == tuple([float(p)] * p)
        assert zv.peak_inflight_chunks == tuple([2 * p] * p)
        # DualPipeV: PP + 1 chunk activations with PP = 2p chunks
        dv = replay(generate("dualpipev", p, m), UNIT_COSTS)
        assert dv.peak_inflight_chunks == tuple([2 * p + 1] * p)
        if p % 2 == 0 and m % 2 == 0:
            # DualPipe README: PP + 1 (full-stage chunks)
            assert replay(generate("dualpipe", p, m), UNIT_COSTS).peak_inflight == tuple([p + 1.0] * p)
    # interleaving: a chunk holds 1/v of a stage
    il = replay(generate("interleaved-1f1b", 4, 8, vpp=2), UNIT_COSTS)
    assert il.peak_inflight == tuple(c / 2 for c in il.peak_inflight_chunks)


def test_replay_comm_and_costs():
    s = generate("1f1b", 2, 1)
    r = replay(s, (1.0, 2.0, 3.0), comm=0.5)
    # F0 on rank 0, comm, F0 + B0 on rank 1, comm, B0 on rank 0
    assert r.makespan == pytest.approx(1 + 0.5 + 1 + 5 + 0.5 + 5)
    r2 = replay(s, ([1.0, 2.0], [1.0, 1.0], [0.0, 0.0]))
    assert r2.makespan == pytest.approx(1 + 2 + 1 + 1)
    fb = Schedule("pair", 1, 2, (0, 0), ((Action(0, "F", 0), Action(1, "F", 0), Action(0, "FB", 1, 1, 0),
                                          Action(1, "F", 1), Action(1, "B", 1), Action(0, "B", 0),
                                          Action(0, "B", 1)),))
    # the pair 0F1&1B0 costs F + I + W
    assert replay(fb, (1.0, 1.0, 1.0)).end[0][2] == pytest.approx(2 + 3)


def test_replay_deadlock_lists_every_rank():
    rows = ((Action(0, "F", 0), Action(0, "B", 0)), (Action(1, "B", 0), Action(1, "F", 0)))
    s = Schedule("bad", 2, 1, (0, 1), rows)
    with pytest.raises(DeadlockError) as e:
        replay(s, UNIT_COSTS)
    msg = str(e.value)
    assert "rank 0, cell 1: 0B0" in msg and "rank 1, cell 0: 1B0" in msg
    assert set(e.value.blocked) == {0, 1}


def _every_schedule(pp: int, m: int):
    from simtrain.schedules import REGISTRY

    for name in REGISTRY:
        kw = {"vpp": 2} if REGISTRY[name].takes("vpp") else {}
        try:
            yield generate(name, pp, m, **kw)
        except ScheduleError:  # too few micro-batches, or an odd pp for DualPipe
            continue


@settings(max_examples=40, deadline=None)
@given(pp=st.integers(1, 6), extra=st.integers(0, 9), comm=st.sampled_from([0.0, 0.013, 0.5, 3.0]),
       seed=st.integers(0, 2**16))
def test_makespan_equals_the_replay_bit_for_bit(pp, extra, comm, seed):
    """The makespan alone (zb-auto's comparison) is the full replay's, float for float, on every
    schedule (DualPipe's overlapped pairs go through the replay) under per-stage costs."""
    rng = random.Random(seed)
    for s in _every_schedule(pp, 2 * pp + extra):
        costs = tuple(tuple(rng.uniform(0.05, 3.0) for _ in range(s.num_stages)) for _ in range(3))
        assert makespan(s, costs, comm) == replay(s, costs, comm).makespan, s.name


def test_makespan_raises_what_the_replay_raises():
    rows = ((Action(0, "F", 0), Action(0, "B", 0)), (Action(1, "B", 0), Action(1, "F", 0)))
    for run in (replay, makespan):
        with pytest.raises(DeadlockError, match="0B0 waits for the input gradient of 1I0/1B0; rank 1, cell 0: 1B0 waits for the forward 1F0"):
            run(Schedule("bad", 2, 1, (0, 1), rows), UNIT_COSTS)
        with pytest.raises(ScheduleError, match="stage 3 out of range 0..0"):
            run(Schedule("far", 1, 1, (0,), ((Action(3, "F", 0),),)), UNIT_COSTS)
        beyond = Schedule("beyond", 1, 1, (0,), ((Action(0, "F", 0), Action(0, "F", 1), Action(0, "B", 0)),))
        with pytest.raises(ScheduleError, match="micro-batch 1 out of range 0..0"):
            run(beyond, UNIT_COSTS)
