"""Schedules with fixed costs (the timeline of ``simtrain schedule``) against hand-computed cases and
the closed forms."""

from __future__ import annotations

import pytest

from simtrain.errors import ScheduleError
from simtrain.results.metrics import memory_timeline
from simtrain.schedules import REGISTRY, Action, Schedule, generate, replay, scaled_costs
from simtrain.workload.fixed_cost import run_schedule


UNIT = (1.0, 1.0, 1.0)


def spans(run, stream: str) -> list[tuple]:
    """(rank, name, stage, mb, start, end) of the spans on ``stream``, by rank and start."""
    rows = [(s.rank, s.name, s.stage, s.mb, s.start_s, s.end_s)
            for s in run.timeline.spans(run.timeline.mask(stream=stream))]
    return sorted(rows, key=lambda row: (row[0], row[4], row[5]))


@pytest.mark.quick
def test_two_stages_two_microbatches():
    """1F1B, p = 2, m = 2, F = I = W = 1 (B = 2), by hand: rank 0 runs F0 [0,1] F1 [1,2], waits for
    rank 1's B0 [2,4], runs B0 [4,6], waits for B1 [5,7], runs B1 [7,9]; rank 1 F0 [1,2] B0 [2,4]
    F1 [4,5] B1 [5,7]."""
    run = run_schedule(generate("1f1b", 2, 2))
    assert spans(run, "compute") == [(0, "F", 0, 0, 0, 1), (0, "F", 0, 1, 1, 2), (0, "B", 0, 0, 4, 6),
                                     (0, "B", 0, 1, 7, 9), (1, "F", 1, 0, 1, 2), (1, "B", 1, 0, 2, 4),
                                     (1, "F", 1, 1, 4, 5), (1, "B", 1, 1, 5, 7)]
    assert run.makespan == run.closed_form == 9  # (m + p - 1)(F + B)
    assert run.idle_per_rank == [3, 3] and run.bubble_ratio == 6 / 18
    assert run.peak_inflight == [2, 1]
    # zero-length transfers at each producer's end: activations down, gradients up
    assert spans(run, "pp_send") == [(0, "send", 0, 0, 1, 1), (0, "send", 0, 1, 2, 2),
                                     (1, "send", 1, 0, 4, 4), (1, "send", 1, 1, 7, 7)]
    times, level = memory_timeline(run.timeline, {0: 0.0, 1: 0.0})[0]
    assert times.tolist() == [0, 0, 1, 6, 9] and level.tolist() == [0, 1, 2, 1, 0]


@pytest.mark.quick
def test_two_stages_with_latency():
    """The same with a p2p latency of 0.5: each transfer adds 0.5 (F0 reaches rank 1 at 1.5, its
    B0 ends at 4.5 and reaches rank 0 at 5, B1 ends at 7.5 and reaches rank 0 at 8)."""
    run = run_schedule(generate("1f1b", 2, 2), comm=0.5)
    assert spans(run, "compute") == [(0, "F", 0, 0, 0, 1), (0, "F", 0, 1, 1, 2), (0, "B", 0, 0, 5, 7),
                                     (0, "B", 0, 1, 8, 10), (1, "F", 1, 0, 1.5, 2.5),
                                     (1, "B", 1, 0, 2.5, 4.5), (1, "F", 1, 1, 4.5, 5.5),
                                     (1, "B", 1, 1, 5.5, 7.5)]
    assert run.makespan == 10 and run.closed_form is None  # closed forms assume free communication
    sends = [(0, "send", 0, 0, 1, 1.5), (0, "send", 0, 1, 2, 2.5), (1, "send", 1, 0, 4.5, 5),
             (1, "send", 1, 1, 7.5, 8)]
    assert spans(run, "pp_send") == sends
    recvs = [(1 - r, "recv", 1 - st, mb, t0, t1) for r, _, st, mb, t0, t1 in sends]
    assert spans(run, "pp_recv") == sorted(recvs, key=lambda row: (row[0], row[4]))


@pytest.mark.quick
def test_overlapped_pair_is_two_spans_back_to_back():
    """One rank holding both stages of a chain (chunks of half a stage: F = I = W = 0.5); the
    pair 0F1&1B0 runs its forward half, then its backward half."""
    rows = ((Action(0, "F", 0), Action(1, "F", 0), Action(0, "FB", 1, 1, 0), Action(1, "F", 1),
             Action(1, "B", 1), Action(0, "B", 0), Action(0, "B", 1)),)
    run = run_schedule(Schedule("pair", 1, 2, (0, 0), rows))
    assert spans(run, "compute") == [(0, "F", 0, 0, 0, 0.5), (0, "F", 1, 0, 0.5, 1), (0, "F", 0, 1, 1, 1.5),
                                     (0, "B", 1, 0, 1.5, 2.5), (0, "F", 1, 1, 2.5, 3),
                                     (0, "B", 1, 1, 3, 4), (0, "B", 0, 0, 4, 5), (0, "B", 0, 1, 5, 6)]
    assert run.makespan == 6 and run.idle_per_rank == [0] and spans(run, "pp_send") == []
    assert run.peak_inflight == [1.5]  # three half-stage activations after the pair's forward


@pytest.mark.parametrize("name", [n for n in REGISTRY if REGISTRY[n].closed_form is not None])
def test_runs_match_closed_forms(name):
    """With F = I = W = 1 and free communication every built-in schedule runs in its closed form
    wherever that applies; the bubble ratio is 1 - 3m / makespan and the peaks are the replay's."""
    for p in range(1, 6):
        for m in range(p, 3 * p + 3):
            for v in ((1, 2, 3) if REGISTRY[name].takes("vpp") else (1,)):
                try:
                    sched = generate(name, p, m, vpp=v)
                except ScheduleError:
                    continue  # outside the generator's range
                run = run_schedule(sched)
                if run.closed_form is not None:
                    assert run.makespan == pytest.approx(run.closed_form), (p, m, v)
                assert run.bubble_ratio == pytest.approx(1 - 3 * m / run.makespan), (p, m, v)
                ref = replay(sched, scaled_costs(sched, *UNIT))
                assert run.peak_inflight == pytest.approx(list(ref.peak_inflight)), (p, m, v)


@pytest.mark.quick
def test_closed_form_uses_the_schedules_own_vpp():
    sched = generate("interleaved-1f1b", 4, 8, vpp=2)
    assert run_schedule(sched).closed_form == 28.5 == run_schedule(sched).makespan
    assert run_schedule(generate("interleaved-1f1b", 4, 8, vpp=4)).closed_form == 26.25
