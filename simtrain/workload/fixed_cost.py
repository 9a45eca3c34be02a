"""Run a pipeline schedule alone in the engine, with fixed costs per action (``simtrain schedule``).

Each action is one compute op of the given F, I, W duration (B = I + W; an overlapped F&B pair
runs its two halves back to back), each stage-to-stage transfer takes the fixed p2p latency, and
every forward holds one unit of activation memory (a micro-batch's activations for one plain
stage, scaled by the chunk size for interleaved and V-shaped schedules) until its B or W ends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simtrain import engine
from simtrain.metrics import memory_timeline
from simtrain.workload.program import KIND, STREAM, Op, Program
from simtrain.schedules import Schedule, closed_form_makespan, scaled_costs, validate
from simtrain.timeline import Timeline


class FixedLatency:
    """Network model of a schedule study: every p2p transfer takes ``latency_s``."""

    def __init__(self, latency_s: float):
        self.latency_s = latency_s

    def collective_time(self, op: str, gpus: tuple[int, ...], nbytes: float) -> float:
        return 0.0

    def p2p_time(self, src: int, dst: int, nbytes: float) -> float:
        return self.latency_s


@dataclass(frozen=True)
class ScheduleRun:
    schedule: Schedule
    timeline: Timeline
    makespan: float
    idle_per_rank: list[float]
    bubble_ratio: float  # idle over ranks x makespan
    peak_inflight: list[float]  # per rank, in micro-batches of one plain stage
    closed_form: float | None


def lower_fixed(schedule: Schedule, F: float, I: float, W: float) -> Program:  # noqa: E741,N803
    """One op per action with fixed costs (per plain stage, scaled to the schedule's chunks)."""
    prog = Program()
    f, i, w = scaled_costs(schedule, F, I, W)
    unit = schedule.num_ranks / schedule.chain_length  # activation of one chunk, in stage units
    pair = prog.group_set_id(((0, 0),))
    sends: dict[tuple[str, int, int], int] = {}  # (what, to_stage, mb) -> p2p op id
    needs: list[tuple[int, tuple]] = []

    def send(rank: int, a, after: int, what: str, to_stage: int) -> None:
        """The transfer of ``what`` (act or grad) of ``a``'s micro-batch to ``to_stage``."""
        op = prog.add(Op(0, rank, STREAM["pp_send"], KIND["pp"], "send", a.stage, -1, a.mb, comm="p2p",
                         group_set=pair, peer=schedule.stage_to_rank[to_stage], peer_stage=to_stage,
                         deps=[after]))
        sends[(what, to_stage, a.mb)] = op.id

    for r in range(schedule.num_ranks):
        prog.rank_weight[r] = 1
        prog.rank_stage[r] = r
        prog.static_bytes[r] = 0.0
    for r, row in enumerate(schedule.actions):
        for action in row:
            pair_first = None  # an overlapped F&B pair starts when both halves' inputs are there
            for a in action.halves():
                prev, nxt = schedule.stage_neighbours(a.stage)
                dur = {"F": f, "I": i, "W": w, "B": i + w}[a.kind]
                alloc = unit if a.kind == "F" else 0.0
                free = unit if a.kind == "W" or a.kind == "B" else 0.0
                op = prog.add(Op(0, r, STREAM["compute"], KIND[a.kind], a.kind, a.stage, -1, a.mb,
                                 duration_s=dur, alloc=alloc, free=free))
                if action.kind == "FB" and pair_first is None:
                    pair_first = op.id
                elif action.kind == "FB" and nxt is not None:
                    needs.append((pair_first, ("grad", a.stage, a.mb)))
                if a.kind == "F":
                    if prev is not None:
                        needs.append((op.id, ("act", a.stage, a.mb)))
                    if nxt is not None:
                        send(r, a, op.id, "act", nxt)
                elif a.kind in ("B", "I"):
                    if nxt is not None:
                        needs.append((op.id, ("grad", a.stage, a.mb)))
                    if prev is not None:
                        send(r, a, op.id, "grad", prev)
    for op_id, key in needs:
        prog.ops[op_id].deps.append(sends[key])
    return prog


def run_schedule(schedule: Schedule, F: float = 1.0, I: float = 1.0, W: float = 1.0,  # noqa: E741,N803
                 comm: float = 0.0, vpp: int = 1) -> ScheduleRun:
    """Validate ``schedule`` and run it in the engine with fixed costs; compare to the closed form."""
    validate(schedule)
    prog = lower_fixed(schedule, F, I, W)
    tl = engine.run(prog, FixedLatency(comm)).timeline
    makespan = tl.end_s
    compute = tl.mask(stream="compute")
    busy = [float(np.sum((tl["end_s"] - tl["start_s"])[compute & (tl["rank"] == r)]))
            for r in range(schedule.num_ranks)]
    idle = [makespan - b for b in busy]
    peaks = [float(level.max()) for _, (_, level) in sorted(memory_timeline(tl, prog.static_bytes).items())]
    closed = closed_form_makespan(schedule.name, schedule.num_ranks, schedule.num_microbatches, F, I, W,
                                  vpp=vpp) if comm == 0 else None
    ratio = sum(idle) / (len(idle) * makespan) if makespan > 0 else 0.0
    return ScheduleRun(schedule, tl, makespan, idle, ratio, peaks, closed)


def schedule_report(run: ScheduleRun) -> dict:
    """JSON-ready summary (keys documented in the README)."""
    s = run.schedule
    return {
        "schedule": s.name, "pp": s.num_ranks, "microbatches": s.num_microbatches,
        "stages": s.num_stages, "makespan": run.makespan, "idle_per_rank": run.idle_per_rank,
        "bubble_ratio": run.bubble_ratio, "closed_form_makespan": run.closed_form,
        "peak_inflight_microbatches": run.peak_inflight,
        "actions": {str(r): [str(a) for a in row] for r, row in enumerate(s.actions)},
    }
