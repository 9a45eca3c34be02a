"""Interleaved 1F1B (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM", SC'21, section 2.2.2), as scheduled by Megatron-core's
``forward_backward_pipelining_with_interleaving``.
"""

from __future__ import annotations

from simtrain.errors import ScheduleError
from simtrain.schedules.basic import fill_drain_bubble
from simtrain.schedules.ir import Action, Schedule
from simtrain.schedules.record import ClosedForm, Costs, Param, ScheduleRecord


def _schedule_table(m: int, v: int, group: int) -> list[tuple[int, int]]:
    """Megatron-core's ``get_schedule_table``: the (micro-batch, chunk) of each virtual
    micro-batch. Micro-batches go through a chunk in groups of ``group`` consecutive ones before
    the next chunk; the last group takes whatever remains (fewer or more than ``group`` is fine:
    ``range(g0, m)`` once ``g0 + group >= m``)."""
    table = []
    for g0 in range(0, m, group):
        last = g0 + group >= m
        mbs = range(g0, m) if last else range(g0, g0 + group)
        table += [(mb, c) for c in range(v) for mb in mbs]
        if last:
            break
    return table


def valid_groups(pp: int, m: int) -> list[int]:
    """Micro-batch group sizes Megatron-core accepts for (pp, m): ``pp <= g <= m`` with the
    remainder ``m % g`` either 0 or at least ``pp``."""
    return [g for g in range(pp, m + 1) if m % g == 0 or m % g >= pp]


def interleaved_1f1b(pp: int, m: int, vpp: int | None = None, group: int | None = None, **_: object) -> Schedule:
    """Interleaved (looped, depth-first) 1F1B with ``v = vpp`` model chunks per rank.

    ``p * v`` stages in one chain, stage ``s`` on rank ``s % p`` (chunk ``s // p``). Each rank walks
    the same table of virtual micro-batches (Megatron-core ``get_schedule_table`` with
    ``microbatch_group_size_per_vp_stage = p``: p micro-batches through chunk 0, the same p
    through chunk 1, ..., then the next p); backwards walk the same table with the chunk order
    reversed. Rank r runs ``2(p - r - 1) + (v - 1)p`` warm-up forwards (all of them if that
    reaches ``m v``), then one forward / one backward, then the remaining backwards.

    ``m`` need not be a multiple of ``p`` (recent Megatron-core accepts it: the last group is
    the remainder) but must be at least ``p``. ``v`` is required and at least 2: one chunk per
    rank is plain 1F1B (Megatron uses the non-interleaved schedule then), so ``vpp`` missing or
    1 is an error naming ``vpp = 2`` rather than a silent 1F1B. Makespan with uniform stages when
    p divides m: ``m(F+B) + (p-1)(F+B)/v`` (F, B per full stage; a chunk costs 1/v).
    """
    if vpp is None or int(vpp) == 1:
        got = "no vpp" if vpp is None else "vpp=1 (that is plain 1F1B: use schedule 1f1b)"
        raise ScheduleError(f"interleaved-1f1b needs vpp >= 2 model chunks per rank, e.g. vpp=2 "
                            f"(--vpp 2); got {got}")
    v = int(vpp)
    if pp < 1 or m < 1 or v < 1:
        raise ScheduleError(f"interleaved-1f1b: need pp >= 1, m >= 1, vpp >= 2 (got pp={pp}, m={m}, vpp={vpp})")
    g = pp if group is None else int(group)
    if m < pp:
        raise ScheduleError(f"interleaved-1f1b: needs at least pp micro-batches (got m={m}, pp={pp}; "
                            f"valid m: {pp} or more)")
    if g not in valid_groups(pp, m):
        ok = valid_groups(pp, m)
        raise ScheduleError(
            f"interleaved-1f1b: m={m} micro-batches with pp={pp} and micro-batch group {g}: the group "
            f"must be in [pp, m] = [{pp}, {m}] and leave a remainder m % group of 0 or >= pp "
            f"(as Megatron-core requires); with group={pp} valid m are multiples of {pp} "
            f"({pp}, {2 * pp}, {3 * pp}, ...); for m={m} valid groups are {ok[:8]}"
            + (" ..." if len(ok) > 8 else ""))
    table = _schedule_table(m, v, g)
    total = m * v
    rows = []
    for r in range(pp):
        warm = min(2 * (pp - r - 1) + (v - 1) * g, total)

        def fwd(k: int) -> Action:
            mb, c = table[k]
            return Action(c * pp + r, "F", mb)

        def bwd(k: int) -> Action:
            mb, c = table[k]
            return Action((v - 1 - c) * pp + r, "B", mb)

        row = [fwd(k) for k in range(warm)]
        for k in range(total - warm):
            row += [fwd(warm + k), bwd(k)]
        row += [bwd(k) for k in range(total - warm, total)]
        rows.append(tuple(row))
    return Schedule("interleaved-1f1b", pp, m, tuple(s % pp for s in range(pp * v)), tuple(rows),
                    meta={"pp": pp, "m": m, "vpp": v, "group": g})


def _bubble(p: int, m: int, c: Costs, v: int) -> float:
    """``(p - 1)(F + B)/v``: 1F1B's bubble divided by the v chunks per rank (Narayanan et al.
    2021, section 2.2.2). Exact in :func:`~simtrain.schedules.replay.replay` when p divides m."""
    return fill_drain_bubble(p, m, c, v) / v


def _in_flight(p: int, stage: int, m: int, v: int) -> float:
    """``p - stage + (p - 1)/v`` (Korthikanti et al. 2022, section 4.2.3: the first stage stores
    ``1 + (p - 1)/(p v)`` times 1F1B's, decreasing by one per stage)."""
    return min(p - stage + (p - 1) / v, m)


def _covers(p: int, m: int, v: int) -> bool:
    """The generator's own range (v >= 2) where p divides m."""
    return v >= 2 and m % p == 0


INTERLEAVED_1F1B = ScheduleRecord(
    "interleaved-1f1b", interleaved_1f1b,
    "Looped 1F1B over vpp model chunks per rank (Megatron-LM; Narayanan et al. 2021)",
    params=(Param("vpp", "none (required)", "integer >= 2",
                  "model chunks per rank (1 would be plain 1F1B: use 1f1b)"),
            Param("group", "pp", "pp <= group <= m, m % group 0 or >= pp",
                  "Megatron-core's micro-batch group size")),
    closed_form=ClosedForm(_bubble, _in_flight, _covers, "vpp >= 2 and pp divides m (Megatron-LM)"))

#: This module's schedules, read by :mod:`simtrain.schedules.registry`.
RECORDS = (INTERLEAVED_1F1B,)
