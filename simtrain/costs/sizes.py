"""Sizes: bytes of the communication between ranks and of the memory a rank holds.

* Static memory per parameter with mixed precision and Adam: 2 (bf16 weights) + 4 (fp32
  gradients, Megatron-LM's default ``main_grad`` buffer; 2 with ``--grad-dtype bf16``, its
  ``--grad-reduce-in-bf16``) + 12 (fp32 master weights, Adam m and v), sharded by ZeRO
  (Rajbhandari et al. 2020): stage 1 shards the 12 over the data-parallel group, stage 2 also
  the gradients, stage 3 also the weights.
* Activation memory per layer follows Korthikanti et al. 2022, "Reducing Activation
  Recomputation in Large Transformer Models", table 2: ``34 s b h / t`` bytes with sequence
  parallelism, ``s b h (10 + 24 / t)`` without; the eager attention core adds its
  ``5 a s^2 b / t`` (:func:`simtrain.costs.attention.attention_activation_bytes`); a fully
  recomputed layer keeps only its input, ``2 s b h`` (``/ t`` with sequence parallelism).
* Per module (section 4.1 itemises the 34), in ``s b h`` bytes: input_layernorm's input 2 and
  output 2 (the QKV GEMM's input), the attention's 8 (Q and K 4, V 2, the core's output 2), its
  dropout mask 1; pre_mlp_layernorm's input 2 and output 2 (fc1's input), the MLP's 16 (the
  activation's input 8 and output 8), its dropout mask 1. The norms' 8 and the masks' 2 are whole
  on every TP rank without sequence parallelism, the 24 always split. Table 2 is the paper's GPT
  layer (4h GeLU MLP, multi-head attention); simtrain keeps its totals for every architecture and
  shares the attention's 8 and the MLP's 16 among the tensors the model's block really stores, in
  proportion to their elements per rank (:func:`attention_inner` and :func:`mlp_inner`).
* Selective recompute of named modules (Megatron-LM's ``--recompute-modules``) drops what each
  holds inside and keeps its input: ``layernorm`` both norms' outputs (4; output-discarding
  checkpoints), ``mlp`` the dense MLP's 16, ``moe`` the MoE block's 16, ``moe_act`` the routed
  experts' activation output, ``shared_experts`` the shared experts' activation input and output,
  ``mla_up_proj`` MLA's up-projected Q (with a query latent), K and V; ``core_attn`` the eager
  core's ``5 a s^2 b / t`` (nothing with the fused kernel, which keeps only its inputs and output).
"""

from __future__ import annotations

from simtrain.costs.attention import attention_activation_bytes, modules_of
from simtrain.costs.mlp import moe_routed_rows
from simtrain.costs.shape import ACT_BYTES, Shape
from simtrain.specs.model import ModelSpec
from simtrain.units import BYTES_BF16, BYTES_FP32

BYTES_PARAM = BYTES_BF16  # bf16 weights
BYTES_OPTIMIZER = 3 * BYTES_FP32  # fp32 master weights, Adam m and v
#: Korthikanti et al. 2022, table 2, in ``s b h`` bytes per layer: the norms' inputs and outputs
#: and the dropout masks (whole on every TP rank without sequence parallelism), the attention's
#: and the MLP's tensors (always split over TP), and a fully recomputed layer's input.
NORMS_AND_MASKS_SBH = 10.0
ATTENTION_AND_MLP_SBH = 24.0
RECOMPUTED_INPUT_SBH = 2.0


def tp_collective_bytes(model: ModelSpec, shape: Shape) -> float:
    """Bytes of the full activation a TP collective assembles: tokens x hidden in bf16.

    With sequence parallelism this is the all-gather output / reduce-scatter input; without, the
    all-reduce buffer. Either way the ring moves 2 (t-1)/t of it per block pair (Megatron-LM).
    """
    return ACT_BYTES * shape.tokens * model.hidden


def pp_activation_bytes(model: ModelSpec, shape: Shape) -> float:
    """Bytes each TP rank sends between pipeline stages per micro-batch (activations forward,
    gradients back): its 1/t share. With sequence parallelism the activation is already split;
    without, Megatron-LM sends each TP rank's slice over its own NIC and all-gathers it over
    NVLink on arrival (Narayanan et al. 2021, section 4.1, the scatter/gather optimisation)."""
    return ACT_BYTES * shape.tokens * model.hidden / shape.tp


def attention_inner(model: ModelSpec, shape: Shape) -> dict[str, tuple[float, tuple[str, ...]]]:
    """The attention block's stored tensors between its norm and its output projection: elements
    per token row on one rank and the modules whose recompute drops each. Standard attention: Q,
    K and V (the core's inputs, kept by ``core_attn``) and the core's output, ``/ t`` each. MLA
    (DeepSeek-V3, arXiv:2412.19437, section 2.1.1): the query latent ``q_lora`` and the KV latent
    ``kv_lora + rope`` (replicated), Q and K ``heads (nope + rope) / t``, V and the core's output
    ``heads v / t``; ``mla_up_proj`` drops Q (when a latent makes it), K and V."""
    t = shape.tp
    if not model.is_mla:
        return {"q": (model.q_width / t, ()), "k": (model.kv_width / t, ()), "v": (model.kv_width / t, ()),
                "core_out": (model.heads * model.head_dim / t, ())}
    qk = model.heads * (model.qk_nope_head_dim + model.qk_rope_head_dim) / t
    v = model.heads * model.v_head_dim / t
    up = ("mla_up_proj",)
    return {"q_latent": (float(model.q_lora_rank), ()),
            "kv_latent": (float(model.kv_lora_rank + model.qk_rope_head_dim), ()),
            "q": (qk, up if model.q_lora_rank else ()), "k": (qk, up), "v": (v, up), "core_out": (v, ())}


def mlp_inner(model: ModelSpec, shape: Shape, moe_layer: bool, expert_tp: int | None = None
              ) -> dict[str, tuple[float, tuple[str, ...]]]:
    """The MLP (or MoE) block's stored tensors after its norm: elements per token row on one
    rank and the modules whose recompute drops each. Dense: the activation's input ``f / t``
    (``2 f / t`` gated) and output ``f / t`` (``mlp``). MoE: per routed row (``tokens x top_k``
    over the rank's tokens, :func:`simtrain.costs.moe_routed_rows`) the permuted input ``h``, the
    activation's input ``e`` (``2 e`` gated) and output ``e``, ``e = moe_ffn / etp`` (``moe``; the
    output also ``moe_act``); the shared experts' activation input and output as a dense MLP
    ``shared x moe_ffn`` wide (``moe``, ``shared_experts``)."""
    gate = 2 if model.gated_mlp else 1
    if not moe_layer:
        f = model.ffn / shape.tp
        return {"act_in": (gate * f, ("mlp",)), "act_out": (f, ("mlp",))}
    etp = shape.tp if expert_tp is None else expert_tp
    rows = moe_routed_rows(model, shape, etp) / shape.tokens  # routed rows per token row
    e = model.moe_ffn / etp
    out = {"routed_in": (rows * model.hidden, ("moe",)), "routed_act_in": (rows * gate * e, ("moe",)),
           "routed_act_out": (rows * e, ("moe", "moe_act"))}
    if model.shared_experts:
        f = model.shared_experts * model.moe_ffn / shape.tp
        out |= {"shared_act_in": (gate * f, ("moe", "shared_experts")),
                "shared_act_out": (f, ("moe", "shared_experts"))}
    return out


def dropped_share(tensors: dict[str, tuple[float, tuple[str, ...]]], modules: tuple[str, ...]) -> float:
    """The fraction of a block's elements (:func:`attention_inner`, :func:`mlp_inner`) that the
    recompute of ``modules`` does not store: 1 when every tensor goes."""
    total = sum(n for n, _ in tensors.values())
    gone = sum(n for n, by in tensors.values() if set(by) & set(modules))
    return 1.0 if gone == total else gone / total


def layer_activation_bytes(model: ModelSpec, shape: Shape, full_recompute: bool,
                           selective: bool | tuple[str, ...] = False, moe_layer: bool | None = None,
                           expert_tp: int | None = None) -> float:
    """Activations one layer keeps for one micro-batch until its backward (Korthikanti table 2,
    per module as the module docstring says); ``selective``: True (the core attention) or the
    recomputed modules; ``moe_layer``: whether the layer has routed experts (default: the model
    has experts). The closed form's memory ledger reads it too
    (:class:`simtrain.analytic.ledger.Activations`)."""
    sbh = shape.tokens * model.hidden
    t = shape.tp
    if full_recompute:
        return RECOMPUTED_INPUT_SBH * sbh / (t if shape.sp else 1)
    modules = modules_of(selective)
    core = attention_activation_bytes(model, shape, "core_attn" in modules)
    whole, split = NORMS_AND_MASKS_SBH, ATTENTION_AND_MLP_SBH  # attention 8 and MLP 16 of the 24
    if "layernorm" in modules:
        whole -= 4.0
    if set(modules) - {"core_attn", "layernorm"}:
        moe = model.is_moe if moe_layer is None else moe_layer
        split -= 8.0 * dropped_share(attention_inner(model, shape), modules) \
            + 16.0 * dropped_share(mlp_inner(model, shape, moe, expert_tp), modules)
    if shape.sp or t == 1:
        return (whole + split) * sbh / t + core
    return sbh * (whole + split / t) + core


def static_bytes(params_on_rank: float, zero: int, dp_shard: int, grad_bytes: int = BYTES_FP32) -> float:
    """Weights, gradients and optimizer state of ``params_on_rank`` under ZeRO ``zero``."""
    w, g, o = BYTES_PARAM, grad_bytes, BYTES_OPTIMIZER
    if zero >= 1:
        o /= dp_shard
    if zero >= 2:
        g /= dp_shard
    if zero >= 3:
        w /= dp_shard
    return params_on_rank * (w + g + o)
