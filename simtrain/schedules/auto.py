"""``zb-auto``: a greedy zero-bubble scheduler for given costs and a memory limit.

In the spirit of the automatic scheduler of Qi et al., "Zero Bubble Pipeline Parallelism"
(ICLR 2024, section 3.1, the heuristic algorithm), simplified: a list scheduler over one chain of
``pp`` stages (stage r on rank r) that walks time forward and, whenever a rank is free,

1. runs the next I (input gradient) if it is ready: it is on the critical path, the previous
   stage waits for it; but when the next F is ready too and the rank's last F/I was an I, it
   runs the F (F and I alternate in the steady state, as in 1F1B, so the next stage is fed);
2. else runs the next F if it is ready and the rank holds fewer than ``mem_limit`` micro-batches
   (an activation is held from its F until its W): in the warm-up this schedules as many F as
   memory allows, which keeps the next stages fed;
3. else runs the oldest pending W, if nothing known becomes ready within that W's duration
   (W fills idle time; a gap shorter than the W is waited out instead, so that the W does not
   delay an F or I that becomes ready meanwhile);
4. else waits for the next dependency.

Four variants are built (with and without the F/I alternation of rule 1; rule 3 as stated or
running a pending W whenever nothing is ready) and the shortest kept.

The paper's version also searches over warm-up counts and solves an ILP; we instead build the
greedy order and then also replay the handcrafted ZB-H1 (and 1F1B, ZB-H2) under the same costs,
returning whichever has the smallest makespan among those that respect ``mem_limit``. ZB-H1
holds ``p`` micro-batches per rank, so with ``mem_limit >= pp`` (the default is ``pp``)
zb-auto is never worse than zb-h1 (nor 1F1B) under the same costs. ``meta["picked"]`` says which
order won. There is no closed form: a configuration search ranks zb-auto by 1F1B's, an upper
bound of its makespan.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import cast

from simtrain.errors import ScheduleError
from simtrain.schedules.basic import one_f_one_b
from simtrain.schedules.ir import Action, Schedule
from simtrain.schedules.record import Param, ScheduleRecord
from simtrain.schedules.replay import Costs, CostsLike, inflight_profile, makespan, normalize_costs
from simtrain.schedules.zero_bubble import zb_h1, zb_h2


def _greedy(pp: int, m: int, c: Costs, comm: float, mem_limit: int, *, alternate: bool = True,
            eager_w: bool = False) -> tuple[tuple[Action, ...], ...]:
    INF = float("inf")  # noqa: N806
    rows: list[list[Action]] = [[] for _ in range(pp)]
    clock = [0.0] * pp
    nf = [0] * pp  # next forward micro-batch
    ni = [0] * pp  # next input-gradient micro-batch
    nw_done = [0] * pp
    held = [0] * pp
    last = ["F"] * pp  # the last of F / I run on each rank
    pending: list[deque[int]] = [deque() for _ in range(pp)]
    f_end = [[INF] * m for _ in range(pp)]
    i_end = [[INF] * m for _ in range(pp)]
    events: list[tuple[float, int, int]] = [(0.0, r, r) for r in range(pp)]
    heapq.heapify(events)
    seq = pp

    def f_ready(r: int) -> float:
        k = nf[r]
        if k >= m:
            return INF
        return 0.0 if r == 0 else f_end[r - 1][k] + comm

    def i_ready(r: int) -> float:
        k = ni[r]
        if k >= nf[r]:
            return INF
        t = f_end[r][k]
        if r < pp - 1:
            t = max(t, i_end[r + 1][k] + comm)
        return t

    def push(t: float, r: int) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, r))

    def run(r: int, a: Action, now: float, dur: float) -> float:
        rows[r].append(a)
        clock[r] = now + dur
        push(clock[r], r)
        return clock[r]

    while events:
        now, _, r = heapq.heappop(events)
        if now < clock[r] or nw_done[r] == m:
            continue
        fs, gs, ws = c[r]
        t_i, t_f = i_ready(r), f_ready(r)
        mem_ok = held[r] < mem_limit
        do_i = t_i <= now
        if alternate and do_i and t_f <= now and mem_ok and last[r] == "I":
            do_i = False  # both ready: alternate, as 1F1B does, to keep the next stage fed
        if do_i:
            last[r] = "I"
            k = ni[r]
            ni[r] += 1
            end = run(r, Action(r, "I", k), now, gs)
            i_end[r][k] = end
            pending[r].append(k)
            if r > 0:
                push(end + comm, r - 1)
        elif t_f <= now and mem_ok:
            last[r] = "F"
            k = nf[r]
            nf[r] += 1
            held[r] += 1
            end = run(r, Action(r, "F", k), now, fs)
            f_end[r][k] = end
            if r < pp - 1:
                push(end + comm, r + 1)
            push(end, r)
        else:
            nxt = min(t_i, t_f if mem_ok else INF)
            if pending[r] and (eager_w or nxt == INF or nxt - now >= ws):
                k = pending[r].popleft()
                held[r] -= 1
                nw_done[r] += 1
                run(r, Action(r, "W", k), now, ws)
            elif nxt < INF:
                push(nxt, r)
            # else: sleep until a neighbour's completion wakes this rank
    if any(n != m for n in nw_done):
        raise ScheduleError(f"zb-auto: greedy scheduler stalled (pp={pp}, m={m}, mem_limit={mem_limit})")
    return tuple(tuple(row) for row in rows)


def zb_auto(pp: int, m: int, costs: CostsLike = (1.0, 1.0, 1.0), comm: float = 0.0,
            mem_limit: int | None = None, **_: object) -> Schedule:
    """Greedy zero-bubble schedule for ``costs = (F, I, W)`` (each a number or one value per
    stage), p2p latency ``comm`` and at most ``mem_limit`` in-flight micro-batches per rank
    (default ``pp``, 1F1B's peak). See the module docstring."""
    if pp < 1 or m < 1:
        raise ScheduleError(f"zb-auto: need pp >= 1 and m >= 1 (got pp={pp}, m={m})")
    limit = pp if mem_limit is None else int(mem_limit)
    if limit < 1:
        raise ScheduleError(f"zb-auto: mem_limit must be >= 1 micro-batch (got {mem_limit})")
    c = normalize_costs(costs, pp)
    meta = {"pp": pp, "m": m, "mem_limit": limit, "comm": comm}
    best, best_t, picked = None, float("inf"), ""
    for alternate in (True, False):
        for eager_w in (True, False):
            rows = _greedy(pp, m, c, comm, limit, alternate=alternate, eager_w=eager_w)
            cand = Schedule("zb-auto", pp, m, tuple(range(pp)), rows)
            t = makespan(cand, costs, comm)
            if t < best_t - 1e-12:
                best, best_t = cand, t
                picked = f"greedy(alternate={alternate}, eager_w={eager_w})"
    for gen in (zb_h1, one_f_one_b, zb_h2):
        cand = gen(pp, m)
        if max(inflight_profile(cand)[1]) > limit:
            continue  # holds more micro-batches than allowed: not replayed
        t = makespan(cand, costs, comm)
        if t < best_t - 1e-12:
            best, best_t, picked = cand, t, cand.name
    best = cast(Schedule, best)  # set by the first greedy order, whose makespan is below inf
    return Schedule("zb-auto", pp, m, best.stage_to_rank, best.actions,
                    meta={**meta, "picked": picked, "makespan": best_t})


ZB_AUTO = ScheduleRecord(
    "zb-auto", zb_auto, "Greedy zero-bubble schedule for given costs and memory (after Qi et al. 2024)",
    params=(Param("costs", "(1, 1, 1)", "(F, I, W), each >= 0: numbers or one value per stage",
                  "per-stage costs to plan for"),
            Param("comm", "0", ">= 0", "p2p latency between stages"),
            Param("mem_limit", "pp", "integer >= 1", "most micro-batches in flight per rank")),
    ranked_as="1f1b")

#: This module's schedules, read by :mod:`simtrain.schedules.registry`.
RECORDS = (ZB_AUTO,)
