"""The closed form's mixture-of-experts terms: expert compute, all-to-all, expert data parallelism.

Notation of :mod:`simtrain.analytic.model`, plus ``e`` the EP degree, ``et`` the expert TP
degree, ``edp = world / (et e p)`` the expert data-parallel degree, ``k`` the routed experts per
token (``top_k``), ``n`` the tokens entering one rank's MoE block per micro-batch (``s b / t``
with sequence parallelism: :func:`simtrain.costs.moe_tokens`), ``lf`` a layer's busiest EP rank's
load over the mean (:func:`simtrain.workload.moe_routing.load_factors`; 1 at uniform routing).

* Compute at top-k (Fedus et al. 2021, "Switch Transformers", arXiv:2101.03961, section 2;
  Lepikhin et al. 2020, "GShard", arXiv:2006.16668): a token runs only its ``k`` routed experts
  and the shared ones, so the FLOPs per token use the active parameters
  (:attr:`~simtrain.specs.model.ModelSpec.params_active`): ``6 N_active`` instead of ``6 N``.
  Uniform routing spreads them evenly over the EP ranks.
* All-to-all (Rajbhandari et al. 2022, "DeepSpeed-MoE", arXiv:2201.05596, section 5; Megatron-LM's
  all-to-all token dispatcher, ``megatron/core/transformer/moe/token_dispatcher.py``,
  ``MoEAlltoAllTokenDispatcher``): dispatch and combine each move ``n k h x 2`` bytes per rank
  (the sequence shard, before any expert-TP gather), of which ``(e-1)/e`` leave the rank; the
  backward repeats both, so per MoE layer and micro-batch ``4 (e-1)/e x 2 n k h lf / B_ep``
  (the busiest rank's volume), exposed (the experts wait for their tokens). With DeepEP's
  dispatcher ``k`` becomes the rows per token of :func:`simtrain.costs.dispatch.a2a_rows` (one
  copy per destination node across nodes); both dispatchers carry bf16 values.
* The routed experts' grouped GEMMs at their shapes: the ``6 N_active`` count prices every
  expert's GEMM at the large-GEMM rate, which does not depend on EP; but EP decides how many
  experts a rank holds (``E / e``) and how many rows each gets (``e n k / E`` on average), and
  a grouped GEMM of many experts with few rows each runs far below that rate (each expert's GEMM
  is its own kernel, four at a time, issued one by one by the host; :mod:`simtrain.costs.timing`).
  Each MoE layer therefore adds, per micro-batch, the kernel model's time of its routed-expert
  GEMMs (forward, input and weight gradients, at uniform routing) over their FLOPs at ``P e``
  (:func:`expert_gemm_excess`), counted as compute, and a recomputed layer its forward's excess
  again; with a flat GEMM efficiency the grouped GEMM is one kernel and the excess small (its
  launch, and the experts' weights read where that takes longer than their math).
* Routing skew: each EP rank computes its own tokens, so the FLOPs (and MFU, HFU) are those of
  uniform routing, but the combine waits for the busiest rank: each MoE layer of the slowest
  stage adds ``(lf - 1) 6 k psi_x sec`` per micro-batch (``psi_x`` one routed expert's
  parameters; a third more for a recomputed layer), charged as imbalance.
* Expert data parallelism (Megatron-LM's MoE parallel folding, Liu et al. 2025, arXiv:2504.14960):
  the routed experts' ``psi_e = N_experts / (et e p)`` parameters per rank are sharded and
  reduced over the ``edp`` group, the rest (``psi_d = (N - N_experts) / (t p)``) over DP x CP;
  ZeRO-1 shards each optimizer state over its own group (Rajbhandari et al. 2020).
* TP: the attention block keeps its two collectives forward and backward; the shared experts (if
  any) have a dense MLP's (Megatron-LM's ``moe/shared_experts.py``); the routed experts have none
  with ``et = 1`` (tokens stay split), and with ``et > 1`` an all-gather of the received rows
  before them and a reduce-scatter after, forward and backward: per MoE layer and micro-batch
  ``2 x 2 (et-1)/et x et n k h x 2 / B_etp``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from simtrain import costs
from simtrain.costs import dispatch
from simtrain.costs.kernels import Gemm
from simtrain.specs.gpu import GpuSpec
from simtrain.specs.model import ModelSpec
from simtrain.specs.order import dimension_spans
from simtrain.specs.parallel import ParallelSpec
from simtrain.workload.moe_routing import Routing, load_factors


@dataclass(frozen=True)
class ExpertLayout:
    """Where the routed experts of a layout live: parameters per rank and group spans."""

    dense_params: float  # psi_d: parameters per rank outside the routed experts
    expert_params: float  # psi_e: routed-expert parameters per rank
    edp: int  # expert data-parallel degree
    ep_span: int  # ranks the EP group spans in the rank order
    edp_span: int  # ranks the expert data-parallel group spans
    etp_span: int = 1  # ranks the expert-TP group spans


def expert_layout(model: ModelSpec, par: ParallelSpec, n_total: float) -> ExpertLayout:
    """Parameters per rank and EP / expert-DP spans of ``par`` (``n_total`` parameters in all).

    The expert grid regroups the ranks as ``et x e x edp x pp`` in the order of ``par.order``
    (:mod:`simtrain.topology.mesh`): a dimension's span is its stride times its size
    (:func:`~simtrain.specs.order.dimension_spans`).
    """
    experts = float(model.moe_layers * model.num_experts * model.expert_params())
    etp, p = par.expert_tp, par.pp
    span = dimension_spans(par.order, {"tp": etp, "cp": 1, "ep": par.ep, "dp": par.edp, "pp": p})
    return ExpertLayout(dense_params=(n_total - experts) / (par.tp * p),
                        expert_params=experts / (etp * par.ep * p), edp=par.edp,
                        ep_span=span["ep"], edp_span=span["dp"], etp_span=span["tp"])


def moe_layers_on_last_stage(model: ModelSpec, layers_per_stage: int) -> int:
    """MoE layers of the last pipeline stage (the dense layers come first)."""
    return min(layers_per_stage, model.moe_layers)


def all_to_all_bytes(model: ModelSpec, par: ParallelSpec, ep_per_node: int) -> float:
    """Bytes one rank sends off-rank in one all-to-all of one micro-batch at uniform routing:
    ``(e-1)/e`` of the buffer of :func:`simtrain.costs.dispatch.a2a_bytes` (``2 n k h`` for
    Megatron-LM's dispatcher) on an EP group with ``ep_per_node`` ranks per node."""
    rows = dispatch.a2a_rows(model, par.moe_dispatcher, par.ep, ep_per_node)
    return (par.ep - 1) / par.ep * dispatch.a2a_bytes(model, costs.Shape.of(par), rows)


def stage_load_factors(model: ModelSpec, par: ParallelSpec, routing: Routing, moe_layers: int) -> list[float]:
    """The busiest EP rank's load over the mean in each of the last ``moe_layers`` MoE layers
    (those of the last pipeline stage: the dense layers come first)."""
    if not moe_layers:
        return []
    return load_factors(model.num_experts, par.ep, model.moe_layers, routing)[-moe_layers:]


def all_to_all_time(model: ModelSpec, par: ParallelSpec, moe_layers: int, bandwidth: float,
                    loads: list[float] | None = None, ep_per_node: int = 1) -> float:
    """Seconds of all-to-all per micro-batch on a stage with ``moe_layers`` MoE layers: dispatch
    and combine, forward and backward (two towards the experts, two back), each layer's at its
    busiest rank's volume (``loads``, default uniform)."""
    if par.ep == 1 or not moe_layers:
        return 0.0
    volume = sum(loads) if loads is not None else moe_layers
    return volume * 4 * all_to_all_bytes(model, par, ep_per_node) / bandwidth


def expert_gemm_excess(model: ModelSpec, par: ParallelSpec, gpu: GpuSpec) -> tuple[float, float]:
    """Seconds per MoE layer and micro-batch that the routed experts' GEMMs take in the kernel
    model (:class:`simtrain.costs.timing.KernelTimer` on ``gpu``, uniform routing) beyond their
    FLOPs at the GPU's sustained rate: (the forward's, the forward's and backward's). The GEMMs
    are bf16 ones, as everywhere in the closed form (which does not model FP8)."""
    return _expert_gemm_excess(model, replace(costs.Shape.of(par), fp8=False), par.expert_tp, par.ep, gpu)


@lru_cache(maxsize=1024)
def _expert_gemm_excess(model: ModelSpec, shape: costs.Shape, etp: int, ep: int, gpu: GpuSpec) -> tuple[float, float]:
    timer = costs.KernelTimer(gpu)
    excess = {}
    for kind in ("F", "I", "W"):
        gemms = [k for k in costs.moe_costs(model, shape, kind, etp, ep).experts.kernels
                 if isinstance(k, Gemm) and k.name.startswith("moe.expert")]
        excess[kind] = sum(timer.kernel_time(g) - g.flops / gpu.effective_flops for g in gemms)
    return excess["F"], excess["F"] + excess["I"] + excess["W"]


def skew_time(model: ModelSpec, loads: list[float], recomputed: int, sec: float) -> float:
    """Seconds per micro-batch the busiest EP rank's routed experts add over the mean on a stage
    whose MoE layers have busiest-rank ``loads`` (the first ``recomputed`` of them recomputed):
    ``(lf - 1) 6 k psi_x sec`` per layer, a third more when recomputed."""
    per_layer = 6 * model.top_k * model.expert_params() * sec
    return sum((lf - 1) * per_layer * (4 / 3 if i < recomputed else 1.0) for i, lf in enumerate(loads))


def tp_allreduces(model: ModelSpec, par: ParallelSpec, layers: int, moe_layers: int) -> float:
    """All-reduce equivalents (an all-reduce, or a reduce-scatter and an all-gather) of TP per
    micro-batch on a stage of ``layers`` layers, ``moe_layers`` of them MoE (none for a dense
    model): 4 per dense layer (attention and MLP, forward and backward; Narayanan et al. 2021,
    section 3.2), per MoE layer 2 (attention) and 2 more with shared experts; the expert-TP
    collectives are :func:`expert_tp_time`."""
    moe_each = 4 if model.shared_experts else 2
    return 4 * (layers - moe_layers) + moe_each * moe_layers


def expert_tp_time(model: ModelSpec, par: ParallelSpec, loads: list[float], bandwidth: float) -> float:
    """Seconds per micro-batch of the expert-TP all-gathers and reduce-scatters around the routed
    experts of a stage whose MoE layers have busiest-rank ``loads``: forward and backward each
    ``2 (et-1)/et x et n k h x 2`` bytes (Megatron-LM's ``MoEAlltoAllTokenDispatcher``)."""
    shape = costs.Shape.of(par)
    et = costs.moe_etp_gather(shape, par.expert_tp)
    if et == 1 or not loads:
        return 0.0
    per_layer = 2 * 2 * (et - 1) / et * costs.moe_etp_bytes(model, shape, par.expert_tp)
    return sum(loads) * per_layer / bandwidth


def model_states_bytes(lay: ExpertLayout, dpcp: int, zero: int = 1) -> float:
    """Weights and gradients (bf16) of every parameter on the rank, fp32 master weights and Adam
    moments, each parameter's sharded over its own group as ZeRO ``zero`` shards them
    (:func:`simtrain.analytic.ledger.states_bytes`); ZeRO-1: ``4 (psi_d + psi_e) + 12 psi_d / (d c)
    + 12 psi_e / edp``."""
    from simtrain.analytic.ledger import states_bytes

    return states_bytes(lay.dense_params, dpcp, zero) + states_bytes(lay.expert_params, lay.edp, zero)


def expert_reduction_bytes(lay: ExpertLayout) -> float:
    """Bytes one rank moves to reduce-scatter the routed experts' gradients and all-gather their
    parameters over the expert data-parallel group: ``2 (edp-1)/edp x 2 psi_e``."""
    if lay.edp == 1:
        return 0.0
    return 2 * (lay.edp - 1) / lay.edp * 2 * lay.expert_params
