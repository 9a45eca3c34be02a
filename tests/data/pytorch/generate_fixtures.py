"""Regenerate the PyTorch schedule fixtures in this folder (needs torch; not run by the tests).

    pip install torch==2.13.0
    python tests/data/pytorch/generate_fixtures.py

For each schedule class and (pp, m[, stages per rank]) below, this asks PyTorch's own code for
its compute-only per-rank action order (``_get_pipeline_order`` for the single-stage classes,
``_calculate_single_rank_operations`` for the multi-stage ones; no process group is created:
the objects are built without ``__init__`` and given the attributes those methods read) and
writes it the way ``PipelineScheduleMulti._dump_csv`` does: one row per rank, ``None`` bubbles as
empty cells, overlapped pairs in PyTorch's spelling ``(0F3;5B1)OVERLAP_F_B``. Non-compute
actions (``REDUCE_GRAD``) are dropped.
"""

from __future__ import annotations

import csv
from pathlib import Path

import torch
from torch.distributed.pipelining import schedules as S

HERE = Path(__file__).parent
COMPUTE = {"F", "I", "W", "B", "OVERLAP_F_B"}


def _bare(cls, **attrs):
    obj = cls.__new__(cls)
    for k, v in attrs.items():
        setattr(obj, k, v)
    return obj


def single(cls, pp, m):
    obj = _bare(cls, _num_stages=pp, _n_microbatches=m)
    order = obj._get_pipeline_order()
    return [order[r] for r in range(pp)]


def multi(cls, pp, m, v, **extra):
    rounds = max(1, m // pp)
    obj = _bare(cls, pp_group_size=pp, n_local_stages=v, _n_microbatches=m, number_of_rounds=rounds,
                microbatches_per_round=m // rounds, num_stages=pp * v, **extra)
    order = {r: obj._calculate_single_rank_operations(r) for r in range(pp)}
    if cls is S.ScheduleInterleavedZeroBubble:
        obj.pipeline_order = order
        order = obj._add_bubbles_to_actions(pp * v)
    return [order[r] for r in range(pp)]


def cell(a) -> str:
    if a is None:
        return ""
    kind = a.computation_type.value
    if kind not in COMPUTE:
        return None
    return repr(a)


CASES = [
    ("ScheduleGPipe", lambda p, m: single(S.ScheduleGPipe, p, m), [(2, 4), (4, 8), (4, 6)], 1),
    ("Schedule1F1B", lambda p, m: single(S.Schedule1F1B, p, m), [(2, 4), (4, 8), (4, 12), (8, 16)], 1),
    ("ScheduleInterleaved1F1B", lambda p, m: multi(S.ScheduleInterleaved1F1B, p, m, 2),
     [(2, 4), (4, 8), (4, 10), (4, 16)], 2),
    ("ScheduleInterleavedZeroBubble", lambda p, m: multi(S.ScheduleInterleavedZeroBubble, p, m, 1),
     [(2, 4), (4, 8), (4, 12), (8, 16)], 1),
    ("ScheduleInterleavedZeroBubble", lambda p, m: multi(S.ScheduleInterleavedZeroBubble, p, m, 2),
     [(2, 4), (4, 8), (4, 16)], 2),
    ("ScheduleZBVZeroBubble", lambda p, m: multi(S.ScheduleZBVZeroBubble, p, m, 2),
     [(2, 4), (4, 8), (4, 6), (4, 16)], 2),
    ("ScheduleDualPipeV", lambda p, m: multi(S.ScheduleDualPipeV, p, m, 2), [(2, 4), (4, 8), (4, 10), (8, 16)], 2),
]


def main() -> None:
    for name, build, shapes, v in CASES:
        for p, m in shapes:
            rows = []
            for ops in build(p, m):
                cells = [cell(a) for a in ops]
                rows.append([c for c in cells if c is not None])
            fname = HERE / f"{name}-p{p}-m{m}-v{v}.csv"
            with open(fname, "w", newline="") as f:
                csv.writer(f, lineterminator="\n").writerows(rows)
            print("wrote", fname.name, "torch", torch.__version__)


if __name__ == "__main__":
    main()
