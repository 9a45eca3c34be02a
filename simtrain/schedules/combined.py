"""Megatron-LM's "1F1B overlap" (``--overlap-moe-expert-parallel-comm``): a 1F1B or interleaved
1F1B schedule whose steady-state forward and backward run as one combined step.

Megatron-core's ``forward_backward_pipelining_with_interleaving`` (NVIDIA/Megatron-LM
``megatron/core/pipeline_parallel/schedules.py``) hands each steady-state iteration's forward of
virtual micro-batch ``k + warmup`` and backward of ``k`` to
``combined_1f1b_schedule_for_interleaved_pipelining``
(``megatron/core/pipeline_parallel/combined_1f1b.py``), which runs them as one step whose layer
sub-modules interleave (``megatron/core/models/gpt/fine_grained_callables.py``: attention, EP
dispatch, MLP, EP combine, the backward in reverse), so each EP all-to-all of one micro-batch runs
under the other's compute. So that the two halves of a step never belong to one micro-batch,
``get_pp_rank_microbatches`` in the same ``schedules.py`` adds one warm-up forward
(``num_warmup_microbatches += 1``, at most all of them). Without pipelining
(``combined_1f1b_schedule_for_no_pipelining``) the same rule gives ``F0, F1&B0, F2&B1, ...``.

:func:`combine_1f1b` is that transformation of the schedule IR: each combined step is an
overlapped pair of kind ``"FB"`` (DualPipe's, :mod:`simtrain.schedules.ir`), which the lowering
interleaves (:func:`simtrain.workload.overlap.interleave`) and :func:`~simtrain.schedules.validate`
checks like any other schedule.
"""

from __future__ import annotations

from dataclasses import replace

from simtrain.errors import ScheduleError
from simtrain.schedules.ir import Action, Schedule

#: The schedules the transformation applies to (Megatron-core's 1F1B loops).
COMBINABLE = ("1f1b", "interleaved-1f1b")


def _combined_warmup(row: tuple[Action, ...], rank: int, name: str) -> int:
    """The warm-up forwards of a 1F1B row ``F^w (F B)^n B^*`` under 1F1B overlap: its leading
    forwards, ``w + 1`` (``w`` when every forward is in the warm-up); a :class:`ScheduleError`
    for a row of another shape."""
    kinds = "".join(a.kind for a in row)
    lead = len(kinds) - len(kinds.lstrip("F"))
    rest = kinds[lead:]
    n_f = rest.count("F")
    if set(kinds) - {"F", "B"} or rest != "BF" * n_f + "B" * (len(rest) - 2 * n_f):
        raise ScheduleError(f"schedule {name}: rank {rank} is not a 1F1B row (warm-up forwards, one "
                            f"forward one backward, backwards); 1F1B overlap needs one of {', '.join(COMBINABLE)}")
    return lead


def combine_1f1b(schedule: Schedule) -> Schedule:
    """``schedule`` (a 1F1B or interleaved-1F1B schedule) with Megatron-LM's 1F1B overlap: each
    rank runs one more warm-up forward, then pairs its i-th remaining forward with its i-th
    backward as one overlapped ``F&B`` action, then drains the last backwards. The forwards and
    backwards keep their order; the schedule keeps its name, with ``meta["combined_1f1b"]``."""
    if schedule.name not in COMBINABLE:
        raise ScheduleError(f"schedule {schedule.name}: 1F1B overlap (--overlap-moe-expert-parallel-comm) "
                            f"applies to {', '.join(COMBINABLE)} only")
    rows = []
    for rank, row in enumerate(schedule.actions):
        warm = _combined_warmup(row, rank, schedule.name)
        fwd = [a for a in row if a.kind == "F"]
        bwd = [a for a in row if a.kind == "B"]
        steady = len(fwd) - warm
        new = fwd[:warm]
        new += [Action(f.stage, "FB", f.mb, b.stage, b.mb) for f, b in zip(fwd[warm:], bwd[:steady])]
        rows.append(tuple(new + bwd[steady:]))
    return replace(schedule, actions=tuple(rows), meta={**schedule.meta, "combined_1f1b": True})
