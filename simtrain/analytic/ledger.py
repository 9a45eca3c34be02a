"""The closed form's memory ledger and stage split: ZeRO, sequence parallelism, recompute, layers.

What :mod:`simtrain.analytic.model` reads from the layout beyond the degrees and the batch:

* **ZeRO** (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
  Parameter Models", section 5.1-5.3 and figure 1): with mixed precision and Adam a parameter
  costs 2 bytes of bf16 weight, 2 of bf16 gradient and ``K = 12`` of fp32 master weight and
  moments (the course notes' ledger). Stage 1 (``P_os``) shards the 12 over the data-parallel
  ranks, stage 2 (``P_os+g``) also the gradient, stage 3 (``P_os+g+p``) also the weight:
  ``16 psi``, ``4 psi + 12 psi / n``, ``2 psi + 14 psi / n``, ``16 psi / n``.
* **ZeRO's communication** per step (section 7.2): stages 0 and 1 reduce the gradients once per
  step and (stage 1) gather the updated parameters, ``2 (n-1)/n`` of the parameter bytes; stage
  2 reduce-scatters every micro-batch's gradients (DeepSpeed's and FSDP's reduce per backward)
  and gathers the parameters once; stage 3 also gathers each parameter before its forward and
  its backward of every micro-batch, ``3 (n-1)/n`` per micro-batch (the paper's 1.5x of
  data parallelism per pass).
* **Activations** per layer and micro-batch (Korthikanti et al. 2022, "Reducing Activation
  Recomputation in Large Transformer Models", table 2): ``34 s b h / t`` bytes with sequence
  parallelism (or ``t = 1``), ``s b h (10 + 24 / t)`` without; the unfused (eager) attention
  core adds its scores, softmax and dropout, ``5 a s^2 b / t`` (``2 a s^2 b / t`` without
  dropout), which selective recompute does not store; a fully recomputed layer keeps its input,
  ``2 s b h / t`` with sequence parallelism, ``2 s b h`` without. These are the simulation's own
  terms, read from :func:`simtrain.costs.layer_activation_bytes` (one home for both).
* **Selective recompute's time** (Korthikanti et al. 2022, section 4.2): the attention core's
  forward runs again before its backward, ``2 seq q`` FLOPs per token and layer for causal
  attention (a third of the ``6 seq q`` the closed form counts for forward and backward). Other
  ``--recompute-modules`` add their forward, 2 FLOPs per weight and token: ``mlp`` the dense MLP,
  ``moe`` the router, ``top_k`` routed experts and the shared experts, ``shared_experts`` these
  alone (averaged over the layers that have them); their activations are
  :func:`simtrain.costs.layer_activation_bytes`'s, the MoE layer's for an MoE model.
* **Stage split**: the layers of each model chunk are the simulator's
  (:func:`simtrain.workload.stages.split_layers`: ``--first-stage-layers``,
  ``--last-stage-layers``, ``--balance-stages``, ``--account-for-embedding/loss-in-pipeline-split``),
  gathered per pipeline rank by the schedule's stage-to-rank map.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simtrain.costs.shape import Shape
from simtrain.costs.sizes import layer_activation_bytes, static_bytes
from simtrain.schedules.registry import REGISTRY
from simtrain.settings import lookup
from simtrain.specs.gpu import GpuSpec
from simtrain.specs.model import ModelSpec
from simtrain.specs.parallel import ParallelSpec

#: Bytes per parameter of a gradient in the notes' ledger: bf16 (with the bf16 weight and the fp32
#: master weight and Adam moments of :func:`simtrain.costs.sizes.static_bytes`, 16 bytes in all:
#: Rajbhandari et al. 2020, section 3.1, K = 12).
GRAD_BYTES = 2


def states_bytes(params: float, shard: int, zero: int) -> float:
    """Bytes of weights, gradients and optimizer state of ``params`` parameters under ZeRO stage
    ``zero`` sharded over ``shard`` ranks (module docstring).

    >>> [states_bytes(1.0, 4, z) for z in range(4)]
    [16.0, 7.0, 5.5, 4.0]
    """
    return static_bytes(params, zero, shard, grad_bytes=GRAD_BYTES)


def dp_passes(zero: int, microbatches: int) -> float:
    """How many times ``(n-1)/n`` of the bf16 parameter bytes each rank moves over the
    data-parallel group per step under ZeRO ``zero`` (module docstring): 2 for stages 0 and 1,
    ``m + 1`` for stage 2, ``3 m`` for stage 3.

    >>> [dp_passes(z, 4) for z in range(4)]
    [2.0, 2.0, 5.0, 12.0]
    """
    if zero <= 1:
        return 2.0
    if zero == 2:
        return microbatches + 1.0
    return 3.0 * microbatches


@dataclass(frozen=True)
class Activations:
    """Activation bytes of one layer and micro-batch on one rank (module docstring)."""

    kept: float  # a layer that is not fully recomputed
    recomputed: float  # a fully recomputed layer: its input only

    @classmethod
    def of(cls, model: ModelSpec, par: ParallelSpec, tokens: int) -> "Activations":
        """For ``tokens`` tokens per rank (``seq / cp``) of ``par``'s micro-batch: the
        simulation's :func:`~simtrain.costs.layer_activation_bytes` of an MoE layer for an MoE
        model (the eager core's scores over the whole sequence: eager attention runs at CP 1)."""
        b = par.mbs
        shape = Shape(tokens=tokens * b, seq=par.seq, tp=par.tp, sp=par.sequence_parallel, mbs=b,
                      attention=par.attention)
        return cls(layer_activation_bytes(model, shape, False, par.recomputed_modules, model.is_moe, par.expert_tp),
                   layer_activation_bytes(model, shape, True))

    def layers(self, count: float, recomputed: float) -> float:
        """Bytes of ``count`` layers of which ``recomputed`` keep only their input."""
        return (count - recomputed) * self.kept + recomputed * self.recomputed


def selective_flops_per_token(model: ModelSpec, par: ParallelSpec) -> float:
    """FLOPs per token and layer that selective recompute adds: the causal attention core's
    forward, ``2 seq q``, and the other modules' forwards (module docstring); 0 for other policies."""
    mods = par.recomputed_modules
    moe_share = model.moe_layers / model.layers
    weights = {"mlp": (1 - moe_share) * model.dense_mlp_params(),
               "moe": moe_share * (model.top_k * model.expert_params() + model.shared_expert_params()
                                   + model.router_params()),
               "shared_experts": moe_share * model.shared_expert_params() if "moe" not in mods else 0.0}
    core = 2.0 * par.seq * model.q_width if "core_attn" in mods else 0.0
    return core + sum(2.0 * w for name, w in weights.items() if name in mods)


@dataclass(frozen=True)
class RankLayers:
    """Layers per pipeline rank, in layers of one plain stage (a rank holding two copies of
    its stages, as DualPipe does, counts each layer once), and the ranks holding the LM head."""

    layers: tuple[float, ...]
    head_ranks: frozenset[int]

    @property
    def uneven(self) -> bool:
        return len(set(self.layers)) > 1


def split_requested(par: ParallelSpec) -> bool:
    """Whether the layout asks for a stage split of its own (first/last chunk sizes, balance, the
    embedding or the loss accounted for)."""
    return par.pp > 1 and (par.first_stage_layers is not None or par.last_stage_layers is not None
                           or par.balance_stages or par.account_for_embedding_in_pipeline_split
                           or par.account_for_loss_in_pipeline_split)


def rank_layers(model: ModelSpec, par: ParallelSpec, gpu: GpuSpec, schedule: str, vpp: int) -> RankLayers:
    """The layers each pipeline rank holds: an even ``L / p`` with the LM head on the last rank,
    or, when the layout asks for a split (:func:`split_requested`), the simulator's chunk sizes
    summed over the chunks the schedule puts on each rank."""
    p = par.pp
    if not split_requested(par):
        return RankLayers((model.layers / p,) * p, frozenset({p - 1}))
    from simtrain.workload.stages import split_layers

    rec = REGISTRY.record(schedule)
    small = REGISTRY.generate(schedule, p, 2 * p, vpp=vpp)  # the stage-to-rank map of the schedule
    chunks = split_layers(model, par, gpu, small.chain_length)
    per_rank = [0.0] * p
    heads = set()
    for stage, rank in enumerate(small.stage_to_rank):
        chunk = small.chunk_of_stage(stage)
        per_rank[rank] += len(chunks[chunk])
        if chunk == len(chunks) - 1:
            heads.add(rank)
    return RankLayers(tuple(n / rec.static_copies for n in per_rank), frozenset(heads))


#: Settings that change a simulated step but not the closed form, with what it assumes instead.
NOT_MODELLED = {
    "network": "NCCL ring bandwidths per group",
    "collective_algo": "ring bandwidths",
    "grad_dtype": "bf16 gradients",
    "overlap_grad_reduce": "80% of the DP reduction hidden",
    "overlap_param_gather": "the parameter gathers 80% hidden with the DP reduction",
    "overlap_p2p_comm": "half of each pipeline transfer hidden",
    "tp_backward_overlap": "TP collectives exposed",
    "tp_comm_overlap": "TP collectives exposed",
    "overlap_moe_expert_parallel_comm": "EP all-to-alls exposed, the plain 1F1B order",
    "moe_shared_expert_overlap": "the shared experts' compute added to the rest, EP all-to-alls exposed",
    "fp8": "bf16 GEMMs",
    "steps": "one step",
    "optimizer_sync": "no step-end synchronisation",
    "comm_interference": "no slowdown of compute by communication",
    "calibration": "the GPU's flat efficiency",
    "straggler": "equal GPUs",
    "throttle": "equal GPUs",
    "slow_node": "equal GPUs",
    "node_gpu": "one GPU type",
    "degrade_link": "the topology's links",
    "fail_link": "the topology's links",
    "jitter": "no noise",
    "slow_steps": "no noise",
    "mtp_layers": "no multi-token prediction modules",
}


def not_modelled(settings: Mapping[str, Any], defaults: Mapping[str, Any]) -> list[str]:
    """The names of the settings of ``settings`` (a scenario's ``config``, :func:`simtrain.scenario.scenario_config`)
    that differ from ``defaults`` and that the closed form does not model (:data:`NOT_MODELLED` says
    what it assumes instead; each read by :func:`simtrain.settings.lookup`, so a misspelt name raises).

    >>> not_modelled({"fp8": True, "tp": 4, "jitter": 0.0}, {"fp8": False, "tp": 8, "jitter": 0.0})
    ['fp8']
    """
    return [name for name in NOT_MODELLED
            if lookup(settings, name) is not None and lookup(settings, name) != lookup(defaults, name)]
