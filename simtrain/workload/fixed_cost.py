"""A pipeline schedule alone with fixed costs per action (``simtrain schedule``), as a timeline.

:func:`run_schedule` runs the schedule in the fixed-cost executor
(:func:`~simtrain.schedules.replay.replay`: F, I, W per plain stage, B = I + W, an overlapped F&B
pair its two halves back to back, ``comm`` added to each dependency that crosses ranks) and turns
the result into a :class:`~simtrain.engine.timeline.Timeline` for the Gantt chart and the memory
profile: one compute span per action (per half of an overlapped pair), and for each transfer to
another rank a ``pp_send`` span on the producer and a ``pp_recv`` span on the consumer, from the
end of the producing action for ``comm``. Every forward allocates one unit of activation memory
(a micro-batch's activations for one plain stage, scaled by the chunk size for interleaved and
V-shaped schedules) when it starts; its B or W frees it when it ends. Idle time and peak
in-flight micro-batches are measured on that timeline, as for a simulated step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simtrain.results.metrics import memory_peaks, rank_breakdown
from simtrain.schedules import REGISTRY, Replay, Schedule, replay, scaled_costs, validate
from simtrain.schedules.replay import stage_weight
from simtrain.engine.timeline import Timeline, TimelineBuilder
from simtrain.workload.program import KIND, STREAM


@dataclass(frozen=True)
class ScheduleRun:
    """The outcome of :func:`run_schedule`; per-rank lists are indexed by pipeline rank."""

    schedule: Schedule
    timeline: Timeline
    makespan: float
    idle_per_rank: list[float]
    bubble_ratio: float  # idle over ranks x makespan
    peak_inflight: list[float]  # per rank, in micro-batches of one plain stage
    closed_form: float | None


def schedule_timeline(run: Replay, forward: float, comm: float) -> Timeline:
    """The spans of a replayed schedule (see the module docstring); ``forward`` is the cost of a
    stage's forward, where the first half of an overlapped pair ends."""
    schedule = run.schedule
    unit = stage_weight(schedule)
    tl = TimelineBuilder()
    names = {k: tl.name_id(k) for k in ("F", "I", "W", "B", "send", "recv")}
    arrow = 0  # send -> recv arrows of the trace
    for r, row in enumerate(schedule.actions):
        for a, start, end in zip(row, run.start[r], run.end[r]):
            halves = a.halves()
            split = start + forward if len(halves) == 2 else end
            for h, t0, t1 in zip(halves, (start, split), (split, end)):
                tl.add(r, STREAM["compute"], KIND[h.kind], names[h.kind], h.stage, -1, h.mb, t0, t1,
                       alloc_bytes=unit if h.kind == "F" else 0.0,
                       free_bytes=unit if h.kind in ("B", "W") else 0.0)
                prev, nxt = schedule.stage_neighbours(h.stage)
                to = nxt if h.kind == "F" else prev if h.kind in ("I", "B") else None
                peer = r if to is None else schedule.stage_to_rank[to]
                if to is not None and peer != r:  # (peer is r where to is None)
                    tl.add(r, STREAM["pp_send"], KIND["pp"], names["send"], h.stage, -1, h.mb, end,
                           end + comm, arrow=arrow)
                    tl.add(peer, STREAM["pp_recv"], KIND["pp"], names["recv"], to, -1, h.mb, end,
                           end + comm, arrow=arrow)
                    arrow += 1
    return tl.build()


def run_schedule(schedule: Schedule, F: float = 1.0, I: float = 1.0, W: float = 1.0,  # noqa: E741,N803
                 comm: float = 0.0) -> ScheduleRun:
    """Validate ``schedule``, replay it with fixed costs (F, I, W per plain stage, ``comm`` per
    transfer between ranks) and compare it to its record's closed form (with ``comm = 0``, at the
    schedule's own model chunks per rank)."""
    validate(schedule)
    costs = scaled_costs(schedule, F, I, W)
    run = replay(schedule, costs, comm)
    tl = schedule_timeline(run, costs[0], comm)
    ranks = range(schedule.num_ranks)
    idle = [run.makespan - rank_breakdown(tl, r, run.makespan)["compute"] for r in ranks]
    ratio = sum(idle) / (len(idle) * run.makespan) if run.makespan > 0 else 0.0
    peaks = memory_peaks(tl, dict.fromkeys(ranks, 0.0))
    closed = REGISTRY.makespan(schedule.name, schedule.num_ranks, schedule.num_microbatches, F, I, W,
                               vpp=schedule.meta.get("vpp", 1)) if comm == 0 else None
    return ScheduleRun(schedule, tl, run.makespan, idle, ratio, [peaks[r] for r in ranks], closed)


def schedule_report(run: ScheduleRun) -> dict[str, Any]:
    """JSON-ready summary: the object ``simtrain schedule --json`` prints."""
    s = run.schedule
    return {
        "schedule": s.name, "pp": s.num_ranks, "microbatches": s.num_microbatches,
        "stages": s.num_stages, "makespan": run.makespan, "idle_per_rank": run.idle_per_rank,
        "bubble_ratio": run.bubble_ratio, "closed_form_makespan": run.closed_form,
        "peak_inflight_microbatches": run.peak_inflight,
        "actions": {str(r): [str(a) for a in row] for r, row in enumerate(s.actions)},
    }
