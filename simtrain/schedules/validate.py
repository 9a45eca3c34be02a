"""Schedule validation.

:func:`validate` checks a :class:`~simtrain.schedules.ir.Schedule` and raises
:class:`ScheduleCheckError` (a :class:`~simtrain.errors.ScheduleError`) whose first line names the
rank and the cell (0-based index in the rank's action list) and whose following lines print the
rank-by-step grid with the offending cell bracketed, e.g. ``[1W3]``.
"""

from __future__ import annotations

from simtrain.errors import ScheduleError
from simtrain.schedules.ir import ACTION_KINDS, Action, Schedule
from simtrain.schedules.replay import DeadlockError, replay

_MAX_FULL_COLS = 40
_WINDOW = 6


class ScheduleCheckError(ScheduleError):
    """A schedule failed :func:`validate`. ``marks`` maps rank -> marked cell index (a missing
    action is marked one past the row's end); ``problem`` is the first line without the grid."""

    def __init__(self, message: str, problem: str, marks: dict[int, int], grid: str):
        super().__init__(message)
        self.problem = problem
        self.marks = marks
        self.grid = grid


def format_grid(schedule: Schedule, marks: dict[int, int] | None = None,
                extra: dict[int, str] | None = None) -> str:
    """The rank-by-step grid of ``schedule`` with the cell ``marks[rank]`` in brackets.

    ``extra[rank]`` is a text appended (bracketed when marked one past the end) for a missing
    action. Long rows show a window around their mark.
    """
    marks = marks or {}
    extra = extra or {}
    rows = [[str(a) for a in row] + ([extra[r]] if r in extra else [])
            for r, row in enumerate(schedule.actions)]
    width = max((len(c) for row in rows for c in row), default=3) + 2
    ncols = max((len(row) for row in rows), default=0)
    label_w = len(f"rank {len(rows) - 1}")
    lines = []
    for r, row in enumerate(rows):
        mark = marks.get(r)
        lo, hi = 0, len(row)
        if ncols > _MAX_FULL_COLS:
            centre = mark if mark is not None else 0
            lo, hi = max(0, centre - _WINDOW), min(len(row), centre + _WINDOW + 1)
        cells = []
        for i in range(lo, hi):
            text = f"[{row[i]}]" if i == mark else f" {row[i]} "
            cells.append(text.ljust(width))
        pre = f"...({lo}) " if lo > 0 else ""
        post = f" ...({len(row) - hi} more)" if hi < len(row) else ""
        lines.append(f"{f'rank {r}'.ljust(label_w)} | {pre}{''.join(cells).rstrip()}{post}")
    return "\n".join(lines)


def _fail(schedule: Schedule, rank: int, cell: int, problem: str, *, extra: str | None = None,
          marks: dict[int, int] | None = None) -> ScheduleCheckError:
    marks = dict(marks or {rank: cell})
    grid = format_grid(schedule, marks, {rank: extra} if extra is not None else None)
    first = f"schedule {schedule.name}: rank {rank}, cell {cell}: {problem}"
    return ScheduleCheckError(first + "\n" + grid, f"rank {rank}, cell {cell}: {problem}", marks, grid)


def _check_layout(s: Schedule) -> None:
    S = s.num_stages  # noqa: N806
    if s.num_ranks < 1 or S < 1:
        raise ScheduleError(f"schedule {s.name}: needs at least one rank and one stage "
                            f"(got {s.num_ranks} ranks, {S} stages)")
    if len(s.actions) != s.num_ranks:
        raise ScheduleError(f"schedule {s.name}: {len(s.actions)} action rows for {s.num_ranks} ranks")
    for st, r in enumerate(s.stage_to_rank):
        if not 0 <= r < s.num_ranks:
            raise ScheduleError(f"schedule {s.name}: stage_to_rank[{st}] = {r} is not a rank "
                                f"(valid 0..{s.num_ranks - 1})")
    seen: dict[int, int] = {}
    lengths = set()
    for ci, chain in enumerate(s.chain_list()):
        lengths.add(len(chain))
        for st in chain:
            if not 0 <= st < S:
                raise ScheduleError(f"schedule {s.name}: chain {ci} names stage {st}, out of range 0..{S - 1}")
            if st in seen:
                raise ScheduleError(f"schedule {s.name}: stage {st} is in chains {seen[st]} and {ci}")
            seen[st] = ci
    if len(seen) != S:
        missing = sorted(set(range(S)) - set(seen))
        raise ScheduleError(f"schedule {s.name}: stages {missing} are in no chain")
    if len(lengths) != 1:
        raise ScheduleError(f"schedule {s.name}: chains of different lengths {sorted(lengths)}")
    nchains = len(s.chain_list())
    if s.mb_chain:
        if len(s.mb_chain) != s.num_microbatches:
            raise ScheduleError(f"schedule {s.name}: mb_chain has {len(s.mb_chain)} entries for "
                                f"{s.num_microbatches} micro-batches")
        bad = [c for c in s.mb_chain if not 0 <= c < nchains]
        if bad:
            raise ScheduleError(f"schedule {s.name}: mb_chain names chain {bad[0]} (valid 0..{nchains - 1})")


def validate(schedule: Schedule) -> None:
    """Raise :class:`ScheduleCheckError` (or :class:`ScheduleError` for a broken layout) unless
    ``schedule`` is complete, consistent and deadlock-free.

    Checks: ``stage_to_rank`` and chains well formed; every action's kind known, stage in range,
    on the rank holding its stage, micro-batch in range and walking that stage; no duplicates;
    every (stage, mb) of each micro-batch's chain has exactly one F and one full backward (one B,
    or one I and one W); on its rank F comes before I/B and I before W; and a replay with unit
    costs finishes (no deadlock).
    """
    s = schedule
    _check_layout(s)
    m = s.num_microbatches
    # (stage, mb) -> {half kind: (rank, cell)}
    where: dict[tuple[int, int], dict[str, tuple[int, int]]] = {}
    for r, row in enumerate(s.actions):
        for i, a in enumerate(row):
            if a.kind not in ACTION_KINDS:
                raise _fail(s, r, i, f"unknown action kind {a.kind!r} (valid: {', '.join(ACTION_KINDS)})")
            for h in a.halves():
                if not 0 <= h.stage < s.num_stages:
                    raise _fail(s, r, i, f"{a}: stage {h.stage} out of range 0..{s.num_stages - 1}")
                if s.stage_to_rank[h.stage] != r:
                    raise _fail(s, r, i, f"{a}: stage {h.stage} is on rank {s.stage_to_rank[h.stage]}, "
                                         f"not rank {r}")
                if not 0 <= h.mb < m:
                    raise _fail(s, r, i, f"{a}: micro-batch {h.mb} out of range 0..{m - 1}")
                if h.stage not in s.chain_of_mb(h.mb):
                    raise _fail(s, r, i, f"{a}: micro-batch {h.mb} does not pass stage {h.stage} "
                                         f"(its chain is {'-'.join(map(str, s.chain_of_mb(h.mb)))})")
                got = where.setdefault((h.stage, h.mb), {})
                if h.kind in got:
                    pr, pi = got[h.kind]
                    raise _fail(s, r, i, f"duplicate action {h} (already at rank {pr}, cell {pi})")
                if h.kind == "B" and ("I" in got or "W" in got):
                    k = "I" if "I" in got else "W"
                    raise _fail(s, r, i, f"{h}: (stage {h.stage}, mb {h.mb}) already has a split "
                                         f"backward ({h.stage}{k}{h.mb} at cell {got[k][1]})")
                if h.kind in ("I", "W") and "B" in got:
                    raise _fail(s, r, i, f"{h}: (stage {h.stage}, mb {h.mb}) already has a full "
                                         f"backward ({h.stage}B{h.mb} at cell {got['B'][1]})")
                if h.kind in ("I", "B") and "F" not in got:
                    raise _fail(s, r, i, f"{h} before its forward {h.stage}F{h.mb}")
                if h.kind == "W" and "I" not in got:
                    raise _fail(s, r, i, f"{h} before its input gradient {h.stage}I{h.mb}")
                got[h.kind] = (r, i)
    for mb in range(m):
        for st in s.chain_of_mb(mb):
            got = where.get((st, mb), {})
            r = s.stage_to_rank[st]
            need = ["F"] + (["B"] if "B" in got or not ("I" in got or "W" in got) else ["I", "W"])
            for k in need:
                if k not in got:
                    a = Action(st, k, mb)
                    n = len(s.actions[r])
                    raise _fail(s, r, n, f"missing action {a}"
                                + (" (a full backward B, or I and W)" if k == "B" else ""),
                                extra=f"{a}?")
    try:
        replay(s, (1.0, 1.0, 1.0))
    except DeadlockError as e:
        marks = {r: cell for r, (cell, _, _) in e.blocked.items()}
        r0 = min(marks)
        cell, a, why = e.blocked[r0]
        others = "; ".join(f"rank {r} cell {c} {b} waits for {w}"
                           for r, (c, b, w) in sorted(e.blocked.items()) if r != r0)
        raise _fail(s, r0, cell, f"deadlock: {a} waits for {why}"
                    + (f"; also blocked: {others}" if others else ""), marks=marks) from None

