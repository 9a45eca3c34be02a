"""Metrics: pure functions of a timeline (plus the specs that give FLOP counts and capacities).

Definitions (documented in docs/metrics.md):

* ``step_time_s``: the end of the last span.
* ``model_flops_per_token``: ``6 N_active_nonembedding + 6 s q_width L + 6 h V``
  (:class:`simtrain.specs.flops.ModelFlops`, the formula the closed form shares, with its
  sources); MFU uses it, recompute excluded.
* ``mfu = model FLOPs per step / (step time x GPUs x peak BF16)``; ``hfu`` uses the FLOPs every
  compute span actually ran, recompute included.
* Per simulated rank the step splits into compute, recompute, exposed communication per kind (time
  a kind of communication runs while the compute stream is idle, attributed once in the order
  tp, cp, ep, pp, dp) and idle; each rank's parts sum to the step time and the breakdown is their
  mean over ranks. Idle splits into ``imbalance`` (the busiest rank's extra compute over the mean,
  capped by the idle time) and ``bubble`` (the rest: pipeline fill and drain).
* ``exposed_comm_s[kind]``: mean over ranks of the time that kind runs while compute is idle;
  ``overlapped_comm_s[kind]``: mean of the rest of that kind's time.
* ``peak_memory_gib``: per pipeline rank, static memory plus the peak of activations allocated
  when a forward starts and released when the backward (or W) that consumes them ends.

The report is typed: :class:`StepMetrics` holds the metrics that both the simulation
(:func:`summarize`) and the closed-form model produce, each through :func:`step_metrics`;
:class:`Report` (``report.json``) adds the simulated run's facts, all filled by
:func:`run_report`. A new report key is a field here, with the ``#:`` comment that becomes its
entry in docs/report.md (generated), plus one line in :func:`step_metrics` (a key derived
from the step's quantities: both reports then carry it) or in :func:`run_report` (a key only
the simulation gives, measured here on the timeline), and its row in
:func:`simtrain.outputs.text_tables.run_summary`. JSON writing and ``compare`` need no change.
"""

from __future__ import annotations

from typing import Any, TypedDict, cast

import numpy as np

from simtrain.costs.timing import SOURCES
from simtrain.results.energy import PowerDraw, RankSeconds, energy_metrics
from simtrain.specs.flops import ModelFlops
from simtrain.specs.gpu import GpuSpec
from simtrain.specs.model import ModelSpec
from simtrain.specs.parallel import ParallelSpec
from simtrain.engine.timeline import Timeline, rank_columns
from simtrain.workload.program import COMM_KINDS, KINDS, STREAMS, Program
from simtrain.units import TFLOPS, GiB

BREAKDOWN = ("compute", "recompute", "imbalance", "tp", "cp", "ep", "pp", "bubble", "dp")


def model_flops_per_token(model: ModelSpec, seq: int) -> float:
    """Model FLOPs per token for MFU (:class:`~simtrain.specs.flops.ModelFlops`, multi-token
    prediction modules included)."""
    return ModelFlops.of(model, seq).per_token


BREAKDOWN_COLUMNS = ("stream", "kind", "start_s", "end_s")  #: what rank_breakdown, comm_exposure read
MEMORY_COLUMNS = ("start_s", "end_s", "alloc_bytes", "free_bytes")  #: what memory_timeline reads


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint, sorted union of intervals."""
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.nonzero(new)[0]
    us = s[idx]
    ue = np.append(run_end[idx[1:] - 1], run_end[-1])
    return us, ue


def _measure(intervals: tuple[np.ndarray, np.ndarray]) -> float:
    s, e = intervals
    return float(np.sum(e - s))


def _merge(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return _union(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))


def _of_rank(tl: Timeline | dict[str, np.ndarray], rank: int) -> dict[str, np.ndarray]:
    """The columns of ``rank``'s spans: ``tl`` itself when it already holds one rank's columns."""
    if isinstance(tl, dict):
        return tl
    c = tl.cols
    m = c["rank"] == rank
    return {k: v[m] for k, v in c.items()}


def rank_breakdown(tl: Timeline | dict[str, np.ndarray], rank: int, step: float) -> dict[str, float]:
    """Compute, recompute, exposed comm per kind (prioritised) and idle of one rank; sums to step.
    ``tl`` is a timeline or that rank's columns (:func:`rank_columns`)."""
    c = _of_rank(tl, rank)
    compute_stream = c["stream"] == STREAMS.index("compute")
    recompute = c["kind"] == KINDS.index("R")
    out: dict[str, float] = {}
    m = compute_stream
    busy = _union(c["start_s"][m], c["end_s"][m])
    out["compute"] = float(np.sum((c["end_s"] - c["start_s"])[m & ~recompute]))
    out["recompute"] = float(np.sum((c["end_s"] - c["start_s"])[m & recompute]))
    covered = busy
    for kind in COMM_KINDS:
        mk = c["kind"] == KINDS.index(kind)
        kind_iv = _union(c["start_s"][mk], c["end_s"][mk])
        merged = _merge(covered, kind_iv)
        out[kind] = _measure(merged) - _measure(covered)
        covered = merged
    out["idle"] = step - _measure(covered)
    return out


def comm_exposure(tl: Timeline | dict[str, np.ndarray], rank: int) -> dict[str, tuple[float, float]]:
    """Per comm kind on one rank: (exposed, overlapped) seconds, each kind on its own. ``tl`` is a
    timeline or that rank's columns (:func:`rank_columns`)."""
    c = _of_rank(tl, rank)
    m = c["stream"] == STREAMS.index("compute")
    busy = _union(c["start_s"][m], c["end_s"][m])
    busy_len = _measure(busy)
    out = {}
    for kind in COMM_KINDS:
        mk = c["kind"] == KINDS.index(kind)
        kind_iv = _union(c["start_s"][mk], c["end_s"][mk])
        total = _measure(kind_iv)
        exposed = _measure(_merge(busy, kind_iv)) - busy_len
        out[kind] = (exposed, total - exposed)
    return out


def memory_timeline(tl: Timeline, static_bytes: dict[int, float]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per rank: (times, bytes in use from that time on): static memory plus activations that a
    span allocates when it starts and releases when it ends. At equal times releases come first
    (a backward frees before the next forward allocates)."""
    per_rank = rank_columns(tl, MEMORY_COLUMNS)
    empty = {k: v[:0] for k, v in tl.cols.items()}
    out = {}
    for rank, static in static_bytes.items():
        c = per_rank.get(rank, empty)
        times = np.concatenate([[0.0], c["start_s"], c["end_s"]])
        deltas = np.concatenate([[static], c["alloc_bytes"], -c["free_bytes"]])
        keep = deltas != 0
        keep[0] = True
        times, deltas = times[keep], deltas[keep]
        order = np.lexsort((deltas, times))
        out[rank] = (times[order], np.cumsum(deltas[order]))
    return out


def memory_peaks(tl: Timeline, static_bytes: dict[int, float]) -> dict[int, float]:
    """Peak bytes per rank: static memory plus the activation high-water mark."""
    return {rank: max(float(level.max()), static_bytes[rank])
            for rank, (_, level) in memory_timeline(tl, static_bytes).items()}


class StepMetrics(TypedDict):
    """The metrics of one step, the same whether measured on a timeline (:func:`summarize`) or
    given by the closed form (:mod:`simtrain.analytic.model`); built by :func:`step_metrics`.
    Each field's ``#:`` comment is its entry in docs/report.md (generated)."""

    #: seconds: the end of the last span
    step_time_s: float
    #: tokens of the global batch per second
    tokens_per_s: float
    #: model FLOP/s per GPU, in 10^12
    tflops_per_gpu: float
    #: model FLOPs per step / (step time x GPUs x peak BF16 FLOP/s)
    mfu: float
    #: hardware FLOPs per step / (step time x GPUs x peak BF16 FLOP/s)
    hfu: float
    #: `6 N_active_nonembedding + 6 s q_width L + 6 h V` per token, times the tokens of the step
    model_flops_per_step: float
    #: the FLOPs the compute ran, recompute included
    hardware_flops_per_step: float
    #: bubble / step time
    bubble_ratio: float
    #: seconds per category (compute, recompute, imbalance, tp, cp, ep, pp, bubble, dp); sums to
    #: the step time
    breakdown_s: dict[str, float]
    #: seconds per communication kind that it runs while compute is idle
    exposed_comm_s: dict[str, float]
    #: the rest of each communication kind's seconds
    overlapped_comm_s: dict[str, float]
    #: busiest rank's compute time / mean compute time
    stage_imbalance: float
    #: seconds of the busiest rank's compute, per pipeline stage
    compute_s_per_stage: list[float]
    #: per pipeline stage: static memory plus the activations' high-water mark
    peak_memory_gib: list[float]
    #: usable memory per GPU
    memory_capacity_gib: float
    #: every stage's peak memory within the capacity
    fits_in_memory: bool
    #: per pipeline stage: the peak memory beyond the capacity (0 where it fits)
    memory_excess_gib: list[float]


class Report(StepMetrics):
    """``report.json`` of a simulated step: the step metrics, the run's facts and the resolved
    configuration. No wall time, so identical inputs give identical files."""

    #: the model's parameters, each shared matrix once
    params_total: int
    #: the parameters one token uses: the dense parts, top_k routed and the shared experts (MoE)
    params_active: int
    #: micro-batches per pipeline
    num_microbatches: int
    #: operations the engine ran
    num_events: int
    #: ranks simulated: one representative per group of identical ranks, unless unfolded
    simulated_ranks: int
    #: flow fidelity: the most utilised links with bytes, busy time, mean and peak utilisation,
    #: bytes per tier, utilisation of every link (empty otherwise)
    links: dict[str, Any]
    #: the resolved settings, with the names of the model, topology and GPU
    config: dict[str, Any]
    #: layers of each pipeline chunk in chain order (one fewer on the end chunks where pp x vpp
    #: does not divide the layers, or where the embedding and the loss are accounted for)
    layers_per_chunk: list[int]
    #: distinct kernels timed from a calibration's measurements (measured), between them
    #: (interpolated) and by the kernel model (model)
    kernel_sources: dict[str, int]
    #: consecutive steps simulated (--steps); the metrics are those of the last one
    steps: int
    #: seconds of the first step: from the start to its last optimizer step's end
    first_step_s: float
    #: seconds of the last step, from the previous step's end (the step time when steps > 1)
    steady_step_s: float
    #: SMs of the GPU a communication kernel holds while it runs beside compute
    comm_sms: int
    #: how much longer compute takes while communication runs beside it (0: communication is free)
    comm_interference: float
    #: seconds communication added to the compute of the rank it slowed most, over all steps
    comm_slowdown_s: float
    #: stragglers, other GPU generations, degraded and failed links: the GPUs and links they touch,
    #: the step without them (baseline_step_s), their cost (cost_s) and each setting's alone
    #: (cost_by_setting_s); empty without perturbations
    perturbations: dict[str, Any]
    #: seconds of each simulated step (--steps), from the previous step's end
    step_times_s: list[float]
    #: the steady steps' time distribution (every step but the first, or the one step): mean_s,
    #: p50_s, p90_s, p99_s, min_s, max_s, and the slow steps drawn (--slow-steps: step -> rank)
    step_time_stats: dict[str, Any]
    #: joules of one step: every GPU at its board power while it computes, at idle power while it
    #: waits, in between while it only communicates, plus hosts, NICs and switches, times the PUE
    #: (None where the GPU's power is unknown)
    energy_per_step_j: float | None
    #: the GPUs' part of the step's energy, before the PUE
    gpu_energy_per_step_j: float | None
    #: watts: the step's energy / step time
    mean_power_w: float | None
    #: tokens of the global batch per kilowatt-hour
    tokens_per_kwh: float | None
    #: US dollars of one step: GPUs x hours x price per GPU-hour (--price-per-gpu-hour or the
    #: topology's [cost]) plus the energy at the [cost] electricity price; None without a price
    cost_per_step_usd: float | None
    #: tokens of the global batch per US dollar
    tokens_per_usd: float | None
    #: steps of a training run of --train-tokens tokens (None without it)
    train_steps: int | None
    #: seconds of that run
    time_to_train_s: float | None
    #: kilowatt-hours of that run
    energy_to_train_kwh: float | None
    #: US dollars of that run
    cost_to_train_usd: float | None


def step_metrics(*, step_s: float, tokens: int, num_gpus: int, gpu: GpuSpec, model_flops: float,
                 hardware_flops: float, breakdown: dict[str, float], exposed: dict[str, float],
                 overlapped: dict[str, float], stage_work: list[float], mean_work: float,
                 peak_bytes: list[float]) -> StepMetrics:
    """The report's metrics from the step's primary quantities (definitions in the module
    docstring): ``stage_work`` is the busiest rank's compute per pipeline stage, ``mean_work`` the
    mean over ranks, ``peak_bytes`` the peak memory per pipeline stage."""
    capacity = gpu.usable_memory_bytes
    denom = step_s * num_gpus * gpu.peak_bf16_flops if step_s > 0 else float("inf")
    return StepMetrics(
        step_time_s=step_s,
        tokens_per_s=tokens / step_s if step_s > 0 else 0.0,
        tflops_per_gpu=model_flops / (step_s * num_gpus) / TFLOPS if step_s > 0 else 0.0,
        mfu=model_flops / denom,
        hfu=hardware_flops / denom,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=hardware_flops,
        bubble_ratio=breakdown["bubble"] / step_s if step_s > 0 else 0.0,
        breakdown_s=breakdown,
        exposed_comm_s=exposed,
        overlapped_comm_s=overlapped,
        stage_imbalance=max(stage_work) / mean_work if mean_work > 0 else 1.0,
        compute_s_per_stage=stage_work,
        peak_memory_gib=[p / GiB for p in peak_bytes],
        memory_capacity_gib=capacity / GiB,
        fits_in_memory=all(p <= capacity for p in peak_bytes),
        memory_excess_gib=[max(0.0, p - capacity) / GiB for p in peak_bytes],
    )


def summarize(tl: Timeline, *, model: ModelSpec, gpu: GpuSpec, num_gpus: int, seq: int, gbs: int,
              rank_weight: dict[int, int], pipeline_rank_of: dict[int, int],
              static_bytes: dict[int, float], memory: Timeline | None = None,
              columns: dict[int, dict[str, np.ndarray]] | None = None,
              per_rank: list[dict[str, float]] | None = None) -> StepMetrics:
    """The step metrics of a timeline whose simulated ranks stand for ``rank_weight`` ranks each
    each, at the pipeline rank ``pipeline_rank_of`` gives; the peak memory is that of ``memory``
    (the whole run, where ``tl`` is one step of it), or of ``tl``. ``columns`` are ``tl``'s
    :func:`rank_columns` and ``per_rank`` their :func:`rank_breakdown` (ranks in order), where the
    caller has them already."""
    step = tl.end_s
    ranks = sorted(rank_weight)
    weights = np.array([rank_weight[r] for r in ranks], dtype=float)
    wsum = weights.sum()
    columns = rank_columns(tl, BREAKDOWN_COLUMNS) if columns is None else columns
    empty = {k: v[:0] for k, v in tl.cols.items()}
    if per_rank is None:
        per_rank = [rank_breakdown(columns.get(r, empty), r, step) for r in ranks]

    def mean(key: str) -> float:
        return float(np.dot(weights, [p[key] for p in per_rank]) / wsum)

    work = np.array([p["compute"] + p["recompute"] for p in per_rank])
    mean_work = float(np.dot(weights, work) / wsum)
    idle = mean("idle")
    imbalance = min(max(float(work.max()) - mean_work, 0.0), max(idle, 0.0))
    breakdown = {
        "compute": mean("compute"), "recompute": mean("recompute"), "imbalance": imbalance,
        **{k: mean(k) for k in COMM_KINDS}, "bubble": idle - imbalance,
    }
    breakdown = {k: breakdown[k] for k in BREAKDOWN}
    exposure = [comm_exposure(columns.get(r, empty), r) for r in ranks]
    exposed = {k: float(np.dot(weights, [e[k][0] for e in exposure]) / wsum) for k in COMM_KINDS}
    overlapped = {k: float(np.dot(weights, [e[k][1] for e in exposure]) / wsum) for k in COMM_KINDS}

    tokens = gbs * seq
    compute_mask = tl.cols["stream"] == STREAMS.index("compute")
    weight_of = np.zeros(max(ranks) + 1)
    for r in ranks:
        weight_of[r] = rank_weight[r]
    hw_flops = float(np.sum(tl.cols["flops"][compute_mask] * weight_of[tl.cols["rank"][compute_mask]]))
    peaks = memory_peaks(memory if memory is not None else tl, static_bytes)
    stages = sorted(set(pipeline_rank_of.values()))
    return step_metrics(
        step_s=step, tokens=tokens, num_gpus=num_gpus, gpu=gpu,
        model_flops=model_flops_per_token(model, seq) * tokens, hardware_flops=hw_flops,
        breakdown=breakdown, exposed=exposed, overlapped=overlapped,
        stage_work=[float(max(work[i] for i, r in enumerate(ranks) if pipeline_rank_of[r] == s)) for s in stages],
        mean_work=mean_work,
        peak_bytes=[max(peaks[r] for r in ranks if pipeline_rank_of[r] == s) for s in stages])


def step_times(ends: list[float], step_s: float) -> list[float]:
    """Each step's seconds from the previous step's end (the run's step time without optimizer
    steps to mark them)."""
    return [b - a for a, b in zip([0.0, *ends], ends)] if ends else [step_s]


def step_time_stats(times: list[float], slow_steps: dict[str, int]) -> dict[str, Any]:
    """Mean, percentiles (linear interpolation), min and max of the steady steps: all but the
    first where there are several (the first starts from idle GPUs)."""
    steady = np.array(times[1:] if len(times) > 1 else times)
    p50, p90, p99 = (float(v) for v in np.percentile(steady, [50, 90, 99]))
    return {"steps": len(steady), "mean_s": float(steady.mean()), "p50_s": p50, "p90_s": p90, "p99_s": p99,
            "min_s": float(steady.min()), "max_s": float(steady.max()), "slow_steps": slow_steps}


def run_report(tl: Timeline, program: Program, *, model: ModelSpec, gpu: GpuSpec, par: ParallelSpec,
               num_events: int, links: dict[str, Any], config: dict[str, Any], interference: float = 0.0,
               slowdown_s: dict[int, float] | None = None, power: PowerDraw | None = None,
               perturbations: dict[str, Any] | None = None, slow_steps: dict[str, int] | None = None) -> Report:
    """The report of a simulated step: the metrics of its timeline and the facts of the run,
    with the ``interference`` factor the engine ran with, the compute seconds communication
    added on each simulated rank (``slowdown_s``) and the energy and cost of the step at the
    cluster's ``power`` (:mod:`simtrain.results.energy`; without it, no GPU power and no price)."""
    ends = tl.step_ends()
    last = tl.window(ends[-2], ends[-1]) if len(ends) > 1 else tl
    columns = rank_columns(last, BREAKDOWN_COLUMNS)
    empty, step = {k: v[:0] for k, v in last.cols.items()}, last.end_s
    per_rank = [rank_breakdown(columns.get(r, empty), r, step) for r in program.ranks]
    metrics = summarize(last, model=model, gpu=gpu, num_gpus=par.world, seq=par.seq, gbs=par.gbs,
                        rank_weight=program.rank_weight, pipeline_rank_of=program.pipeline_rank_of,
                        static_bytes=program.static_bytes, memory=tl, columns=columns, per_rank=per_rank)
    seconds = [RankSeconds(busy_s=b["compute"] + b["recompute"], comm_s=sum(b[k] for k in COMM_KINDS),
                           idle_s=b["idle"], weight=program.rank_weight[r]) for r, b in zip(program.ranks, per_rank)]
    energy = energy_metrics(seconds, step_s=step, tokens=par.gbs * par.seq,
                            draw=power or PowerDraw(None, None, None, 0.0, num_gpus=par.world))
    report = dict(**metrics, **energy, params_total=model.params_total, params_active=model.params_active,
                  num_microbatches=par.num_microbatches, num_events=num_events,
                  simulated_ranks=len(program.ranks), links=links, config=config,
                  layers_per_chunk=list(program.layers_per_chunk),
                  kernel_sources={k: program.kernel_sources.get(k, 0) for k in SOURCES},
                  steps=max(len(ends), 1), first_step_s=ends[0] if len(ends) > 1 else metrics["step_time_s"],
                  steady_step_s=metrics["step_time_s"],
                  comm_sms=gpu.comm_sms, comm_interference=interference,
                  comm_slowdown_s=max((slowdown_s or {}).values(), default=0.0),
                  perturbations=perturbations or {}, step_times_s=step_times(ends, metrics["step_time_s"]),
                  step_time_stats=step_time_stats(step_times(ends, metrics["step_time_s"]), slow_steps or {}))
    return cast(Report, report)  # what Report(...) builds; energy_metrics gives its keys as a plain dict
