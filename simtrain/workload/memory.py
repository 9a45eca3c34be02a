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

from dataclasses import replace

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
    opts = opts or WorkloadOptions()
    par = replace(par, recompute=str(recompute_layers))
    chunks = split_layers(model, par, gpu, schedule.chain_length, opts)
    layout = ParamLayout(model, par, schedule, chunks)
    recomputed = par.recompute_layers(max(len(c) for c in chunks))
    sh = Shape.of(par)
    full = costs.layer_activation_bytes(model, sh, full_recompute=False)
    kept = costs.layer_activation_bytes(model, sh, full_recompute=True)
    logits = costs.logits_bytes(model, sh) if opts.lm_head else 0.0
    peaks = []
    for pp_index, row in enumerate(schedule.actions):
        static = layout.static_of_pipeline_rank(pp_index)[0] + layout.reduce_buffer_bytes(pp_index, opts)
        peaks.append(static + _rank_peak(row, schedule, chunks, recomputed, full, kept, logits))
    return peaks


def _rank_peak(row: tuple[Action, ...], schedule: Schedule, chunks: list[range], recomputed: int, full: float,
               kept: float, logits: float) -> float:
    """The activations' high-water mark of one pipeline rank's actions, each action's layers
    counted rather than walked one by one (with whole-byte sizes the sums are exact either way;
    ``tests/workload/test_memory.py`` checks it against the walk). In a chunk the first
    ``recomputed`` layers keep only their input; a forward only allocates, so its peak is its
    end; a backward frees the layers it does not recompute (the chunk's last, walked first), then
    recomputes and frees the others, peaking at the first recompute."""
    last_chunk = len(chunks) - 1
    steps: dict[tuple[str, int], tuple[float, float | None, float]] = {}  # (kind, stage) -> its effect
    level = peak = 0.0
    for action in row:
        for a in action.halves():
            step = steps.get((a.kind, a.stage))
            if step is None:
                chunk_index = schedule.chunk_of_stage(a.stage)
                ends = logits if chunk_index == last_chunk else 0.0
                step = steps[(a.kind, a.stage)] = _counted_step(a.kind, len(chunks[chunk_index]), recomputed,
                                                                full, kept, ends)
            before, at, after = step
            level += before
            if at is not None:
                peak = max(peak, level + at)
            level += after
    return peak


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
