"""A small fixed-cost list-scheduling executor for pipeline schedules (no simpy).

:func:`replay` runs a :class:`~simtrain.schedules.ir.Schedule` with fixed per-stage costs: every
rank executes its actions strictly in the given order; an action starts as soon as its rank is
free and its dependencies have finished:

* ``F(s, mb)``: the forward of the previous stage of ``mb``'s chain (none for the chain's first);
* ``I(s, mb)`` / ``B(s, mb)``: this stage's own ``F(s, mb)`` and the input gradient of the next
  stage of the chain (its ``I`` or ``B``; none for the chain's last stage);
* ``W(s, mb)``: this stage's ``I(s, mb)``;
* an overlapped pair ``FB`` (``0F3&5B1``): the dependencies of both halves.

``comm`` (a fixed point-to-point latency) is added to a dependency that crosses ranks. A stage or
micro-batch out of range is an error, as is an order under which no rank can go on
(:class:`DeadlockError`). :func:`makespan` walks the same rules without keeping the timings.

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from simtrain.errors import ScheduleError
from simtrain.schedules.ir import Action, Schedule

Costs = tuple[tuple[float, float, float], ...]  # per stage (F, I, W)
#: Costs as given: (F, I, W), each a number or one value per stage, or a mapping with those keys.
CostsLike = Mapping[str, float | Sequence[float]] | Sequence[float | Sequence[float]]


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


#: What a dependency waits for, by block of ``stages x micro-batches`` codes (:class:`_Walk`): a
#: forward done, an input gradient done (I, B or the B half of FB), a weight gradient done (W or B).
_BLOCKS = ("F", "G", "W")


class _Walk:
    """The replay's rules over one schedule (module docstring), each dependency named by an int:
    ``block * stages * micro-batches + stage * micro-batches + mb`` (:data:`_BLOCKS`), its end
    and the rank that produced it kept in lists. :func:`replay` keeps every start and end,
    :func:`makespan` only the ranks' last ends."""

    def __init__(self, schedule: Schedule, costs: CostsLike, comm: float) -> None:
        self.schedule, self.comm = schedule, comm
        self.S, self.M = schedule.num_stages, schedule.num_microbatches  # noqa: N806
        self.c = normalize_costs(costs, self.S)
        self.neighbours = [schedule.stage_neighbours(s) for s in range(self.S)]

    def codes(self, a: Action) -> tuple[tuple[int, ...], tuple[int, ...], float]:
        """A plain action's (dependencies, what it produces, duration)."""
        kind, s, mb = a.kind, a.stage, a.mb
        S, M = self.S, self.M  # noqa: N806
        if not 0 <= s < S:
            raise ScheduleError(f"schedule {self.schedule.name}: stage {s} out of range 0..{S - 1}")
        if not 0 <= mb < M:
            raise ScheduleError(f"schedule {self.schedule.name}: micro-batch {mb} out of range 0..{M - 1}")
        prev, nxt = self.neighbours[s]
        at, size, c = s * M + mb, S * M, self.c[s]
        if kind == "F":
            return ((prev * M + mb,) if prev is not None else ()), (at,), c[0]
        if kind == "W":
            return (size + at,), (2 * size + at,), c[2]
        if kind not in ("I", "B"):
            raise ScheduleError(f"action {a}: unknown kind {a.kind!r}")
        deps = (at, size + nxt * M + mb) if nxt is not None else (at,)
        if kind == "I":
            return deps, (size + at,), c[1]
        return deps, (size + at, 2 * size + at), c[1] + c[2]

    def run(self, keep: bool) -> tuple[list[float], list[list[float]], list[list[float]]]:
        """Every rank's last end and, with ``keep``, every action's start and end, per rank; a
        :class:`DeadlockError` naming every blocked action where no rank can go on."""
        actions, comm, size = self.schedule.actions, self.comm, self.S * self.M
        ends: list[float | None] = [None] * (3 * size)
        src = [0] * (3 * size)  # the rank each end was produced on
        waiting: dict[int, list[int]] = {}
        blocked_on: dict[int, int] = {}
        ptr = [0] * len(actions)
        free = [0.0] * len(actions)
        starts: list[list[float]] = [[] for _ in actions]
        finishes: list[list[float]] = [[] for _ in actions]
        stack = list(range(len(actions) - 1, -1, -1))
        while stack:
            r = stack.pop()
            row, i = actions[r], ptr[r]
            while i < len(row):
                a = row[i]
                durations: tuple[float, ...]
                if a.kind == "FB":  # an overlapped pair: its forward half, then its backward half
                    (dep_f, out_f, t_f), (dep_b, out_b, t_b) = (self.codes(h) for h in a.halves())
                    deps, out, durations = dep_f + dep_b, out_f + out_b, (t_f, t_b)
                else:
                    deps, out, duration = self.codes(a)
                    durations = (duration,)
                ready = free[r]
                missing = None
                for k in deps:
                    t = ends[k]
                    if t is None:
                        missing = k
                        break
                    ready = max(ready, t + (comm if src[k] != r else 0.0))
                if missing is not None:
                    blocked_on[r] = missing
                    waiting.setdefault(missing, []).append(r)
                    break
                blocked_on.pop(r, None)
                end = ready
                for duration in durations:
                    end += duration
                if keep:
                    starts[r].append(ready)
                    finishes[r].append(end)
                free[r] = end
                i += 1
                for k in out:
                    ends[k] = end
                    src[k] = r
                    if k in waiting:
                        stack.extend(waiting.pop(k))
            ptr[r] = i
        if any(ptr[r] < len(actions[r]) for r in range(len(actions))):
            self._deadlock(ptr, blocked_on)
        return free, starts, finishes

    def _deadlock(self, ptr: list[int], blocked_on: dict[int, int]) -> None:
        s = self.schedule
        blocked = {}
        lines = []
        for r in range(len(s.actions)):
            if ptr[r] < len(s.actions[r]):
                a = s.actions[r][ptr[r]]
                why = self._describe(blocked_on[r]) if r in blocked_on else "?"
                blocked[r] = (ptr[r], a, why)
                lines.append(f"rank {r}, cell {ptr[r]}: {a} waits for {why}")
        raise DeadlockError(f"schedule {s.name} deadlocks: no action can start; blocked: "
                            + "; ".join(lines), blocked)

    def _describe(self, code: int) -> str:
        block, rest = divmod(code, self.S * self.M)
        st, mb = divmod(rest, self.M)
        return {"F": f"the forward {st}F{mb}", "G": f"the input gradient of {st}I{mb}/{st}B{mb}",
                "W": f"{st}W{mb}"}[_BLOCKS[block]]


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
    when no action can start while some remain, and a :class:`ScheduleError` for a stage or
    micro-batch out of range.
    """
    _, starts, ends = _Walk(schedule, costs, comm).run(keep=True)
    nranks = len(schedule.actions)
    span = max((e[-1] for e in ends if e), default=0.0)
    busy = tuple(sum(e - s for s, e in zip(starts[r], ends[r])) for r in range(nranks))
    peaks, raw = inflight_profile(schedule)
    return Replay(schedule, tuple(map(tuple, starts)), tuple(map(tuple, ends)), span, busy,
                  tuple(span - b for b in busy), peaks, raw)


def makespan(schedule: Schedule, costs: CostsLike, comm: float = 0.0) -> float:
    """``replay(schedule, costs, comm).makespan`` (the same walk, the same errors) without keeping
    any action's start or end: zb-auto compares many orders by this number alone."""
    free, _, _ = _Walk(schedule, costs, comm).run(keep=False)
    return max((free[r] for r, row in enumerate(schedule.actions) if row), default=0.0)
