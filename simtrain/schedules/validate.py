"""Schedule validation and the published closed-form makespans.

:func:`validate` checks a :class:`~simtrain.schedules.ir.Schedule` and raises
:class:`ScheduleCheckError` (a :class:`~simtrain.errors.ScheduleError`) whose first line names the
rank and the cell (0-based index in the rank's action list) and whose following lines print the
rank-by-step grid with the offending cell bracketed, e.g. ``[1W3]``.
"""

from __future__ import annotations

from simtrain.errors import ScheduleError
from simtrain.schedules.ir import KINDS, Action, Schedule
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
            if a.kind not in KINDS:
                raise _fail(s, r, i, f"unknown action kind {a.kind!r} (valid: {', '.join(KINDS)})")
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


# ---- closed forms ----------------------------------------------------------------------------

def closed_form_makespan(name: str, pp: int, m: int, F: float, I: float, W: float,  # noqa: E741,N803
                         vpp: int = 1) -> float | None:
    """The published makespan of one step with uniform stages and free communication.

    ``F``, ``I``, ``W`` are per plain stage (1/pp of the layers); ``B = I + W``. None where no
    formula is published or it does not apply to (pp, m).

    * ``gpipe``, ``1f1b``: ``(m + p - 1)(F + B)`` (GPipe, Huang et al. 2019; Narayanan et al.
      2021). :func:`replay` of our generators gives exactly this for any costs.
    * ``interleaved-1f1b``: ``m(F + B) + (p - 1)(F + B)/v`` when p divides m (Narayanan et al.
      2021, section 2.2.2: the bubble divided by v); None otherwise. Exact in :func:`replay`.
    * ``zb-h1``: ``m(F + I + W) + (p - 1)(F + I - W)`` for ``m >= p`` (Qi et al. 2024, table 2:
      bubble (p-1)(T_F + T_B - T_W), their T_B being our I). The replay matches it when
      ``W <= min(F, I)``; with a larger W the handcrafted W lag (r on rank r) no longer hides
      the W and the replay is longer.
    * ``zb-h2``: the paper's bubble is ``(p - 1)(F + I - 2W)``, zero when F = I = W, counted per
      worker in steady state, where the optimizer post-validation lets the next step start while
      this one drains. One step from t = 0 cannot hide the last rank's ``(p - 1)F`` start-up,
      so we return ``m(F + I + W) + (p - 1) max(F, F + I - 2W)`` for ``m >= 2p - 1``: with
      F = I = W that equals ZB-H1's makespan (3mF + (p-1)F). The replay matches it except
      when I is much larger than F (then it is longer).
    * ``zb-v``: zero bubble when F = I = W (Qi et al., "Pipeline Parallelism with Controllable
      Memory"; zero-bubble repo README), again per worker in steady state; for one step the
      start-up is ``p - 1`` chunk forwards of ``F/2``: ``m(F + I + W) + (p - 1)F/2``, returned
      only when F = I = W and ``m >= 2p - 1`` (no published formula otherwise). Exact then.
    * ``dualpipe``: DualPipe README: bubble ``(PP/2 - 1)(F&B + B - 3W)`` in chunk costs (a
      chunk is a full stage here) on top of ``m(F + B)`` per rank. ``F&B`` is the overlapped
      pair: we use ``F + B`` (no overlap, as :func:`replay` does), so the real schedule's gain
      from overlapping communication is not in this number. Needs p even, m even, m >= 2p. The
      replay matches it when F = I and W <= F; it is shorter when I > F and longer when
      I < F or W > F.
    * ``dualpipev``: the same formula with PP = 2p stages of half-size chunks:
      ``m(F + B) + (p - 1)(F&B + B - 3W)/2`` (F&B = F + B again). Needs m >= 2p; same
      agreement as DualPipe.
    """
    p, v = pp, vpp
    B = I + W  # noqa: N806
    if m < 1 or p < 1:
        return None
    if name in ("gpipe", "1f1b"):
        return (m + p - 1) * (F + B)
    if name == "interleaved-1f1b":
        if v == 1:
            return (m + p - 1) * (F + B)
        if m % p:
            return None
        return m * (F + B) + (p - 1) * (F + B) / v
    if name == "zb-h1":
        if m < p:
            return None
        return m * (F + B) + (p - 1) * (F + I - W)
    if name == "zb-h2":
        if m < 2 * p - 1:
            return None
        return m * (F + B) + (p - 1) * max(F, F + I - 2 * W)
    if name == "zb-v":
        if not (F == I == W) or m < 2 * p - 1:
            return None
        return m * (F + B) + (p - 1) * F / 2
    if name == "dualpipe":
        if p % 2 or m % 2 or m < 2 * p:
            return None
        return m * (F + B) + (p // 2 - 1) * ((F + B) + B - 3 * W)
    if name == "dualpipev":
        if m < 2 * p:
            return None
        return m * (F + B) + (p - 1) * ((F + B) + B - 3 * W) / 2
    return None
