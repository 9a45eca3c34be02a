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
from simtrain.schedules.ir import Schedule
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
    whole = all(float(x).is_integer() and x >= 0 for x in (full, kept, logits))
    most = (full + kept + logits) * (max(len(c) for c in chunks) + 1)  # bytes one action holds at most
    peaks = []
    for pp_index, row in enumerate(schedule.actions):
        static = layout.static_of_pipeline_rank(pp_index)[0] + layout.reduce_buffer_bytes(pp_index, opts)
        plan = _rank_peak_counted if whole and most * 2 * (len(row) + 1) < 2**52 else _rank_peak
        peaks.append(static + plan(row, schedule, chunks, recomputed, full, kept, logits))
    return peaks


def _rank_peak(row, schedule, chunks, recomputed: int, full: float, kept: float, logits: float) -> float:
    """The activations' high-water mark of one pipeline rank's actions, layer by layer."""
    last_chunk = len(chunks) - 1
    level = peak = 0.0
    for action in row:
        for a in action.halves():
            chunk_index = schedule.chunk_of_stage(a.stage)
            chunk = chunks[chunk_index]
            rc = [i - chunk.start < recomputed for i in chunk]
            if a.kind == "F":
                for r in rc:
                    level += kept if r else full
                    peak = max(peak, level)
                if chunk_index == last_chunk:
                    level += logits
                    peak = max(peak, level)
                continue
            if a.kind in ("B", "I") and chunk_index == last_chunk:
                level -= logits  # the LM head's backward runs first
            for r in reversed(rc):
                if r and a.kind in ("B", "I"):
                    level += full  # the recompute forward
                    peak = max(peak, level)
                if a.kind in ("B", "W"):
                    level -= kept + full if r else full
    return peak


def _rank_peak_counted(row, schedule, chunks, recomputed: int, full: float, kept: float, logits: float) -> float:
    """:func:`_rank_peak` with each action's layers counted instead of walked: equal to it bit for
    bit where the sizes are whole numbers of bytes and every partial sum stays below 2**52 (each
    is then exact, whatever the order of the additions).
    In a chunk the first ``recomputed`` layers keep only their input; a forward only allocates,
    so its peak is its end; a backward frees the layers it does not recompute (the chunk's last,
    walked first), then recomputes and frees the others, peaking at the first recompute."""
    last_chunk = len(chunks) - 1
    steps: dict[tuple[str, int], tuple[float, float | None, float]] = {}  # (kind, stage) -> its effect
    level = peak = 0.0
    for action in row:
        for a in action.halves():
            step = steps.get((a.kind, a.stage))
            if step is None:
                chunk_index = schedule.chunk_of_stage(a.stage)
                step = steps[(a.kind, a.stage)] = _counted_step(a.kind, len(chunks[chunk_index]), recomputed,
                                                                full, kept, logits if chunk_index == last_chunk else 0.0)
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
