"""Pipeline schedules as CSV, in PyTorch ``torch.distributed.pipelining``'s compute-only format.

One row per rank, one action per cell: ``0F3`` (forward of stage 0, micro-batch 3), ``1I2``
(input gradient), ``1W2`` (weight gradient), ``0B5`` (full backward), and an overlapped pair
``0F3&5B1``. Empty cells are skipped (PyTorch writes its ``None`` bubbles as empty cells; empty
trailing cells are common). This is what ``PipelineScheduleMulti._dump_csv`` writes and
``_load_csv(format="compute_only")`` reads, except for the overlapped pair, which PyTorch prints as
``(0F3;5B1)OVERLAP_F_B``; we read that spelling too.

Lines starting with ``#`` are comments. Two are understood:

* ``# chains: 0-1-2-3 | 4-5-6-7``: the stage chains, for schedules with several (DualPipe: one
  chain per direction). Without it there is one chain ``0..S-1``. Each micro-batch's chain is
  the one holding the stages of its actions.
* ``# stage_to_rank: 0 1 2 3 3 2 1 0``: the rank of each stage, for a stage that appears in no
  cell. Without it, each stage is placed on the one rank whose row uses it (V-shaped and looped
  maps are inferred this way); a stage used on two ranks is an error.

:func:`schedule_to_csv` writes ``# chains:`` only when there are several chains and
``# stage_to_rank:`` only when a stage has no action, so plain schedules stay loadable by
PyTorch. Ranks, stages and cells are numbered from 0 in messages; ``line`` is the 1-based line
of the file.

Reading is bounded: a file is read once, at most :data:`MAX_CSV_BYTES`; a stage or micro-batch
number is checked against the number of cells before anything is built per stage or micro-batch
(``99999999F0`` is refused at once, without allocating a list of a hundred million stages), and a
cell echoed in a message is cut to 80 characters (:func:`simtrain.specs.strict.shown`).
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

from simtrain.errors import ScheduleError, SpecError
from simtrain.schedules.ir import Action, Schedule, parse_action
from simtrain.schedules.validate import ScheduleCheckError, validate
from simtrain.specs.strict import clip, read_text, shown

#: The largest schedule file read: 16 MiB, about 2.5 million cells (a schedule of 64 ranks and
#: 4,096 micro-batches with split backward has 786,432), whose actions take a few hundred MB.
MAX_CSV_BYTES = 16 * 2**20
#: How far a stage or micro-batch number may exceed the number of actions in the file before it
#: is refused outright (a number beyond it leaves stages or micro-batches with no action).
_INDEX_SLACK = 1024

_TORCH_PAIR = re.compile(r"^\(\s*([^;]+?)\s*;\s*([^;]+?)\s*\)\s*OVERLAP_F_B$")


def schedule_to_csv(schedule: Schedule) -> str:
    """The schedule as CSV text (see the module docstring)."""
    out = io.StringIO()
    if len(schedule.chain_list()) > 1:
        out.write("# chains: " + " | ".join("-".join(map(str, ch)) for ch in schedule.chain_list()) + "\n")
    used = {h.stage for row in schedule.actions for a in row for h in a.halves()}
    if used != set(range(schedule.num_stages)):
        out.write("# stage_to_rank: " + " ".join(map(str, schedule.stage_to_rank)) + "\n")
    w = csv.writer(out, lineterminator="\n")
    for row in schedule.actions:
        w.writerow([str(a) for a in row])
    return out.getvalue()


def _parse_cell(text: str) -> Action:
    m = _TORCH_PAIR.match(text)
    if m:
        text = f"{m.group(1)}&{m.group(2)}"
    try:
        return parse_action(text)
    except ValueError:  # a number beyond Python's int-string conversion limit
        raise ScheduleError("a stage or micro-batch number with thousands of digits") from None


def _ints(text: str, what: str, where: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(",", " ").split()]
    except ValueError:
        raise ScheduleError(f"{where}: {what} must be integers, got {shown(text.strip())}") from None


def schedule_from_csv(text: str, source: str = "<csv>", *, name: str | None = None,
                      stage_to_rank: tuple[int, ...] | list[int] | None = None,
                      num_microbatches: int | None = None) -> Schedule:
    """Parse CSV ``text`` (``source`` names it in errors), infer the layout, then :func:`validate`.

    ``stage_to_rank`` and ``num_microbatches`` override what the file says or implies (the
    number of micro-batches defaults to the largest one used + 1). ``name`` defaults to the
    source's file stem.
    """
    chains: tuple[tuple[int, ...], ...] = ()
    header_map: list[int] | None = None
    rows: list[list[tuple[int, Action]]] = []  # per rank: (csv column, action)
    row_line: list[int] = []
    lines = text.splitlines()
    data_lines: list[tuple[int, str]] = []
    for ln, raw in enumerate(lines, start=1):
        s = raw.strip()
        if s.startswith("#"):
            body = s[1:].strip()
            where = f"{source}, line {ln}"
            if body.lower().startswith("chains:"):
                parts = [p.strip() for p in body.split(":", 1)[1].split("|")]
                chains = tuple(tuple(_ints(p.replace("-", " "), "chain stages", where)) for p in parts if p)
            elif body.lower().startswith("stage_to_rank:"):
                header_map = _ints(body.split(":", 1)[1], "stage_to_rank", where)
            continue
        if not s:
            continue
        data_lines.append((ln, raw))
    for ln, raw in data_lines:
        rank = len(rows)
        cells = next(csv.reader([raw]))
        row = []
        for col, cell in enumerate(cells):
            if not cell.strip():
                continue
            try:
                row.append((col, _parse_cell(cell.strip())))
            except ScheduleError as e:
                raise ScheduleError(f"{source}: rank {rank} (line {ln}), cell {col}: bad cell "
                                    f"{shown(cell.strip())}: {clip(str(e), 160)}") from None
        rows.append(row)
        row_line.append(ln)
    if not rows:
        raise ScheduleError(f"{source}: no schedule rows (one row per rank expected)")
    nranks = len(rows)
    _check_bounds(rows, row_line, source, len(header_map or stage_to_rank or ()), num_microbatches)

    # stage -> rank
    seen: dict[int, tuple[int, int]] = {}
    for r, row in enumerate(rows):
        for col, a in row:
            for h in a.halves():
                if h.stage in seen and seen[h.stage][0] != r:
                    pr, pc = seen[h.stage]
                    raise ScheduleError(
                        f"{source}: rank {r} (line {row_line[r]}), cell {col}: stage {h.stage} also "
                        f"appears on rank {pr} (cell {pc}); each stage must live on one rank (for "
                        f"DualPipe give each direction its own stage numbers and a '# chains:' line)")
                seen.setdefault(h.stage, (r, col))
    if stage_to_rank is None and header_map is not None:
        stage_to_rank = header_map
    if stage_to_rank is None:
        nst = max(seen) + 1 if seen else 0
        missing = [s for s in range(nst) if s not in seen]
        if missing:
            listed = ", ".join(map(str, missing[:8])) + (f", ... ({len(missing):,} in all)" if len(missing) > 8 else "")
            raise ScheduleError(f"{source}: stages {listed} appear in no cell; add a "
                                f"'# stage_to_rank:' line or pass stage_to_rank")
        stage_to_rank = tuple(seen[s][0] for s in range(nst))
    stage_to_rank = tuple(int(x) for x in stage_to_rank)

    mbs = [h.mb for row in rows for _, a in row for h in a.halves()]
    m = num_microbatches if num_microbatches is not None else (max(mbs) + 1 if mbs else 0)
    mb_chain: tuple[int, ...] = ()
    if len(chains) > 1:
        chain_of_stage = {s: i for i, ch in enumerate(chains) for s in ch}
        found: dict[int, int] = {}
        for r, row in enumerate(rows):
            for col, a in row:
                for h in a.halves():
                    ci = chain_of_stage.get(h.stage)
                    if ci is None:
                        raise ScheduleError(f"{source}: rank {r} (line {row_line[r]}), cell {col}: stage "
                                            f"{h.stage} is in no chain of the '# chains:' line")
                    if found.setdefault(h.mb, ci) != ci:
                        raise ScheduleError(f"{source}: rank {r} (line {row_line[r]}), cell {col}: "
                                            f"micro-batch {h.mb} used in chains {found[h.mb]} and {ci}")
        mb_chain = tuple(found.get(mb, 0) for mb in range(m))
    sched = Schedule(name or Path(source).stem, nranks, m, stage_to_rank,
                     tuple(tuple(a for _, a in row) for row in rows), chains if len(chains) > 1 else (),
                     mb_chain, meta={"source": source})
    try:
        validate(sched)
    except ScheduleCheckError as e:
        r = min(e.marks)
        idx = e.marks[r]
        cols = [col for col, _ in rows[r]] if r < len(rows) else []
        col = cols[idx] if idx < len(cols) else (cols[-1] + 1 if cols else 0)
        line = row_line[r] if r < len(row_line) else "?"
        raise ScheduleError(f"{source}: rank {r} (line {line}), cell {col}: {e.problem.split(': ', 1)[1]}"
                            f"\n{e.grid}") from None
    except ScheduleError as e:
        raise ScheduleError(f"{source}: {e}") from None
    return sched


def _check_bounds(rows: list[list[tuple[int, Action]]], row_line: list[int], source: str,
                  declared_stages: int, num_microbatches: int | None) -> None:
    """Refuse a stage or micro-batch number far beyond what the file's cells can fill (each
    stage 0..S-1 and micro-batch 0..M-1 needs actions), before anything is built per stage or
    micro-batch; likewise ``num_microbatches``."""
    halves = sum(len(a.halves()) for row in rows for _, a in row)
    limit = halves + declared_stages + _INDEX_SLACK
    if num_microbatches is not None and num_microbatches > limit:
        raise ScheduleError(f"{source}: {num_microbatches:,} micro-batches asked for, but the file has only "
                            f"{halves:,} actions; give a schedule with an F and a backward of every "
                            f"micro-batch on every stage")
    for r, row in enumerate(rows):
        for col, a in row:
            for h in a.halves():
                for what, value in (("stage", h.stage), ("micro-batch", h.mb)):
                    if value >= limit:
                        raise ScheduleError(
                            f"{source}: rank {r} (line {row_line[r]}), cell {col}: {what} {shown(value)} is "
                            f"beyond what the file's {halves:,} actions can fill ({what}s are numbered from 0 "
                            f"and each one needs its actions)")


def read_schedule_csv(path: str | Path, **kw: Any) -> Schedule:
    """:func:`schedule_from_csv` on a file (at most :data:`MAX_CSV_BYTES`, UTF-8 text)."""
    p = Path(path)
    try:
        text = read_text(p, f"{p}: cannot read schedule CSV", MAX_CSV_BYTES)
    except SpecError as e:
        raise ScheduleError(str(e)) from None
    return schedule_from_csv(text, str(p), **kw)
