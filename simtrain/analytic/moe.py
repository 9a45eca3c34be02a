"""The closed form's mixture-of-experts terms: expert compute, all-to-all, expert data parallelism.

Notation of :mod:`simtrain.analytic.model`, plus ``e`` the EP degree, ``et`` the expert TP
degree, ``edp = world / (et e p)`` the expert data-parallel degree, ``k`` the routed experts per
token (``top_k``), ``n`` the tokens entering one rank's MoE block per micro-batch (``s b / t``
with sequence parallelism and ``et = 1``, ``s b`` when the block gathers them over ``et > 1``
ranks: :func:`simtrain.costs.moe_tokens`).

* Compute at top-k (Fedus et al. 2021, "Switch Transformers", arXiv:2101.03961, section 2;
  Lepikhin et al. 2020, "GShard", arXiv:2006.16668): a token runs only its ``k`` routed experts
  and the shared ones, so the FLOPs per token use the active parameters
  (:attr:`~simtrain.specs.model.ModelSpec.params_active`): ``6 N_active`` instead of ``6 N``.
  Uniform routing spreads them evenly over the EP ranks.
* All-to-all (Rajbhandari et al. 2022, "DeepSpeed-MoE", arXiv:2201.05596, section 5; Megatron-LM's
  all-to-all token dispatcher, ``megatron/core/transformer/moe/README.md``): dispatch and combine
  each move ``n k h x 2`` bytes per rank, of which ``(e-1)/e`` leave the rank; the backward
  repeats both, so per MoE layer and micro-batch ``4 (e-1)/e x 2 n k h / B_ep``, exposed (the
  experts wait for their tokens).
* Expert data parallelism (Megatron-LM's MoE parallel folding, Liu et al. 2025, arXiv:2504.14960):
  the routed experts' ``psi_e = N_experts / (et e p)`` parameters per rank are sharded and
  reduced over the ``edp`` group, the rest (``psi_d = (N - N_experts) / (t p)``) over DP x CP;
  ZeRO-1 shards each optimizer state over its own group (Rajbhandari et al. 2020).
* TP: the attention block keeps its two collectives forward and backward; the MoE block has
  none with ``et = 1`` (tokens stay split) and one forward (all-gather) and one backward
  (reduce-scatter) with ``et > 1``, half a dense MLP's.
"""

from __future__ import annotations

from dataclasses import dataclass

from simtrain import costs
from simtrain.costs.shape import ACT_BYTES
from simtrain.specs.model import ModelSpec
from simtrain.specs.order import parse_order
from simtrain.specs.parallel import ParallelSpec


@dataclass(frozen=True)
class ExpertLayout:
    """Where the routed experts of a layout live: parameters per rank and group spans."""

    dense_params: float  # psi_d: parameters per rank outside the routed experts
    expert_params: float  # psi_e: routed-expert parameters per rank
    edp: int  # expert data-parallel degree
    ep_span: int  # ranks the EP group spans in the rank order
    edp_span: int  # ranks the expert data-parallel group spans


def expert_layout(model: ModelSpec, par: ParallelSpec, n_total: float) -> ExpertLayout:
    """Parameters per rank and EP / expert-DP spans of ``par`` (``n_total`` parameters in all).

    The expert grid regroups the ranks as ``et x e x edp x pp`` in the order of ``par.order``
    (:mod:`simtrain.topology.mesh`): a dimension's span is its stride times its size.
    """
    experts = float(model.moe_layers * model.num_experts * model.expert_params())
    etp, p = par.expert_tp, par.pp
    sizes = {"tp": etp, "cp": 1, "ep": par.ep, "dp": par.edp, "pp": p}
    span, stride = {}, 1
    for dim in parse_order(par.order):
        span[dim] = stride * sizes[dim]
        stride *= sizes[dim]
    return ExpertLayout(dense_params=(n_total - experts) / (par.tp * p),
                        expert_params=experts / (etp * par.ep * p), edp=par.edp,
                        ep_span=span["ep"], edp_span=span["dp"])


def moe_layers_on_last_stage(model: ModelSpec, layers_per_stage: int) -> int:
    """MoE layers of the last pipeline stage (the dense layers come first)."""
    return min(layers_per_stage, model.moe_layers)


def all_to_all_bytes(model: ModelSpec, par: ParallelSpec) -> float:
    """Bytes one rank sends off-rank in one dispatch (= one combine) all-to-all of one micro-batch
    at uniform routing: ``(e-1)/e x 2 n k h``."""
    n = costs.moe_tokens(costs.Shape.of(par), par.expert_tp)
    return (par.ep - 1) / par.ep * ACT_BYTES * n * model.top_k * model.hidden


def all_to_all_time(model: ModelSpec, par: ParallelSpec, moe_layers: int, bandwidth: float) -> float:
    """Seconds of all-to-all per micro-batch on a stage with ``moe_layers`` MoE layers: dispatch
    and combine, forward and backward."""
    if par.ep == 1 or not moe_layers:
        return 0.0
    return moe_layers * 4 * all_to_all_bytes(model, par) / bandwidth


def tp_allreduces(model: ModelSpec, par: ParallelSpec, layers: int, moe_layers: int) -> float:
    """All-reduce equivalents (an all-reduce, or a reduce-scatter and an all-gather) of TP per
    micro-batch on a stage of ``layers`` layers, ``moe_layers`` of them MoE (none for a dense
    model): 4 per dense layer (attention and MLP, forward and backward; Narayanan et al. 2021,
    section 3.2), 2 per MoE layer, 3 with expert TP > 1."""
    moe_each = 3 if par.expert_tp > 1 else 2
    return 4 * (layers - moe_layers) + moe_each * moe_layers


def model_states_bytes(lay: ExpertLayout, dpcp: int) -> float:
    """Weights and gradients (bf16) of every parameter on the rank, fp32 master weights and Adam
    moments sharded over each parameter's group (ZeRO-1): ``4 (psi_d + psi_e) + 12 psi_d / (d c)
    + 12 psi_e / edp``."""
    return (4 * (lay.dense_params + lay.expert_params) + 12 * lay.dense_params / dpcp
            + 12 * lay.expert_params / lay.edp)


def expert_reduction_bytes(lay: ExpertLayout) -> float:
    """Bytes one rank moves to reduce-scatter the routed experts' gradients and all-gather their
    parameters over the expert data-parallel group: ``2 (edp-1)/edp x 2 psi_e``."""
    if lay.edp == 1:
        return 0.0
    return 2 * (lay.edp - 1) / lay.edp * 2 * lay.expert_params
