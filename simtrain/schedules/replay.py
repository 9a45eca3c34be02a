"""A small fixed-cost list-scheduling executor for pipeline schedules (no simpy).

:func:`replay` runs a :class:`~simtrain.schedules.ir.Schedule` with fixed per-stage costs: every
rank executes its actions strictly in the given order; an action starts as soon as its rank is
free and its dependencies have finished:

* ``F(s, mb)``: the forward of the previous stage of ``mb``'s chain (none for the chain's first);
* ``I(s, mb)`` / ``B(s, mb)``: this stage's own ``F(s, mb)`` and the input gradient of the next
  stage of the chain (its ``I`` or ``B``; none for the chain's last stage);
* ``W(s, mb)``: this stage's ``I(s, mb)``;
* an overlapped pair ``FB`` (``0F3&5B1``): the dependencies of both halves.

``comm`` (a fixed point-to-point latency) is added to a dependency that crosses ranks.

Durations: ``F`` costs F, ``I`` costs I, ``W`` costs W, a full ``B`` costs ``I + W``, and an
overlapped pair ``FB`` costs ``F + B`` of its two stages (the *sum*, not the max). DualPipe's gain
comes from hiding the all-to-all / p2p communication of one half behind the computation of the
other; this executor has no communication streams, so an overlapped pair is simply both halves
back to back. Its makespans for DualPipe/DualPipeV are therefore the schedule's *ordering*
quality alone, without the overlap benefit.

Memory: :attr:`Replay.peak_inflight` counts, per rank over all its stages, the activations held:
an ``F`` (or the forward half of ``FB``) adds the stage's activation, the ``B`` or ``W`` that
completes that (stage, mb)'s backward removes it (``I`` frees nothing). The unit is *one
micro-batch's activation of 1/pp of the model's layers*, i.e. of one stage of a plain
(non-interleaved, one-copy) pipeline over the same ranks: a stage of a schedule whose chains have
``L`` stages holds ``pp / L`` of that (1/v for interleaving with v chunks, 1/2 for the V-shaped
schedules, 1 for DualPipe, whose chains have ``pp`` stages). :attr:`Replay.peak_inflight_chunks`
is the same count in raw (stage, micro-batch) activations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from simtrain.errors import ScheduleError
from simtrain.schedules.ir import Action, Schedule

Costs = tuple[tuple[float, float, float], ...]  # per stage (F, I, W)
#: Costs as given: (F, I, W), each a number or one value per stage, or a mapping with those keys.
CostsLike = Mapping[str, float | Sequence[float]] | Sequence[float | Sequence[float]]
#: A stage's (previous, next) stage along its chain, None at the ends.
Neighbours = Callable[[int], tuple[int | None, int | None]]


class DeadlockError(ScheduleError):
    """A schedule cannot finish: no rank can start its next action.

    ``blocked`` maps each rank that still has actions to ``(cell index, action, what it waits
    for)``.
    """

    def __init__(self, message: str, blocked: dict[int, tuple[int, Action, str]]):
        super().__init__(message)
        self.blocked = blocked


@dataclass(frozen=True)
class Replay:
    """The outcome of :func:`replay`. Per-rank tuples are indexed like ``schedule.actions``."""

    schedule: Schedule
    start: tuple[tuple[float, ...], ...]  # per rank, per action: start time
    end: tuple[tuple[float, ...], ...]  # per rank, per action: end time
    makespan: float
    busy: tuple[float, ...]  # per rank: total compute time
    idle: tuple[float, ...]  # per rank: makespan - busy
    peak_inflight: tuple[float, ...]  # per rank, in units of 1/pp of the model (see module doc)
    peak_inflight_chunks: tuple[int, ...]  # per rank, raw (stage, mb) activations held

    def timing(self, rank: int, index: int) -> tuple[Action, float, float]:
        """(action, start, end) of the ``index``-th action of ``rank``."""
        return self.schedule.actions[rank][index], self.start[rank][index], self.end[rank][index]

    @property
    def bubble_fraction(self) -> float:
        """Idle time over all ranks divided by ranks x makespan."""
        if self.makespan <= 0:
            return 0.0
        return sum(self.idle) / (len(self.idle) * self.makespan)


def normalize_costs(costs: CostsLike, num_stages: int) -> Costs:
    """Per-stage ``(F, I, W)`` from ``(F, I, W)`` (each a number or a per-stage sequence) or a
    mapping with keys ``"F"``, ``"I"``, ``"W"``."""
    if isinstance(costs, Mapping):
        try:
            costs = (costs["F"], costs["I"], costs["W"])
        except KeyError as e:
            raise ScheduleError(f"costs mapping needs keys 'F', 'I', 'W' (missing {e})") from None
    if not isinstance(costs, Sequence) or isinstance(costs, str) or len(costs) != 3:
        raise ScheduleError(f"costs must be (F, I, W), each a number or one value per stage; got {costs!r}")
    cols = []
    for name, c in zip("FIW", costs):
        if isinstance(c, (int, float)):
            col = [float(c)] * num_stages
        else:
            col = [float(x) for x in c]
            if len(col) != num_stages:
                raise ScheduleError(f"costs {name}: {len(col)} values for {num_stages} stages")
        if any(x < 0 for x in col):
            raise ScheduleError(f"costs {name}: negative duration in {col}")
        cols.append(col)
    return tuple(zip(*cols))


def scaled_costs(schedule: Schedule, F: float, I: float, W: float) -> tuple[float, float, float]:  # noqa: E741
    """Per-stage costs for ``schedule`` when F, I, W are the costs of 1/pp of the model's layers
    (one stage of a plain pipeline over the same ranks): a stage of a chain with ``L`` stages
    costs ``pp / L`` of that (chunk costs are 1/v of a stage with v-way interleaving, 1/2 for
    the V-shaped schedules)."""
    frac = stage_weight(schedule)
    return (F * frac, I * frac, W * frac)


def stage_weight(schedule: Schedule) -> float:
    """The share of a plain stage (1/pp of the layers) that one stage of ``schedule`` holds:
    ``pp / L`` for chains of ``L`` stages."""
    return schedule.num_ranks / schedule.chain_length


#: A dependency key: ("F", s, mb) forward done; ("G", s, mb) input gradient done (I, B or the B
#: half of FB); ("W", s, mb) weight gradient done (W or B).
_Key = tuple[str, int, int]


def _half(a: Action, nbrs: Neighbours, c: Costs) -> tuple[tuple[_Key, ...], tuple[_Key, ...], float]:
    """A plain action's (dependencies, what it produces, duration); an overlapped pair is its two
    halves' (:func:`replay`)."""
    kind, s, mb = a.kind, a.stage, a.mb
    prev, nxt = nbrs(s)  # (raises for a stage out of range, before its costs are read)
    if kind == "F":
        return ((("F", prev, mb),) if prev is not None else ()), (("F", s, mb),), c[s][0]
    if kind == "W":
        return (("G", s, mb),), (("W", s, mb),), c[s][2]
    if kind not in ("I", "B"):
        raise ScheduleError(f"action {a}: unknown kind {a.kind!r}")
    deps = (("F", s, mb), ("G", nxt, mb)) if nxt is not None else (("F", s, mb),)
    if kind == "I":
        return deps, (("G", s, mb),), c[s][1]
    return deps, (("G", s, mb), ("W", s, mb)), c[s][1] + c[s][2]


def _describe_key(key: _Key) -> str:
    what, s, mb = key
    return {"F": f"the forward {s}F{mb}", "G": f"the input gradient of {s}I{mb}/{s}B{mb}",
            "W": f"{s}W{mb}"}[what]


def inflight_profile(schedule: Schedule) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """Peak in-flight activations per rank (weighted, raw); see the module docstring."""
    weight = stage_weight(schedule)
    peaks, raw_peaks = [], []
    for row in schedule.actions:
        held = peak = 0
        for a in row:
            for h in a.halves():
                if h.kind == "F":
                    held += 1
                    peak = max(peak, held)
                elif h.kind in ("B", "W"):
                    held -= 1
        peaks.append(peak * weight)
        raw_peaks.append(peak)
    return tuple(peaks), tuple(raw_peaks)


def replay(schedule: Schedule, costs: CostsLike, comm: float = 0.0) -> Replay:
    """Run ``schedule`` with fixed costs; see the module docstring for the rules.

    ``costs`` is ``(F, I, W)``, each a number (every stage) or one value per stage (indexed by
    schedule stage; see :func:`scaled_costs` for chunked schedules). Raises
    :class:`DeadlockError` (a :class:`ScheduleError`) naming the blocked action of every rank
    when no action can start while some remain.
    """
    c = normalize_costs(costs, schedule.num_stages)
    nranks = len(schedule.actions)
    nbr_cache: dict[int, tuple[int | None, int | None]] = {}

    def nbrs(stage: int) -> tuple[int | None, int | None]:
        if stage not in nbr_cache:
            if not 0 <= stage < schedule.num_stages:
                raise ScheduleError(f"schedule {schedule.name}: stage {stage} out of range "
                                    f"0..{schedule.num_stages - 1}")
            nbr_cache[stage] = schedule.stage_neighbours(stage)
        return nbr_cache[stage]

    done: dict[_Key, tuple[float, int]] = {}  # key -> (end time, rank)
    waiting: dict[_Key, list[int]] = {}
    ptr = [0] * nranks
    free = [0.0] * nranks
    starts: list[list[float]] = [[] for _ in range(nranks)]
    ends: list[list[float]] = [[] for _ in range(nranks)]
    blocked_on: dict[int, _Key] = {}
    stack = list(range(nranks - 1, -1, -1))
    while stack:
        r = stack.pop()
        row = schedule.actions[r]
        while ptr[r] < len(row):
            a = row[ptr[r]]
            ready = free[r]
            missing = None
            durations: tuple[float, ...]
            if a.kind == "FB":  # an overlapped pair: its forward half, then its backward half
                fwd, bwd = (_half(h, nbrs, c) for h in a.halves())
                deps, produced, durations = fwd[0] + bwd[0], fwd[1] + bwd[1], (fwd[2], bwd[2])
            else:
                deps, produced, duration = _half(a, nbrs, c)
                durations = (duration,)
            for key in deps:
                got = done.get(key)
                if got is None:
                    missing = key
                    break
                t, src = got
                ready = max(ready, t + (comm if src != r else 0.0))
            if missing is not None:
                blocked_on[r] = missing
                waiting.setdefault(missing, []).append(r)
                break
            blocked_on.pop(r, None)
            end = ready
            for duration in durations:
                end += duration
            starts[r].append(ready)
            ends[r].append(end)
            free[r] = end
            ptr[r] += 1
            for key in produced:
                done[key] = (end, r)
                if key in waiting:
                    stack.extend(waiting.pop(key))
    if any(ptr[r] < len(schedule.actions[r]) for r in range(nranks)):
        blocked = {}
        lines = []
        for r in range(nranks):
            if ptr[r] < len(schedule.actions[r]):
                a = schedule.actions[r][ptr[r]]
                why = _describe_key(blocked_on[r]) if r in blocked_on else "?"
                blocked[r] = (ptr[r], a, why)
                lines.append(f"rank {r}, cell {ptr[r]}: {a} waits for {why}")
        raise DeadlockError(f"schedule {schedule.name} deadlocks: no action can start; blocked: "
                            + "; ".join(lines), blocked)
    makespan = max((e[-1] for e in ends if e), default=0.0)
    busy = tuple(sum(e - s for s, e in zip(starts[r], ends[r])) for r in range(nranks))
    peaks, raw = inflight_profile(schedule)
    return Replay(schedule, tuple(map(tuple, starts)), tuple(map(tuple, ends)), makespan, busy,
                  tuple(makespan - b for b in busy), peaks, raw)


def makespan(schedule: Schedule, costs: CostsLike, comm: float = 0.0) -> float:
    """``replay(schedule, costs, comm).makespan``, without keeping any action's start or end: the
    same rules and the same floating-point operations in the same order (each action starts at
    the latest of its rank's previous end and its dependencies' ends, ``comm`` added for one on
    another rank, and ends its duration later), with the dependencies' ends kept in a list by
    (kind, stage, micro-batch) instead of a dictionary of keys. A schedule with overlapped pairs,
    a stage or micro-batch out of range, or a deadlock is handed to :func:`replay`, which says
    what is wrong. zb-auto compares many orders by this number alone."""
    S, M = schedule.num_stages, schedule.num_microbatches  # noqa: N806
    c = normalize_costs(costs, S)
    prev: list[int | None] = []
    nxt: list[int | None] = []
    for s in range(S):
        p, q = schedule.stage_neighbours(s)
        prev.append(p)
        nxt.append(q)
    size = S * M
    ends: list[float | None] = [None] * (3 * size)  # by F, G, W blocks of (stage, micro-batch)
    src = [0] * (3 * size)  # the rank each end was produced on
    waiting: dict[int, list[int]] = {}
    actions = schedule.actions
    ptr = [0] * len(actions)
    free = [0.0] * len(actions)
    stack = list(range(len(actions) - 1, -1, -1))
    while stack:
        r = stack.pop()
        row, i = actions[r], ptr[r]
        while i < len(row):
            a = row[i]
            kind, s, mb = a.kind, a.stage, a.mb
            if not (0 <= s < S and 0 <= mb < M):
                return replay(schedule, costs, comm).makespan
            at = s * M + mb
            if kind == "F":
                p = prev[s]
                deps: tuple[int, ...] = (p * M + mb,) if p is not None else ()
                out: tuple[int, ...] = (at,)
                duration = c[s][0]
            elif kind == "W":
                deps, out, duration = (size + at,), (2 * size + at,), c[s][2]
            elif kind == "I" or kind == "B":
                q = nxt[s]
                deps = (at, size + q * M + mb) if q is not None else (at,)
                if kind == "I":
                    out, duration = (size + at,), c[s][1]
                else:
                    out, duration = (size + at, 2 * size + at), c[s][1] + c[s][2]
            else:  # an overlapped pair (or an unknown kind): the full replay
                return replay(schedule, costs, comm).makespan
            ready = free[r]
            blocked = False
            for k in deps:
                t = ends[k]
                if t is None:
                    waiting.setdefault(k, []).append(r)
                    blocked = True
                    break
                ready = max(ready, t + (comm if src[k] != r else 0.0))
            if blocked:
                break
            end = ready + duration
            free[r] = end
            i += 1
            for k in out:
                ends[k] = end
                src[k] = r
                if k in waiting:
                    stack.extend(waiting.pop(k))
        ptr[r] = i
    if any(ptr[r] < len(actions[r]) for r in range(len(actions))):
        return replay(schedule, costs, comm).makespan  # raises the deadlock, naming every blocked action
    return max((free[r] for r in range(len(actions)) if actions[r]), default=0.0)
