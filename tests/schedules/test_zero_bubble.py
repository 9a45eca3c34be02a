"""ZB-H1, ZB-H2 and ZB-V: replayed makespans equal their closed forms (ZB-H1's for W <= min(F, I));
ZB-H2 is a parallelogram whose steady step across consecutive steps is shorter than ZB-H1's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from helpers import makespan, tiny_model
from simtrain import api
from simtrain.schedules import REGISTRY, generate, replay
from simtrain.schedules.ir import Action, Schedule
from simtrain.workload.stages import chunk_pass_times, split_layers


@pytest.mark.parametrize("p", range(1, 9))
def test_zero_bubble_closed_forms(p):
    for m in range(p, 33):
        h1 = makespan(generate("zb-h1", p, m))
        assert h1 == m * 3 + (p - 1) * (1 + 1 - 1) == REGISTRY.makespan("zb-h1", p, m, 1, 1, 1)
        if m >= 2 * p - 1:
            h2 = makespan(generate("zb-h2", p, m))
            zv = makespan(generate("zb-v", p, m))
            assert h2 == REGISTRY.makespan("zb-h2", p, m, 1, 1, 1) == m * 3 + (p - 1)
            assert zv == REGISTRY.makespan("zb-v", p, m, 1, 1, 1) == m * 3 + (p - 1) / 2
            # the papers: ZB-H2 and ZB-V have (almost) no bubble; ZB-V at ZB-H1's memory
            assert h2 <= h1 and zv <= h1
    # ZB-H1's formula holds for W <= min(F, I) (see its record)
    for F, I, W in [(2, 1, 1), (1, 2, 0.5), (1.5, 1.5, 1)]:  # noqa: E741,N806
        m = 3 * p
        assert makespan(generate("zb-h1", p, m), F, I, W) == pytest.approx(
            REGISTRY.makespan("zb-h1", p, m, F, I, W))


# ---- ZB-H2: the parallelogram and the steady state across steps ---------------------------------

def repeat(schedule: Schedule, steps: int) -> Schedule:
    """``steps`` consecutive steps of ``schedule`` with nothing between them (optimizer
    post-validation, free optimizer): each rank runs step k's actions, on micro-batches
    ``k m .. k m + m - 1``, right after its own actions of step k - 1."""
    m = schedule.num_microbatches
    rows = tuple(tuple(Action(a.stage, a.kind, a.mb + k * m) for k in range(steps) for a in row)
                 for row in schedule.actions)
    return Schedule(schedule.name, schedule.num_ranks, steps * m, schedule.stage_to_rank, rows)


def period(name: str, p: int, m: int, F=1.0, I=1.0, W=1.0) -> float:  # noqa: E741,N803
    """The steady-state step: how much a third step adds to two."""
    s = generate(name, p, m)
    return replay(repeat(s, 3), (F, I, W)).makespan - replay(repeat(s, 2), (F, I, W)).makespan


@pytest.mark.quick
@pytest.mark.parametrize("p", range(1, 9))
def test_zb_h2_is_a_parallelogram(p):
    """With F = I = W, rank r works without a gap from r to r + 3m (Qi et al. 2024, figure 3),
    where ZB-H1's rank r idles p - 1 - r inside its span (1F1B's trapezoid)."""
    for m in (2 * p - 1, 2 * p, 3 * p):
        h2 = replay(generate("zb-h2", p, m), (1, 1, 1))
        h1 = replay(generate("zb-h1", p, m), (1, 1, 1))
        for r in range(p):
            assert (h2.start[r][0], h2.end[r][-1], h2.busy[r]) == (r, r + 3 * m, 3 * m)
            assert h1.end[r][-1] - h1.start[r][0] - h1.busy[r] == p - 1 - r


@pytest.mark.parametrize("p", range(1, 9))
def test_zb_h2_steady_step(p):
    """Steps back to back (post-validation): ZB-H2's step is ``m(F+I+W) + (p-1) max(0, F+I-2W)``,
    the paper's bubble (table 2), when I <= F or W <= F; ZB-H1's stays its single-step makespan
    ``m(F+I+W) + (p-1)(F+I-W)`` (W <= min(F, I)). So ZB-H2's is shorter whenever W > 0 and p > 1."""
    for m in (2 * p - 1, 2 * p, 3 * p + 1):
        for F, I, W in [(1, 1, 1), (1, 1, 0.5), (1, 0.5, 0.5), (2, 1, 1), (1, 0.75, 1.5), (1, 2, 1),  # noqa: E741,N806
                        (1, 1, 0.25), (1, 1, 0)]:
            h2 = period("zb-h2", p, m, F, I, W)
            assert h2 == pytest.approx(m * (F + I + W) + (p - 1) * max(0, F + I - 2 * W))
            if W <= min(F, I):
                h1 = period("zb-h1", p, m, F, I, W)
                assert h1 == pytest.approx(m * (F + I + W) + (p - 1) * (F + I - W))
                if W > 0 and p > 1:
                    assert h2 < h1
    # one step alone: the same makespan as ZB-H1 when F = I = W (the last rank's start-up)
    m = 3 * p
    assert makespan(generate("zb-h2", p, m)) == makespan(generate("zb-h1", p, m)) == 3 * m + p - 1


@pytest.mark.quick
@pytest.mark.parametrize("p", range(1, 7))
def test_zb_h2_in_flight_matches_its_record(p):
    """2p - 1 micro-batches on every rank (at most m), in the replay and in the record."""
    for m in range(1, 3 * p + 2):
        peaks = replay(generate("zb-h2", p, m), (1, 1, 1)).peak_inflight
        assert peaks == tuple([float(min(2 * p - 1, m))] * p)
        assert [REGISTRY["zb-h2"].in_flight(p, s, m) for s in range(p)] == list(peaks)


@pytest.mark.quick
def test_zb_h2_closed_form_holds_for_input_grads_up_to_twice_the_forward():
    """The record's makespan ``m(F+I+W) + (p-1) max(F, F+I-2W)`` is the replay's for I <= 2F."""
    for p in range(1, 7):
        for m in (2 * p - 1, 2 * p + 1, 3 * p):
            s = generate("zb-h2", p, m)
            for I in (0, 0.5, 1, 1.5, 2):  # noqa: E741
                for W in (0, 0.25, 1, 2, 3):
                    assert makespan(s, 1, I, W) == pytest.approx(REGISTRY.makespan("zb-h2", p, m, 1, I, W))


FLAT = 0.6  # the course notes' flat GEMM efficiency


def _steps(schedule: str, p: int, m: int, tp: int, dp: int, sync: str, vocab: int = 32000) -> tuple[float, float]:
    """(first, steady) step seconds of three steps of a tiny model (2 layers per stage), its GEMMs
    at a flat efficiency so that F, I and W take the times their FLOPs give (the zero-bubble
    schedules' premise; the kernel model's short-K weight gradients would make W the longest)."""
    sc = api.resolve(dict(model="llama3-8b", topology="h100-ib", gpus=p * tp * dp, tp=tp, pp=p, seq=1024,
                          gbs=m * dp, schedule=schedule, steps=3, optimizer_sync=sync, efficiency=FLAT))
    rep = api.simulate(replace(sc, model=tiny_model(layers=2 * p, vocab=vocab))).report
    return rep["first_step_s"], rep["steady_step_s"]


@pytest.mark.parametrize("p", [2, 4])
def test_zb_h2_steady_step_simulated(p):
    """The simulator with post-validation: a first step no longer than ZB-H1's, then a shorter
    steady step, because rank 0 starts the next step while the last rank drains this one."""
    for m in (2 * p, 3 * p):
        for tp, dp in ((1, 1), (2, 1), (1, 2)):
            h1_first, h1_steady = _steps("zb-h1", p, m, tp, dp, "post-validation")
            h2_first, h2_steady = _steps("zb-h2", p, m, tp, dp, "post-validation")
            assert h2_steady < h2_first and h2_steady < h1_steady
            assert h2_first <= h1_first * (1 + 1e-3)


@pytest.mark.parametrize("p", [2, 4])
def test_zb_h2_with_grad_norm_sync_as_the_closed_forms_say(p):
    """With the global gradient norm every step waits for the slowest rank: the steady step is a
    single step, and ZB-H1 and ZB-H2 differ by their closed forms' difference, computed with the
    stages' mean costs (a small vocabulary keeps the stages near uniform; with p = 2 both stages
    are end stages, 15% apart)."""
    for m in (2 * p, 3 * p):
        sc = api.resolve(dict(model="llama3-8b", topology="h100-ib", gpus=2 * p, tp=1, pp=p, seq=1024, gbs=2 * m,
                              efficiency=FLAT))
        model = tiny_model(layers=2 * p, vocab=1024)
        chunks = split_layers(model, sc.parallel, sc.gpu, p)
        times = chunk_pass_times(model, sc.parallel, sc.gpu, chunks)
        F, I, W = (sum(t[k] for t in times) / len(times) for k in range(3))  # noqa: E741,N806
        expected = REGISTRY.makespan("zb-h1", p, m, F, I, W) - REGISTRY.makespan("zb-h2", p, m, F, I, W)
        h1_first, h1_steady = _steps("zb-h1", p, m, 1, 2, "grad-norm", vocab=1024)
        h2_first, h2_steady = _steps("zb-h2", p, m, 1, 2, "grad-norm", vocab=1024)
        assert h1_steady == pytest.approx(h1_first, rel=1e-3) and h2_steady == pytest.approx(h2_first, rel=1e-3)
        assert expected > 0
        assert h1_steady - h2_steady == pytest.approx(expected, abs=0.005 * h1_steady)
