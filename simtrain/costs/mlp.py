"""The MLP block (dense) and the MoE block: norm, GEMMs, activation, residual; router and experts.

Dense MLP (Megatron-LM's ``megatron/core/transformer/mlp.py``): ``fc1`` h -> f / t (2 f / t
when gated: gate and up in one GEMM), the activation, ``fc2`` f / t -> h.

MoE (Megatron-LM's ``megatron/core/transformer/moe``): the router GEMM h -> experts over the
rank's sequence-parallel tokens and its softmax/top-k; the token dispatcher's permutation of the
routed tokens into expert order and back (a gather and a scatter of ``h`` wide rows) and, with
Megatron-LM's all-to-all dispatcher on more than one EP rank and local expert, the sort of the
received rows from (source rank, local expert) chunks into local-expert order after the dispatch
and back before the combine ("Permutation 2", ``MoEAlltoAllTokenDispatcher``,
``moe_utils.sort_chunks_by_idxs``: a read and a write of every received row each way; DeepEP
hands the rows over unpermuted, so its dispatcher's one permutation each way is the first); the routed
experts as one grouped GEMM per linear layer over the rank's local experts (``num_experts / ep``)
at the real tokens per expert: an EP rank receives ``tokens x top_k x load`` rows (``load`` its
share over the mean), times ``expert_tp`` after the expert-TP all-gather, spread over its local
experts; the experts' ffn split over the expert-TP group. Shared experts (DeepSeek-V3,
arXiv:2412.19437, section 2.1.2) run as a dense MLP over the TP-gathered tokens, split over the
TP group.

Selective recompute of named modules (Megatron-LM's ``--recompute-modules``,
``megatron/core/transformer/transformer_layer.py``, ``moe/experts.py``) adds forward kernels to
pass I right before the backward they serve: ``mlp`` the dense MLP's fc1, activation and fc2;
``moe`` the router's gate and top-k, the permutation and the routed and shared experts;
``moe_act`` the routed experts' activation before fc2's input gradient; ``shared_experts`` the
shared experts' MLP; ``layernorm`` the block's norm before its backward. ``recompute`` arguments
are the tuple of recomputed modules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simtrain.costs.elementwise import A, activation, bias_grads, norm, residual
from simtrain.costs.kernels import Elementwise, Kernel, OpCost
from simtrain.costs.shape import Shape, linear
from simtrain.specs.model import ModelSpec
from simtrain.units import BYTES_FP32


def _mlp_kernels(model: ModelSpec, shape: Shape, kind: str, name: str, width: int, split: int,
                 tokens: int | None = None, batch: int = 1, ends: bool = True,
                 again: tuple[str, ...] = ()) -> tuple[Kernel, ...]:
    """An MLP ``h -> width -> h`` with its ffn split ``split`` ways, in pass ``kind``; ``ends``
    adds the block's norm and residual (a dense block) and the bias gradients; ``again`` what
    pass I runs forward again: ``mlp`` (fc1, activation, fc2 first), ``act`` (the activation
    before fc2's input gradient), ``norm`` (the norm before its backward)."""
    h = model.hidden
    f = width // split
    up = f * (2 if model.gated_mlp else 1)
    passes = ("I", "W") if kind == "B" else (kind,)
    out: list[Kernel] = []
    for p in passes:
        fc1 = linear(f"{name}.fc1", shape, h, up, p, tokens, batch)
        fc2 = linear(f"{name}.fc2", shape, f, h, p, tokens, batch)
        act = activation(model, shape, f * batch, p, tokens)
        if p == "F":
            out += [*(norm(name, model, shape, "F") if ends else ()), *fc1, *act, *fc2,
                    *(residual(name, model, shape, "F") if ends else ())]
        elif p == "I":
            fwd = (linear(f"{name}.fc1", shape, h, up, "F", tokens, batch) + activation(model, shape, f * batch, "F", tokens)
                   + linear(f"{name}.fc2", shape, f, h, "F", tokens, batch))
            out += [*(residual(name, model, shape, "I") if ends else ()), *(fwd if "mlp" in again else ()),
                    *(activation(model, shape, f * batch, "F", tokens) if "act" in again and "mlp" not in again else ()),
                    *fc2, *act, *fc1, *(norm(name, model, shape, "F") if "norm" in again else ()),
                    *(norm(name, model, shape, "I") if ends else ())]
        else:
            out += [*fc2, *fc1, *(bias_grads(name, model, shape, (up, h)) if ends else ())]
    return tuple(out)


def _dense_again(recompute: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(a for a, m in (("mlp", "mlp"), ("norm", "layernorm")) if m in recompute)


def mlp_cost(model: ModelSpec, shape: Shape, kind: str, recompute: tuple[str, ...] = ()) -> OpCost:
    """The dense MLP block of pass ``kind`` (F, I, W or B = I + W) on one rank."""
    return OpCost(_mlp_kernels(model, shape, kind, "mlp", model.ffn, shape.tp, again=_dense_again(recompute)))


def mlp_parts(model: ModelSpec, shape: Shape, kind: str,
              recompute: tuple[str, ...] = ()) -> tuple[OpCost, OpCost, OpCost]:
    """The dense MLP block of pass ``kind`` (F, I or W) in launch order as (through the first
    linear layer, between the two, from the second linear layer on). The forward runs the
    column-parallel ``fc1`` first (with the norm) and the row-parallel ``fc2`` last (with the
    residual); the backward passes run them in reverse, so their first part is ``fc2``'s."""
    kernels = _mlp_kernels(model, shape, kind, "mlp", model.ffn, shape.tp, again=_dense_again(recompute))
    first, second = ("mlp.fc1", "mlp.fc2") if kind == "F" else ("mlp.fc2", "mlp.fc1")
    head_end = 1 + max(i for i, k in enumerate(kernels) if k.name.startswith(first))
    tail_start = min(i for i, k in enumerate(kernels) if i >= head_end and k.name.startswith(second))
    return OpCost(kernels[:head_end]), OpCost(kernels[head_end:tail_start]), OpCost(kernels[tail_start:])


@dataclass(frozen=True)
class MoeCosts:
    """The work of one MoE block for one pass on one rank."""

    router: OpCost  # the block's norm, the gate over the rank's tokens and its top-k
    experts: OpCost  # the routed experts over the rank's own share of the tokens, with the permutation
    shared: OpCost | None  # the shared experts; None without them


def moe_tokens(shape: Shape) -> float:
    """Tokens entering one rank's MoE block: with sequence parallelism they stay split across the
    TP ranks, and the all-to-all carries this share (Megatron-LM's all-to-all token dispatcher,
    ``megatron/core/transformer/moe/token_dispatcher.py``, ``MoEAlltoAllTokenDispatcher``: the
    expert-TP all-gather comes after the dispatch)."""
    return shape.sp_tokens


def moe_etp_gather(shape: Shape, expert_tp: int) -> int:
    """Ranks whose tokens the expert-TP all-gather joins: ``expert_tp``, or 1 (no gather) when
    the ranks of the group already hold the same tokens (TP > 1 without sequence parallelism)."""
    return expert_tp if shape.sp or shape.tp == 1 else 1


def moe_routed_rows(model: ModelSpec, shape: Shape, expert_tp: int, load: float = 1.0) -> float:
    """Token rows one rank's local experts process: its EP position receives ``load`` times the
    mean ``tokens x top_k`` rows in the dispatch, and with expert TP > 1 it all-gathers the rows
    of the ranks of its expert-TP group (which share its EP position, so its load)."""
    return moe_tokens(shape) * model.top_k * load * moe_etp_gather(shape, expert_tp)


def moe_etp_bytes(model: ModelSpec, shape: Shape, expert_tp: int, load: float = 1.0) -> float:
    """Bytes of the expert-TP all-gather output (= reduce-scatter input) around the experts: the
    rows of :func:`moe_routed_rows`, ``hidden`` wide in bf16 (Megatron-LM's
    ``MoEAlltoAllTokenDispatcher``: ``gather_from_sequence_parallel_region`` over the expert-TP
    group after the dispatch, ``reduce_scatter_to_sequence_parallel_region`` before the combine)."""
    return A * moe_routed_rows(model, shape, expert_tp, load) * model.hidden


def moe_costs(model: ModelSpec, shape: Shape, kind: str, expert_tp: int, ep: int = 1,
              load: float = 1.0, recompute: tuple[str, ...] = (), dispatcher: str = "alltoall") -> MoeCosts:
    """Router, routed experts and shared experts of one MoE block in pass ``kind`` (F, I, W or B)
    on a rank of ``ep`` expert-parallel ranks whose EP position gets ``load`` times the mean
    tokens (:func:`simtrain.workload.moe_routing.ep_loads`).

    The router runs over the rank's own tokens (:func:`moe_tokens`); the routed experts over the
    rows of :func:`moe_routed_rows`, spread evenly over the ``num_experts / ep`` local experts;
    the shared experts (DeepSeek-V3, arXiv:2412.19437, section 2.1.2) as a dense MLP over the
    TP-gathered tokens with its ffn split over the TP group (Megatron-LM's
    ``megatron/core/transformer/moe/shared_experts.py``).
    """
    tokens = moe_tokens(shape)
    routed = moe_routed_rows(model, shape, expert_tp, load)
    local = model.num_experts // ep
    # a permutation and its inverse; Megatron-LM's all-to-all dispatcher adds its permutation 2 and back
    permutes = 4 if dispatcher == "alltoall" and ep > 1 and local > 1 else 2
    per_expert = max(1, math.ceil(routed / local))
    passes = ("I", "W") if kind == "B" else (kind,)
    n_tokens = shape.sp_rows  # == tokens (moe_tokens), rounded up
    router: list[Kernel] = []
    experts: list[Kernel] = []
    whole = "moe" in recompute  # the MoE layer's forward again before its backward: router, experts
    again = ("mlp",) if whole else ("act",) if "moe_act" in recompute else ()
    for p in passes:
        gate = linear("moe.router", shape, model.hidden, model.num_experts, p, n_tokens)
        scores = Elementwise("moe.topk" if p == "F" else "moe.topk.bwd", 2 * BYTES_FP32 * tokens * model.num_experts)
        perm = Elementwise("moe.permute" if p == "F" else "moe.permute.bwd", permutes * 2 * A * routed * model.hidden,
                           launches=permutes)
        if p == "F":
            router += [*norm("moe", model, shape, "F"), *gate, scores]
        elif p == "I":
            renorm = norm("moe", model, shape, "F") if "layernorm" in recompute else ()
            router += [scores, *gate, *renorm, *norm("moe", model, shape, "I")]
            if whole:  # the router's gate and top-k and the permutation, before the experts' again
                experts += [*linear("moe.router", shape, model.hidden, model.num_experts, "F", n_tokens),
                            Elementwise("moe.topk", scores.nbytes),
                            Elementwise("moe.permute", perm.nbytes, launches=perm.launches)]
        else:
            router += gate
        experts += ([perm] if p != "W" else [])
        experts += _mlp_kernels(model, shape, p, "moe.expert", model.moe_ffn, expert_tp, per_expert, local,
                                ends=False, again=again)
    if kind == "F":
        experts += residual("moe", model, shape, "F")
    shared = None
    if model.shared_experts:
        redo = ("mlp",) if whole or "shared_experts" in recompute else ()
        shared = OpCost(_mlp_kernels(model, shape, kind, "moe.shared", model.shared_experts * model.moe_ffn,
                                     shape.tp, ends=False, again=redo))
    return MoeCosts(router=OpCost(tuple(router)), experts=OpCost(tuple(experts)), shared=shared)


def moe_cost(model: ModelSpec, shape: Shape, kind: str, expert_tp: int, ep: int = 1,
             recompute: tuple[str, ...] = (), dispatcher: str = "alltoall") -> OpCost:
    """All the compute of one MoE block in pass ``kind`` at uniform routing."""
    c = moe_costs(model, shape, kind, expert_tp, ep, recompute=recompute, dispatcher=dispatcher)
    return c.router + c.experts + (c.shared or OpCost())
