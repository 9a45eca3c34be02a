"""DualPipe (DeepSeek-V3 technical report, arXiv 2412.19437, section 3.2.1) and DualPipeV.

Both follow the eight-step structure of ``DualPipe.step`` in deepseek-ai/DualPipe
``dualpipe/dualpipe.py`` (DualPipeV is the same steps with the half rank replaced by the rank, as
in that repository's ``dualpipev.py`` and PyTorch's ``ScheduleDualPipeV``). Written per rank with
the two stages it holds called *own* (the chain whose inputs enter on its side of the pipeline)
and *other*:

====  ==========================  ===========================================
step  repeats                     actions
====  ==========================  ===========================================
1     ``2(H - h - 1)``            F own
2     ``h + 1``                   F own, F other
3     ``H - h - 1``               I other, W (oldest pending), F other
4     ``n - 2H + h + 1``          F own & B other, F other & B own (overlapped)
5     ``H - h - 1``               B other, F other & B own
6     ``h + 1``                   B other, B own (second half split into I, W deferred)
7     ``H - h - 1``               W (oldest pending), I own
8     ``h + 1``                   W (oldest pending)
====  ==========================  ===========================================

DualPipe: ``H = p/2``, ``h = min(r, p-1-r)``, ``n = m/2`` micro-batches per direction; the
first step of step 4 on the two middle ranks is not overlapped (F own, then B other).
DualPipeV: ``H = p``, ``h = r``, ``n = m``; the not-overlapped first step is on the last rank.
Pending W run oldest first (the repository's FIFO ``WeightGradStore``). For DualPipeV this is,
action for action, the order of PyTorch's ``ScheduleDualPipeV._calculate_single_rank_operations``
(pytorch/pytorch ``torch/distributed/pipelining/schedules.py``), whose steps 6 and 7 split the
same backwards into I and W and whose W queue is the same FIFO.

Bubble per the DualPipe README: ``(PP/2 - 1)(F&B + B - 3W)``, activation memory ``PP + 1``
chunk activations (``PP`` chunks: ``p`` stages for DualPipe, ``2p`` half stages for DualPipeV),
parameters twice (DualPipe) or once (DualPipeV).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from simtrain.errors import ScheduleError
from simtrain.schedules.ir import Action, Schedule
from simtrain.schedules.record import ClosedForm, Costs, ScheduleRecord
from simtrain.schedules.zero_bubble import v_stage_to_rank


def _rank_row(own: int, other: int, H: int, h: int, n: int, split_first: bool,  # noqa: N803
              mb_of: Callable[[int, int], int]) -> tuple[Action, ...]:
    """One rank's actions. ``mb_of(stage, j)`` maps a stage's j-th micro-batch to its id."""
    row: list[Action] = []
    nf = {own: 0, other: 0}
    nb = {own: 0, other: 0}
    pending_w: deque[tuple[int, int]] = deque()

    def f(stage: int) -> Action:
        j = nf[stage]
        nf[stage] += 1
        return Action(stage, "F", mb_of(stage, j))

    def b(stage: int, split: bool = False) -> Action:
        j = nb[stage]
        nb[stage] += 1
        mb = mb_of(stage, j)
        if split:
            pending_w.append((stage, mb))
            return Action(stage, "I", mb)
        return Action(stage, "B", mb)

    def fb(fstage: int, bstage: int) -> Action:
        fa, ba = f(fstage), b(bstage)
        return Action(fa.stage, "FB", fa.mb, ba.stage, ba.mb)

    def w() -> None:
        if pending_w:
            stage, mb = pending_w.popleft()
            row.append(Action(stage, "W", mb))

    for _ in range(2 * (H - h - 1)):                     # step 1: nF0
        row.append(f(own))
    for _ in range(h + 1):                               # step 2: nF0F1
        row += [f(own), f(other)]
    for _ in range(H - h - 1):                           # step 3: nI1W1F1
        row.append(b(other, split=True))
        w()
        row.append(f(other))
    for i in range(n - 2 * H + h + 1):                   # step 4: nF0B1F1B0 (main)
        if i == 0 and split_first:
            row += [f(own), b(other)]
        else:
            row.append(fb(own, other))
        row.append(fb(other, own))
    for _ in range(H - h - 1):                           # step 5: nB1F1B0
        row += [b(other), fb(other, own)]
    zb = False
    steps6 = h + 1
    for i in range(steps6):                              # step 6: nB1B0, second half split
        if i == steps6 // 2 and h % 2 == 1:
            zb = True
        row.append(b(other, split=zb))
        if i == steps6 // 2 and h % 2 == 0:
            zb = True
        row.append(b(own, split=zb))
    for _ in range(H - h - 1):                           # step 7: nWI0
        w()
        row.append(b(own, split=zb))
    for _ in range(h + 1):                               # step 8: nW
        w()
    while pending_w:  # never taken for valid (p, m); kept so the row is always complete
        w()
    return tuple(row)


def dualpipe(pp: int, m: int, **_: object) -> Schedule:
    """DualPipe (DeepSeek-V3): two chains of ``p`` stages running in opposite directions.

    Chain 0 is stages ``0..p-1`` with stage j on rank j; chain 1 is stages ``p..2p-1`` with stage
    ``p + j`` (model chunk j) on rank ``p-1-j``. So rank r holds chunk r of chain 0 and chunk
    ``p-1-r`` of chain 1 (two parameter copies). Micro-batches ``0..m/2-1`` walk chain 0 and
    ``m/2..m-1`` chain 1. Needs ``p`` even, ``m`` even and ``m >= 2p`` (``dualpipe.py`` asserts
    the same).
    """
    if pp < 2 or pp % 2 or m < 2 * pp or m % 2:
        raise ScheduleError(f"dualpipe: needs an even pp >= 2 and an even number of micro-batches "
                            f"m >= 2*pp (got pp={pp}, m={m}; valid m: {2 * pp}, {2 * pp + 2}, ...)")
    H, n = pp // 2, m // 2  # noqa: N806
    stage_to_rank = tuple(range(pp)) + tuple(pp - 1 - j for j in range(pp))

    def mb_of(stage: int, j: int) -> int:
        return j if stage < pp else n + j

    rows = []
    for r in range(pp):
        s_chain0, s_chain1 = r, 2 * pp - 1 - r
        own, other = (s_chain0, s_chain1) if r < H else (s_chain1, s_chain0)
        h = min(r, pp - 1 - r)
        rows.append(_rank_row(own, other, H, h, n, split_first=(h == H - 1), mb_of=mb_of))
    chains = (tuple(range(pp)), tuple(range(pp, 2 * pp)))
    mb_chain = tuple([0] * n + [1] * n)
    return Schedule("dualpipe", pp, m, stage_to_rank, tuple(rows), chains, mb_chain,
                    meta={"pp": pp, "m": m})


def dualpipev(pp: int, m: int, **_: object) -> Schedule:
    """DualPipeV ("cut-in-half" DualPipe; deepseek-ai/DualPipe ``dualpipev.py``, PyTorch's
    ScheduleDualPipeV): one V-shaped chain of ``2p`` stages like ZB-V (rank r holds stages r and
    ``2p-1-r``), every micro-batch walking down and back up, with DualPipe's overlapped F&B
    steady phase. Needs ``m >= 2p``.
    """
    if pp < 1 or m < 2 * pp:
        raise ScheduleError(f"dualpipev: needs m >= 2*pp micro-batches (got pp={pp}, m={m}; "
                            f"valid m: {2 * pp} or more)")
    rows = tuple(_rank_row(r, 2 * pp - 1 - r, pp, r, m, split_first=(r == pp - 1),
                           mb_of=lambda stage, j: j) for r in range(pp))
    return Schedule("dualpipev", pp, m, v_stage_to_rank(pp), rows, meta={"pp": pp, "m": m})


def _dualpipe_bubble(p: int, m: int, c: Costs, v: int) -> float:
    """``(p/2 - 1)(F&B + B - 3W)`` (DeepSeek-V3 technical report, arXiv:2412.19437, table 2;
    DualPipe README), in chunk costs (a chunk is a full stage here). ``F&B`` is the overlapped
    pair: we use ``F + B`` (no overlap, as :func:`~simtrain.schedules.replay.replay` does), so
    the real schedule's gain from overlapping communication is not in this number. Needs p
    even, m even, m >= 2p. The replay matches it when F = I and W <= F; it is shorter when
    I > F and longer when I < F or W > F."""
    return (p // 2 - 1) * ((c.F + c.B) + c.B - 3 * c.W)


def _dualpipev_bubble(p: int, m: int, c: Costs, v: int) -> float:
    """``(p - 1)(F&B + B - 3W)/2``: DualPipe's formula with PP = 2p stages of half-size chunks
    (DualPipe repository README, "DualPipeV"), F&B = F + B again. Needs m >= 2p; the same
    agreement with :func:`~simtrain.schedules.replay.replay` as DualPipe."""
    return (p - 1) * ((c.F + c.B) + c.B - 3 * c.W) / 2


def _in_flight(p: int, stage: int, m: int, v: int) -> float:
    """``p + 1`` on every rank (DeepSeek-V3 report, table 2)."""
    return min(p + 1, m)


def _v_in_flight(p: int, stage: int, m: int, v: int) -> float:
    """``p + 1/2`` on every rank: DualPipe's ``PP + 1`` chunk activations with PP = 2p chunks
    of half a stage each (DualPipe repository README, "DualPipeV"), within DualPipe's ``p + 1``
    (DeepSeek-V3 report, table 2). At most ``m``."""
    return min(p + 0.5, m)


def _dualpipe_covers(p: int, m: int, v: int) -> bool:
    return not (p % 2 or m % 2 or m < 2 * p)


def _dualpipev_covers(p: int, m: int, v: int) -> bool:
    return m >= 2 * p


DUALPIPE = ScheduleRecord(
    "dualpipe", dualpipe, "Two opposite pipelines, overlapped F&B (DeepSeek-V3)",
    closed_form=ClosedForm(_dualpipe_bubble, _in_flight, _dualpipe_covers, "pp even, m even, m >= 2 pp"),
    static_copies=2)  # rank r runs stages r and p - 1 - r (DeepSeek-V3 report, table 2)

DUALPIPEV = ScheduleRecord(
    "dualpipev", dualpipev, "DualPipe cut in half: one V-shaped pipeline (DeepSeek-V3 DualPipe repo)",
    closed_form=ClosedForm(_dualpipev_bubble, _v_in_flight, _dualpipev_covers, "m >= 2 pp"))

#: This module's schedules, read by :mod:`simtrain.schedules.registry`.
RECORDS = (DUALPIPE, DUALPIPEV)
