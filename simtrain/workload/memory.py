"""The memory plan: peak memory per pipeline rank for a recompute depth, without simulating.

A rank's allocations all happen on its compute stream, which runs its actions in schedule order,
so its memory high-water mark follows from that order alone. The plan replays the allocations the
lowering attaches to its ops (:mod:`simtrain.workload.blocks`, :mod:`simtrain.workload.lower`):
a forward keeps each layer's activations, or only its input when recomputed (Korthikanti et al.
2022, table 2: :func:`simtrain.costs.layer_activation_bytes`), and the last stage its logits; a
recompute rebuilds a layer's activations just before its backward; B, or W after I, releases them.
Static memory includes, under ZeRO 2 and 3, the unsharded gradient buckets in flight
(:meth:`~simtrain.workload.data_parallel.ParamLayout.reduce_buffer_bytes`).

An overlapped F&B pair (DualPipe) is planned as its forward half, then its backward half; the
simulation interleaves the halves (:mod:`simtrain.workload.overlap`), so the backward frees some
activations before the forward has allocated all of its own: for such schedules the plan is an
upper bound, above the simulated peak by less than one chunk's activations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from simtrain import costs
from simtrain.costs import Shape
from simtrain.schedules.ir import Action, Schedule
from simtrain.specs.gpu import GpuSpec
from simtrain.specs.model import ModelSpec
from simtrain.specs.parallel import ParallelSpec
from simtrain.workload.data_parallel import ParamLayout
from simtrain.workload.options import WorkloadOptions
from simtrain.workload.stages import split_layers


def memory_plan(model: ModelSpec, par: ParallelSpec, gpu: GpuSpec, schedule: Schedule,
                recompute_layers: int, opts: WorkloadOptions | None = None) -> list[float]:
    """Peak bytes per pipeline rank if the first ``recompute_layers`` layers of every chunk are
    fully recomputed: static memory plus the activations' high-water mark."""
    return memory_planner(model, par, gpu, schedule, opts)(recompute_layers)


def memory_planner(model: ModelSpec, par: ParallelSpec, gpu: GpuSpec, schedule: Schedule,
                   opts: WorkloadOptions | None = None) -> Callable[[int], list[float]]:
    """:func:`memory_plan` of ``schedule`` for any number of recomputed layers, its actions read
    once (a search for the fewest that fit asks for several)."""
    options = opts or WorkloadOptions()
    rows = [_RowSteps.of(row) for row in schedule.actions]

    def plan(recompute_layers: int) -> list[float]:
        counted = replace(par, recompute=str(recompute_layers))
        chunks = split_layers(model, counted, gpu, schedule.chain_length, options)
        layout = ParamLayout(model, counted, schedule, chunks)
        recomputed = counted.recompute_layers(max(len(c) for c in chunks))
        sh = Shape.of(counted)
        full = costs.layer_activation_bytes(model, sh, full_recompute=False)
        kept = costs.layer_activation_bytes(model, sh, full_recompute=True)
        logits = costs.logits_bytes(model, sh) if options.lm_head else 0.0
        peaks = []
        for pp_index, row in enumerate(rows):
            static = layout.static_of_pipeline_rank(pp_index)[0] + layout.reduce_buffer_bytes(pp_index, options)
            peaks.append(static + row.peak(schedule, chunks, recomputed, full, kept, logits))
        return peaks

    return plan


@dataclass(frozen=True)
class _RowSteps:
    """One pipeline rank's actions as the memory plan reads them: each distinct (kind, stage)
    once, and per action (an overlapped pair's halves apart) the index of its own."""

    keys: tuple[tuple[str, int], ...]
    codes: np.ndarray

    @classmethod
    def of(cls, row: tuple[Action, ...]) -> _RowSteps:
        index: dict[tuple[str, int], int] = {}
        codes = [index.setdefault((a.kind, a.stage), len(index))
                 for action in row for a in (action.halves() if action.kind == "FB" else (action,))]
        return cls(tuple(index), np.array(codes, dtype=np.int64))

    def peak(self, schedule: Schedule, chunks: list[range], recomputed: int, full: float, kept: float,
             logits: float) -> float:
        """The activations' high-water mark, each action's layers counted rather than walked
        one by one (with whole-byte sizes the sums are exact either way;
        ``tests/workload/test_memory.py`` checks it against the walk). In a chunk the first
        ``recomputed`` layers keep only their input; a forward only allocates, so its peak is
        its end; a backward frees the layers it does not recompute (the chunk's last, walked
        first), then recomputes and frees the others, peaking at the first recompute. The level
        is the running sum of every action's (before, after) in order, one cumulative sum: the
        same additions in the same order as adding them one by one."""
        if not len(self.codes):
            return 0.0
        last_chunk = len(chunks) - 1
        steps = []
        for kind, stage in self.keys:
            chunk_index = schedule.chunk_of_stage(stage)
            ends = logits if chunk_index == last_chunk else 0.0
            steps.append(_counted_step(kind, len(chunks[chunk_index]), recomputed, full, kept, ends))
        moves = np.array([(before, after) for before, _, after in steps], dtype=np.float64)
        tops = np.array([np.nan if at is None else at for _, at, _ in steps], dtype=np.float64)[self.codes]
        level = np.cumsum(moves[self.codes].ravel())[0::2]  # after each action's "before"
        peaks = (level + tops)[~np.isnan(tops)]
        return max(0.0, float(peaks.max())) if len(peaks) else 0.0


def _rank_peak(row: tuple[Action, ...], schedule: Schedule, chunks: list[range], recomputed: int, full: float,
               kept: float, logits: float) -> float:
    """:meth:`_RowSteps.peak` of one pipeline rank's actions."""
    return _RowSteps.of(row).peak(schedule, chunks, recomputed, full, kept, logits)


def _counted_step(kind: str, n: int, recomputed: int, full: float, kept: float,
                  logits: float) -> tuple[float, float | None, float]:
    """What one action of ``kind`` over a chunk of ``n`` layers does to the level (its last chunk
    holding ``logits``): (added before the peak, the peak above that level or None, added
    after)."""
    n_rc = min(max(recomputed, 0), n)
    n_full = n - n_rc
    if kind == "F":
        return n_rc * kept + n_full * full + logits, 0.0, 0.0
    if kind == "B":  # frees the layers it does not recompute, peaks at the first recompute
        return -logits - n_full * full, (full if n_rc else None), -n_rc * kept
    if kind == "I":
        return -logits + n_rc * full, 0.0, 0.0
    if kind == "W":
        return -(n_full * full + n_rc * (kept + full)), None, 0.0
    return 0.0, None, 0.0
