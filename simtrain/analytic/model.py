"""The closed-form model of one training step (Megatron-LM FLOP, bubble, memory and ZeRO formulas).

An independent implementation of the formulas of the course notes' configuration search script
("3D / 5D parallelism", section "a configuration search script"), driven by the same specs as the
simulator: the model from :class:`~simtrain.specs.model.ModelSpec`, peak FLOP/s, GEMM efficiency
and usable memory from the :class:`~simtrain.specs.gpu.GpuSpec`, bandwidths and GPUs per node
from the :class:`~simtrain.topology.Cluster`. With the ``seed-h100`` presets the script's
constants come out exactly: PEAK 989e12, EFF 0.6, MEM 80e9 x 0.9, NODE 8, NVLINK 450e9, NET 50e9.

Notation: ``N`` parameters (``params_total``, or the ``n_params`` override), ``L`` layers, ``h``
hidden, ``kv`` K (= V) width per token, ``V`` vocabulary, ``t, c, p, d`` = TP, CP, PP, DP
degrees, ``s = seq // c`` tokens per CP rank, ``b`` micro-batch size, ``m = gbs / (d b)``
micro-batches per pipeline, ``l = L / p`` layers per stage, ``P e`` sustained FLOP/s.

Memory (the notes' ledger, with the layout's ZeRO stage, sequence parallelism, attention kernel,
recompute policy and stage split read as :mod:`simtrain.analytic.ledger` says):

* ``psi = N / (t p)``; model states under ZeRO-1 over DP x CP ``4 psi + 12 psi / (d c)`` bytes
  (bf16 weights and gradients, fp32 master weights and Adam moments sharded; Rajbhandari et al.
  2020), ``16 psi`` under ZeRO-0, ``2 psi + 14 psi / (d c)`` under ZeRO-2, ``16 psi / (d c)``
  under ZeRO-3; a stage of an uneven split holds its share of the layers' parameters;
* activations ``(34 (l - rc) + 2 rc) s b h / t`` bytes per in-flight micro-batch (Korthikanti et
  al. 2022, table 2, with SP and flash attention; a fully recomputed layer keeps only its input;
  without SP ``s b h (10 + 24 / t)`` and ``2 s b h``; the eager attention core's scores unless
  recompute is selective), times the micro-batches in flight: ``min(p, m)`` on the first stage
  of 1F1B;
* ``rc`` is the smallest full-layer recompute count per stage that fits in usable memory; none
  fits: the configuration does not fit.

Time of one micro-batch on the slowest (last) stage, then the step:

* per token and layer ``f_layer = 6 (N - E) / L + 6 seq q`` (linear layers forward and backward;
  causal attention over the full sequence) with ``E`` the embedding and LM head weights (``2 V h``
  untied) and ``q`` the query width (= h for Llama); LM head ``f_head = 6 V h``
  (:class:`simtrain.specs.flops.ModelFlops`, the simulation's MFU formula too); one FLOP per token
  costs ``sec = s b / t / (P e)`` on one GPU;
* ``slow = l f_layer sec + rc f_layer / 3 sec + f_head sec`` (a recomputed layer repeats its
  forward, one third of forward + backward); the stage average is ``(L f_layer + f_head) / p``;
* TP, not overlapped: ``l x 4 x 2 (t-1)/t x 2 s b h / B_tp`` (two all-reduces, or RS + AG,
  forward and two backward per layer);
* CP ring attention (Liu et al. 2023, "Ring Attention", arXiv:2310.01889; Megatron-LM's context
  parallelism, ``cp_comm_type=p2p``): each of the ``c-1`` ring steps passes a K and a V block of
  ``s b kv x 2`` bytes, once forward and twice backward (K/V and their gradients), overlapped with
  attention, exposed part only: ``max(0, l x 3 (c-1) x 2 s b kv x 2 / B_cp - l x 6 seq h sec)``.
  This is the course notes' volume, kept on purpose (``parallel_plan.py``: ``ring = layers * 3 *
  (cp - 1) * (2 * s * mbs * m.KV * 2) / bandwidth(tp, cp)``): the whole K and V of the
  micro-batch, a factor ``t`` more than the ``1/t`` share of the KV heads each GPU passes in the
  simulation (:func:`simtrain.costs.attention.cp_kv_bytes`); ``compare`` names the difference
  (:data:`simtrain.analytic.compare.DELIBERATE_DIFFERENCES`);
* PP p2p, half hidden: ``2 s b h 2 / t / B_pp x 0.5`` (activation forward, gradient backward);
* DP (over DP x CP), 80% hidden behind the backward, once per step under ZeRO 0 and 1:
  ``2 (dc-1)/(dc) x 2 psi / B_dp x 0.2`` (gradient reduce-scatter + parameter all-gather); ZeRO
  2 and 3 move more per micro-batch (:func:`simtrain.analytic.ledger.dp_passes`);
* selective recompute repeats the attention core's forward, ``2 seq q`` per token and layer;
* an uneven stage split (``--first-stage-layers``, ``--last-stage-layers``, ``--balance-stages``)
  gives each stage its own layer count; the slowest stage sets the micro-batch time;
* bubble ``(p - 1) t_mb`` for 1F1B; other schedules: their record's bubble
  (:meth:`simtrain.schedules.record.ScheduleRecord.bubble`).

The step splits into the simulator's categories (:data:`simtrain.results.metrics.BREAKDOWN`):
compute ``m x avg``, recompute, imbalance ``m (slow - recompute - avg)``, tp, cp, ep, pp, bubble,
dp. MoE models (:mod:`simtrain.analytic.moe`): ``N`` in ``f_layer`` is the active parameter count
(top-k routed and shared experts), each MoE layer adds its routed experts' grouped-GEMM time at
their shapes beyond that count, each micro-batch adds its exposed EP all-to-all, the model
states and the DP term split into dense parameters over DP x CP and routed experts over the
expert data-parallel group, and the TP term counts the MoE block's collectives. MFU counts
``(L f_layer + f_head) gbs seq``, recompute excluded; HFU adds the recomputed forwards.

Bandwidth rule (the script's ``bandwidth(inner, size)``): a group whose span (inner stride x size,
in the rank order of the layout, innermost first, default tp-cp-ep-dp-pp) fits in one node uses
the node's NVLink bandwidth per GPU; otherwise the scale-out bandwidth per GPU (NIC share, capped
by PCIe). Beyond the script (no effect on a non-blocking fabric such as seed-h100): a group
spanning more than one leaf divides that by the leaf oversubscription, more than one pod also
by the core oversubscription.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simtrain.analytic import ledger, moe
from simtrain.analytic.bandwidth import (cluster_bandwidths, group_bandwidth,  # noqa: F401 (re-exported)
                                        group_spans, per_node)
from simtrain.errors import SpecError
from simtrain.results.metrics import BREAKDOWN, StepMetrics, step_metrics
from simtrain.schedules.registry import REGISTRY
from simtrain.specs.flops import ModelFlops
from simtrain.specs.gpu import GpuSpec
from simtrain.specs.model import ModelSpec
from simtrain.specs.parallel import ParallelSpec
from simtrain.topology.cluster import Cluster
from simtrain.workload.moe_routing import Routing
from simtrain.units import GB

#: Fewest tokens a CP rank may hold (the notes' MIN_CP_CHUNK): smaller ring steps are too short.
MIN_CP_CHUNK = 4096

#: Pipeline schedules with a closed form (their records in :data:`simtrain.schedules.registry.REGISTRY`).
ANALYTIC_SCHEDULES = REGISTRY.closed_form_names()

COMM_KINDS = ("tp", "cp", "ep", "pp", "dp")
TP_HIDDEN, PP_HIDDEN, DP_HIDDEN = 0.0, 0.5, 0.8  # fraction of each kind hidden behind compute


# ---- the model ----------------------------------------------------------------------------------

class AnalyticReport(StepMetrics):
    """The closed-form report: the simulator's step metrics plus the layout it was given and the
    quantities of the notes' ledger."""

    #: `"analytic"`
    model: str
    #: the layout's degrees, batch and sequence (`vpp` is 1 unless the schedule interleaves)
    tp: int
    cp: int
    pp: int
    dp: int
    vpp: int
    mbs: int
    gbs: int
    seq: int
    #: the schedule whose closed form was used
    schedule: str
    #: micro-batches per pipeline
    num_microbatches: int
    #: layers per pipeline stage
    layers_per_stage: int
    #: seconds of one micro-batch's forward and backward on the slowest stage
    microbatch_time_s: float
    #: the notes' memory number: the first stage's peak
    memory_gib: float
    #: fully recomputed layers per stage, one count for all stages (like Megatron-LM's
    #: `--recompute-num-layers`)
    recompute_layers: list[int]


@dataclass(frozen=True)
class _Outcome:
    result: AnalyticReport | None
    reason: str = ""  # why result is None: one line naming the configuration


def _label(model: ModelSpec, par: ParallelSpec) -> str:
    ep = f" ep={par.ep} etp={par.expert_tp}" if par.ep > 1 or par.expert_tp != par.tp else ""
    return (f"{model.name} tp={par.tp} cp={par.cp} pp={par.pp} dp={par.dp}{ep} "
            f"(tp*cp*pp={par.tp * par.cp * par.pp}, {par.world} GPUs, seq={par.seq}, "
            f"gbs={par.gbs}, mbs={par.mbs})")


def _recompute_request(par: ParallelSpec, layers: int) -> int | None:
    """A fixed recompute count when ``par.recompute`` names one (``full`` or N), else None (the
    notes' rule: the smallest count that fits)."""
    if par.recompute == "full":
        return layers
    if par.recompute.isdigit():
        return min(int(par.recompute), layers)
    if par.recompute in ("none", "selective"):
        return 0
    return None  # auto


def _evaluate(model: ModelSpec, cluster: Cluster, par: ParallelSpec, gpu: GpuSpec | None,
              schedule: str | None, min_cp_chunk: int, n_params: float | None,
              routing: Routing = Routing()) -> _Outcome:
    sched = schedule if schedule is not None else par.schedule
    rec = REGISTRY.closed_form(sched)
    gpu = gpu if gpu is not None else cluster.gpu
    t, c, p, d, b = par.tp, par.cp, par.pp, par.dp, par.mbs
    v = par.vpp if rec.takes("vpp") else 1
    what = _label(model, par)
    node = cluster.gpus_per_node

    def fail(why: str) -> _Outcome:
        return _Outcome(None, f"{what}: {why}")

    # ---- the script's validity rules (plus head divisibility, which the notes' cases meet)
    if t > node:
        return fail(f"tp={t} exceeds the {node} GPUs of a node")
    if model.heads % t or model.kv_heads % t:
        return fail(f"tp={t} does not divide the {model.heads} heads / {model.kv_heads} KV heads")
    if not ledger.split_requested(par) and model.layers % (p * v):
        return fail(f"pp*vpp={p * v} does not divide the {model.layers} layers")
    if c > 1 and par.seq // c < min_cp_chunk:
        return fail(f"seq/cp={par.seq // c} tokens per CP rank is below "
                    f"min_cp_chunk={min_cp_chunk}")
    if par.gbs % (d * b):
        return fail(f"gbs={par.gbs} is not divisible by dp*mbs={d * b}")
    if model.is_moe and (model.num_experts % par.ep or par.world % (par.expert_tp * par.ep * p)):
        return fail(f"ep={par.ep} must divide the {model.num_experts} experts and etp*ep*pp="
                    f"{par.expert_tp * par.ep * p} the {par.world} GPUs")
    if not model.is_moe and (par.ep > 1 or par.expert_tp != t):
        return fail(f"ep={par.ep}, etp={par.expert_tp}: expert parallelism needs an MoE model")
    if model.is_moe and n_params is not None:
        raise SpecError(f"{what}: n_params replaces N of dense models only")
    m = par.gbs // (d * b)
    s = par.seq // c
    ranks = ledger.rank_layers(model, par, gpu, sched, v)  # layers per pipeline rank
    share = [n * p / model.layers for n in ranks.layers]  # of an even stage's parameters

    # ---- memory: states (ZeRO: ledger module) and activations of the micro-batches in flight
    n_total = float(model.params_total if n_params is None else n_params)
    usable = gpu.usable_memory_bytes
    psi = n_total / (t * p)
    lay = moe.expert_layout(model, par, n_total) if model.is_moe else None
    states = (ledger.states_bytes(psi, d * c, par.zero) if lay is None
              else moe.model_states_bytes(lay, d * c, par.zero)) * rec.static_copies
    acts = ledger.Activations.of(model, par, s)
    flights = [rec.in_flight(p, i, m, v) for i in range(p)]

    def parts_of(rc: int, i: int) -> tuple[float, float]:
        """(model states, activations) of pipeline rank ``i`` with ``rc`` layers recomputed."""
        return states * share[i], acts.layers(ranks.layers[i], min(rc, ranks.layers[i])) * flights[i]

    def worst(rc: int) -> int:
        return max(range(p), key=lambda i: sum(parts_of(rc, i)))

    top = math.ceil(max(ranks.layers))
    fixed = _recompute_request(par, top)
    tries = range(top + 1) if fixed is None else (fixed,)
    rc = next((r for r in tries if sum(parts_of(r, worst(r))) <= usable), None)
    if rc is None:
        r = top if fixed is None else fixed
        i = worst(r)
        st, ac = parts_of(r, i)
        head = ("no recompute count fits: even with every layer recomputed" if fixed is None
                else f"recompute={par.recompute} does not fit:")
        return fail(f"{head} stage {i} needs {(st + ac) / GB:.1f} GB (model states {st / GB:.1f} GB under "
                    f"ZeRO-{par.zero} + activations {ac / GB:.1f} GB, {min(r, ranks.layers[i]):g}/"
                    f"{ranks.layers[i]:g} layers recomputed), more than the {usable / GB:.1f} GB usable; "
                    f"raise tp, pp or cp, the ZeRO stage, or recompute more")

    # ---- time of one micro-batch on the slowest stage
    h = model.hidden
    # active parameters (top-k: moe module docstring), or n_params; no MTP modules
    flops = ModelFlops.of(model, par.seq, None if model.is_moe else n_total, mtp=False)
    f_layer, f_head = flops.per_token_layer, flops.head_per_token
    f_sel = ledger.selective_flops_per_token(model, par)
    sec = s * b / t / gpu.effective_flops
    # the routed experts' grouped GEMMs at their shapes, per MoE layer (moe module docstring)
    x_f, x_all = moe.expert_gemm_excess(model, par, gpu) if lay is not None else (0.0, 0.0)
    moe_share = model.moe_layers / model.layers  # of a stage's layers (0 for a dense model)
    avg = (model.layers * f_layer + f_head) / p * sec + model.moe_layers * x_all / p

    def redo(i: int) -> float:
        """Recompute seconds of rank ``i`` per micro-batch: full layers, then selective."""
        full = min(rc, ranks.layers[i])
        return (full * f_layer / 3 + ranks.layers[i] * f_sel) * sec + full * moe_share * x_f

    work = [ranks.layers[i] * f_layer * sec + ranks.layers[i] * moe_share * x_all + redo(i)
            + (f_head * sec if i in ranks.head_ranks else 0.0) for i in range(p)]
    slowest = max(range(p), key=lambda i: work[i])
    layers = round(ranks.layers[slowest])
    recompute, slow = redo(slowest), work[slowest]
    spans = group_spans(par)
    if lay is not None:
        spans |= {"ep": lay.ep_span, "edp": lay.edp_span, "etp": lay.etp_span}

    def bw(kind: str) -> float:
        out = group_bandwidth(cluster, spans[kind])
        if out <= 0:
            raise SpecError(f"{what}: the {kind} group spans {spans[kind]} ranks, beyond one node, "
                            f"but topology {cluster.name} has no scale-out network (no NICs)")
        return out

    act_bytes = s * b * h * 2
    moe_l = moe.moe_layers_on_last_stage(model, layers)
    loads = moe.stage_load_factors(model, par, routing, moe_l) if lay is not None else []
    slow += moe.skew_time(model, loads, max(0, rc - (layers - moe_l)), sec)  # the busiest EP rank
    tp_n = moe.tp_allreduces(model, par, layers, moe_l)  # 4 per dense layer
    tp_c = tp_n * 2 * (t - 1) / t * act_bytes / bw("tp") if t > 1 else 0.0
    tp_c += moe.expert_tp_time(model, par, loads, bw("etp")) if lay is not None else 0.0
    ep_c = moe.all_to_all_time(model, par, moe_l, bw("ep"), loads, per_node(lay.ep_span, par.ep, cluster)) \
        if lay is not None else 0.0
    ring = layers * 3 * (c - 1) * (2 * s * b * model.kv_width * 2) / bw("cp") if c > 1 else 0.0
    attention = layers * 6 * par.seq * model.q_width * sec
    cp_c = max(0.0, ring - attention)
    # interleaving crosses v times as many stage boundaries (Narayanan et al. 2021, 2.2.2)
    pp_all = v * 2 * act_bytes / t / bw("pp") if p > 1 else 0.0
    pp_c = pp_all * (1 - PP_HIDDEN)
    t_mb = slow + tp_c + cp_c + ep_c + pp_c
    dpc = d * c
    dense_psi = (psi if lay is None else lay.dense_params) * max(share)
    passes = ledger.dp_passes(par.zero, m)  # 2 (n-1)/n of the parameters under ZeRO 0 and 1
    dp_all = passes * (dpc - 1) / dpc * 2 * dense_psi / bw("dpcp") if dpc > 1 else 0.0
    if lay is not None and lay.edp > 1:
        dp_all += moe.expert_reduction_bytes(lay) * passes / 2 * max(share) / bw("edp")
    dp_c = dp_all * (1 - DP_HIDDEN)
    bubble = rec.bubble(p, m, t_mb, v)
    if bubble is None:
        return fail(f"schedule {sched} has no closed form for pp={p}, {m} micro-batches"
                    + (f", vpp={v}" if v > 1 else "") + f" (it needs {rec.closed_form.condition})")

    parts = {"compute": m * avg, "recompute": m * recompute,
             "imbalance": m * max(0.0, slow - recompute - avg),  # exactly 0 at pp = 1
             "tp": m * tp_c, "cp": m * cp_c, "ep": m * ep_c, "pp": m * pp_c, "bubble": bubble,
             "dp": dp_c}
    breakdown = {k: parts[k] for k in BREAKDOWN}
    step = math.fsum(breakdown.values())
    tokens = par.gbs * par.seq
    model_flops = flops.per_token_by_layer * tokens
    metrics = step_metrics(
        step_s=step, tokens=tokens, num_gpus=par.world, gpu=gpu,
        model_flops=model_flops, hardware_flops=model_flops + tokens * (
            sum(min(rc, n) for n in ranks.layers) * f_layer / 3 + model.layers * f_sel),
        breakdown=breakdown, exposed={k: breakdown[k] for k in COMM_KINDS},
        overlapped={"tp": 0.0, "cp": m * (ring - cp_c), "ep": 0.0, "pp": m * (pp_all - pp_c),
                    "dp": dp_all - dp_c},
        stage_work=[m * w for w in work], mean_work=m * math.fsum(work) / p,
        peak_bytes=[sum(parts_of(rc, i)) for i in range(p)])
    return _Outcome(AnalyticReport(
        **metrics, model="analytic", tp=t, cp=c, pp=p, dp=d, vpp=v, mbs=b, gbs=par.gbs, seq=par.seq,
        schedule=sched, num_microbatches=m, layers_per_stage=layers, microbatch_time_s=t_mb,
        memory_gib=metrics["peak_memory_gib"][0],
        recompute_layers=[int(min(rc, n)) for n in ranks.layers]))


def estimate(model: ModelSpec, cluster: Cluster, par: ParallelSpec, *, gpu: GpuSpec | None = None,
             schedule: str | None = None, min_cp_chunk: int = MIN_CP_CHUNK,
             n_params: float | None = None, routing: Routing = Routing()) -> AnalyticReport | None:
    """The closed-form report of one step (course notes, parallel_plan.py), or None when the
    layout does not fit in memory or breaks the script's rules (tp within a node, pp divides the
    layers, at least ``min_cp_chunk`` tokens per CP rank, gbs divisible by dp*mbs; for an MoE
    model ep divides the experts and etp*ep*pp the GPUs).

    ``gpu`` defaults to the cluster's GPU; ``schedule`` to ``par.schedule`` (one of
    :data:`ANALYTIC_SCHEDULES`, else :class:`SpecError`). ``n_params`` replaces the model's
    ``params_total`` as ``N`` (the notes use the published 70.6e9 for Llama 3 70B where the
    exact count is 70.55e9). ``routing`` is an MoE model's token routing (its skew makes the
    busiest EP rank's experts the slowest stage's: :mod:`simtrain.analytic.moe`). The recompute
    count is the smallest that fits, unless
    ``par.recompute`` is ``full`` or a layer count. ``par.zero``, ``par.sp``, ``par.attention``, the
    recompute policy and the stage split are read (:mod:`simtrain.analytic.ledger`); the
    cluster's node count is not checked (see :func:`analytic_report`).

    The report (:class:`AnalyticReport`) has the simulator's step metrics
    (:class:`~simtrain.results.metrics.StepMetrics`: ``step_time_s``, ``mfu``, ``breakdown_s`` over the
    nine categories summing to the step time, ``peak_memory_gib`` per stage, ...), plus
    ``memory_gib`` (the notes' number: the first stage), ``recompute_layers`` and
    ``"model": "analytic"``.

    >>> from simtrain.specs.model import load_model
    >>> from simtrain.topology.cluster import load_topology
    >>> par = ParallelSpec(tp=4, cp=2, pp=2, dp=4, seq=8192, gbs=512, recompute="auto")
    >>> est = estimate(load_model("llama3-70b"), load_topology("seed-h100"), par, n_params=70.6e9)
    >>> round(est["mfu"], 3), round(est["memory_gib"])  # the notes' best: MFU 53.7%, 66 GiB
    (0.537, 66)
    """
    return _evaluate(model, cluster, par, gpu, schedule, min_cp_chunk, n_params, routing).result


def analytic_report(model: ModelSpec, cluster: Cluster, par: ParallelSpec,
                    schedule: str | None = None, *, gpu: GpuSpec | None = None,
                    min_cp_chunk: int = MIN_CP_CHUNK, n_params: float | None = None,
                    routing: Routing = Routing()) -> AnalyticReport:
    """:func:`estimate`, raising a one-line :class:`SpecError` naming the configuration and the
    reason when it does not fit or is invalid, or when the layout needs more GPUs than the
    cluster has."""
    if par.world > cluster.num_gpus:
        raise SpecError(f"{_label(model, par)}: needs {par.world} GPUs, topology {cluster.name} "
                        f"has {cluster.num_gpus}")
    out = _evaluate(model, cluster, par, gpu, schedule, min_cp_chunk, n_params, routing)
    if out.result is None:
        raise SpecError(out.reason)
    return out.result
