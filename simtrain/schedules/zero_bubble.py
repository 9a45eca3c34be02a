"""Zero-bubble schedules: ZB-H1, ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024,
section 2 / figure 3) and ZB-V (Qi et al., "Pipeline Parallelism with Controllable Memory", 2024,
and section 6 of the newer zero-bubble paper; the handcrafted schedule of sail-sg's
zero-bubble-pipeline-parallelism repository, as also ported to PyTorch's ScheduleZBVZeroBubble).

The backward is split into ``I`` (gradient w.r.t. the input, on the critical path: the previous
stage waits for it) and ``W`` (gradient w.r.t. the weights, which nothing waits for), and W is
deferred to fill bubbles. The paper calls our ``I`` "B".
"""

from __future__ import annotations

from simtrain.errors import ScheduleError
from simtrain.schedules.basic import one_f_one_b_in_flight
from simtrain.schedules.ir import Action, Schedule
from simtrain.schedules.record import ClosedForm, Costs, ScheduleRecord


def _check(name: str, pp: int, m: int) -> None:
    if pp < 1 or m < 1:
        raise ScheduleError(f"{name}: need pp >= 1 and m >= 1 micro-batches (got pp={pp}, m={m})")


def _deferred_w_row(stage: int, m: int, warmup: int, lag: int) -> tuple[Action, ...]:
    """One rank of a single-chain zero-bubble schedule.

    ``warmup`` forwards, then steady steps ``F(k+warmup) I(k) [W(k-lag)]``, then cool-down steps
    ``I(k) [W(k-lag)]``, then the remaining W. ``W(j)`` runs right after ``I(j+lag)``: ``lag``
    is how many weight gradients the rank keeps pending. Peak in-flight micro-batches (an
    activation is held from F until W) is ``warmup + 1 + lag`` when ``m`` allows.
    """
    warmup = min(warmup, m)
    row = [Action(stage, "F", k) for k in range(warmup)]
    nw = 0
    for k in range(m):
        if k + warmup < m:
            row.append(Action(stage, "F", k + warmup))
        row.append(Action(stage, "I", k))
        if k - nw >= lag:
            row.append(Action(stage, "W", nw))
            nw += 1
    row += [Action(stage, "W", j) for j in range(nw, m)]
    return tuple(row)


def zb_h1(pp: int, m: int, **_: object) -> Schedule:
    """ZB-H1 (Qi et al. 2024, section 2.1, figure 3 top; PyTorch's ScheduleInterleavedZeroBubble
    with one stage per rank, i.e. ZB1P).

    1F1B's warm-up (``p - 1 - r`` forwards on rank r) with I in place of B, and rank r deferring
    its W by ``r`` steps so that every rank holds ``p`` micro-batches (the paper: "all stages have
    the same number of in-flight micro-batches"; peak memory p M_B, as rank 0 of 1F1B). The
    deferred W fill the cool-down bubbles. Makespan with uniform stages (paper's table):
    ``m(F+I+W) + (p-1)(F+I-W)``, a third of 1F1B's bubble when F = I = W.
    """
    _check("zb-h1", pp, m)
    rows = tuple(_deferred_w_row(r, m, warmup=pp - 1 - r, lag=r) for r in range(pp))
    return Schedule("zb-h1", pp, m, tuple(range(pp)), rows, meta={"pp": pp, "m": m})


def zb_h2(pp: int, m: int, **_: object) -> Schedule:
    """ZB-H2 (Qi et al. 2024, section 2.2, figure 3 bottom): extra warm-up forwards fill the
    bubble before the first backward, and deferred W fill the tail, so that each rank works
    without a gap: the schedule is a parallelogram rather than 1F1B's trapezoid.

    Rank r runs ``2(p - r) - 1`` forwards before its first I (``p - 1 - r`` more than
    1F1B/ZB-H1: the time the first input gradient takes to come back), then ``F I W`` steps
    with W deferred by ``2r`` steps; the last ranks, whose backward starts first, run ``F I``
    pairs while rank 0 is still warming up and keep those W for the tail, where they fill the
    time the last input gradients take to travel to rank 0. With ``F = I = W`` rank r is busy
    without a gap from ``rF`` to ``rF + m(F + I + W)``; with ``I <= F`` the most idle a rank
    has inside its span is the paper's bubble ``(p - 1) max(0, F + I - 2W)`` (table 2).

    A single step still pays the ``(p - 1)F`` start-up of the last rank, so its makespan with
    F = I = W is ZB-H1's (``3mF + (p - 1)F``). The gain is across steps, when nothing
    synchronises the ranks between them (the paper's optimizer post-validation, "bypassing
    optimizer synchronizations"): rank 0 starts the next step while the last rank finishes
    this one, and with fixed costs the step period is ``m(F + I + W) + (p - 1) max(0, F + I -
    2W)`` when ``I <= F`` or ``W <= F``, where ZB-H1's stays its single-step makespan.

    Every rank holds ``2p - 1`` micro-batches at its peak, just before its first W: the
    paper's ``(2p - 1) M_B`` (table 1).
    """
    _check("zb-h2", pp, m)
    rows = tuple(_deferred_w_row(r, m, warmup=2 * (pp - 1 - r), lag=2 * r) for r in range(pp))
    return Schedule("zb-h2", pp, m, tuple(range(pp)), rows, meta={"pp": pp, "m": m})


def v_stage_to_rank(pp: int) -> tuple[int, ...]:
    """The V-shaped map of ``2p`` stages: stage j on rank j for j < p, on rank 2p-1-j otherwise."""
    return tuple(j if j < pp else 2 * pp - 1 - j for j in range(2 * pp))


def zb_v(pp: int, m: int, **_unused: object) -> Schedule:
    """ZB-V (Qi et al., "Pipeline Parallelism with Controllable Memory", 2024; zero-bubble repo
    handcrafted V schedule, also PyTorch's ScheduleZBVZeroBubble).

    ``2p`` stages in a V (rank r holds stages r and 2p-1-r), each half a plain stage. Phases on
    rank r (chunk 0 = stage r, chunk 1 = stage 2p-1-r):

    1. ``2(p-r) - 1`` forwards of chunk 0;
    2. ``r`` times: F chunk 1, F chunk 0;
    3. ``p - r`` times: F, I, W of chunk 1;
    4. steady: F (while any left), I, W of chunk 0, then F, I, W of chunk 1;
    5. cool-down: ``r`` times I chunk 0, I chunk 1; ``p - r`` times I, W chunk 0; then the
       remaining W of chunk 1 and of chunk 0.

    The phase counts assume ``m >= 2p - 1``; for fewer micro-batches the schedule is built for
    ``2p - 1`` and the actions of the missing micro-batches are dropped (as PyTorch does).
    Peak activation memory equals 1F1B's (p stage-activations on every rank); zero bubble when
    F = I = W (chunk costs).
    """
    _check("zb-v", pp, m)
    n = max(2 * pp - 1, m)
    rows = []
    for r in range(pp):
        s0, s1 = r, 2 * pp - 1 - r
        row: list[Action] = []
        f0 = f1 = b0 = b1 = 0

        def add(stage: int, kind: str, mb: int) -> None:
            row.append(Action(stage, kind, mb))

        for _ in range(2 * (pp - r) - 1):
            add(s0, "F", f0); f0 += 1  # noqa: E702
        for _ in range(r):
            add(s1, "F", f1); f1 += 1  # noqa: E702
            add(s0, "F", f0); f0 += 1  # noqa: E702
        for _ in range(pp - r):
            add(s1, "F", f1); f1 += 1  # noqa: E702
            add(s1, "I", b1); add(s1, "W", b1); b1 += 1  # noqa: E702
        while f1 < f0 or f0 < n:
            if f0 < n:
                add(s0, "F", f0); f0 += 1  # noqa: E702
            add(s0, "I", b0); add(s0, "W", b0); b0 += 1  # noqa: E702
            add(s1, "F", f1); f1 += 1  # noqa: E702
            add(s1, "I", b1); add(s1, "W", b1); b1 += 1  # noqa: E702
        w0, w1 = b0, b1
        for _ in range(r):
            add(s0, "I", b0); b0 += 1  # noqa: E702
            add(s1, "I", b1); b1 += 1  # noqa: E702
        for _ in range(pp - r):
            add(s0, "I", b0); b0 += 1  # noqa: E702
            add(s0, "W", w0); w0 += 1  # noqa: E702
        row += [Action(s1, "W", j) for j in range(w1, b1)]
        row += [Action(s0, "W", j) for j in range(w0, b0)]
        rows.append(tuple(a for a in row if a.mb < m))
    return Schedule("zb-v", pp, m, v_stage_to_rank(pp), tuple(rows), meta={"pp": pp, "m": m})


def _h1_bubble(p: int, m: int, c: Costs, v: int) -> float:
    """``(p - 1)(F + I - W)`` (Qi et al. 2024, table 2: bubble (p-1)(T_F + T_B - T_W), their T_B
    being our I), for ``m >= p``. :func:`~simtrain.schedules.replay.replay` matches it when
    ``W <= min(F, I)``; with a larger W the handcrafted W lag (r on rank r) no longer hides the
    W and the replay is longer."""
    return (p - 1) * (c.F + c.I - c.W)


def _h2_bubble(p: int, m: int, c: Costs, v: int) -> float:
    """``(p - 1) max(F, F + I - 2W)`` for ``m >= 2p - 1``. The paper's bubble (Qi et al. 2024,
    table 2) is ``(p - 1)(F + I - 2W)``, zero when F = I = W, counted per worker in steady
    state, where the optimizer post-validation lets the next step start while this one drains.
    One step from t = 0 cannot hide the last rank's ``(p - 1)F`` start-up: with F = I = W the
    makespan equals ZB-H1's (3mF + (p-1)F). :func:`~simtrain.schedules.replay.replay` matches
    it for ``I <= 2F``; with a larger I the input gradients, not the forwards, pace the
    pipeline and the replay is longer."""
    return (p - 1) * max(c.F, c.F + c.I - 2 * c.W)


def _v_bubble(p: int, m: int, c: Costs, v: int) -> float:
    """``(p - 1)F/2`` when F = I = W and ``m >= 2p - 1``: zero bubble in steady state (Qi et al.,
    "Pipeline Parallelism with Controllable Memory", 2024; zero-bubble repo README), plus the
    start-up of one step, ``p - 1`` chunk forwards of ``F/2``. No formula is published for
    other costs. Exact in :func:`~simtrain.schedules.replay.replay`."""
    return (p - 1) * c.F / 2


def _h2_in_flight(p: int, stage: int, m: int, v: int) -> float:
    """``2p - 1`` on every stage (Qi et al. 2024, table 1: (2p - 1) M_B). The paper's peak is
    the first worker's after its warm-up; in the parallelogram the last workers reach it too,
    because an activation is held until its W (as :mod:`~simtrain.schedules.replay` and the
    memory plan count it): rank r runs ``2(p - r) - 1`` forwards before its first I and ``2r``
    more before its first W. At most ``m``."""
    return min(2 * p - 1, m)


def _m_at_least_p(p: int, m: int, v: int) -> bool:
    return m >= p


def _m_at_least_2p_minus_1(p: int, m: int, v: int) -> bool:
    return m >= 2 * p - 1


# ZB-H1 and ZB-V peak like 1F1B (Qi et al. 2024); ZB-V's balance across ranks is not modelled.
ZB_H1 = ScheduleRecord(
    "zb-h1", zb_h1, "Zero bubble, 1F1B's memory (Qi et al. 2024)",
    closed_form=ClosedForm(_h1_bubble, one_f_one_b_in_flight, _m_at_least_p, "m >= pp"))

ZB_H2 = ScheduleRecord(
    "zb-h2", zb_h2, "Zero bubble, 2p - 1 micro-batches in flight (Qi et al. 2024)",
    closed_form=ClosedForm(_h2_bubble, _h2_in_flight, _m_at_least_2p_minus_1, "m >= 2 pp - 1"))

ZB_V = ScheduleRecord(
    "zb-v", zb_v, "V-shaped zero bubble, two half-size stages per rank (Qi et al. 2024)",
    closed_form=ClosedForm(_v_bubble, one_f_one_b_in_flight, _m_at_least_2p_minus_1,
                           "m >= 2 pp - 1 (and F = I = W for the makespan)", equal_costs=True))

#: This module's schedules, read by :mod:`simtrain.schedules.registry`.
RECORDS = (ZB_H1, ZB_H2, ZB_V)
