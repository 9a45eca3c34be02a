"""The attention block: norm, projections, rotary, the attention core, output projection, residual.

Projections (Megatron-LM's ``megatron/core/transformer/attention.py``): a fused QKV GEMM
``h -> (q + 2 kv) / t`` and the output projection ``q / t -> h``. Multi-head latent attention
(DeepSeek-V3, arXiv:2412.19437, section 2.1.1; Megatron-LM's ``multi_latent_attention.py``): the
down projections ``h -> q_lora`` and ``h -> kv_lora + rope`` are not split over TP; with sequence
parallelism each rank runs them over its own ``s / t`` tokens (a duplicated linear on the
sequence shard, or in later versions a column-parallel one whose output is gathered and scattered
back to the shard: the same FLOPs), without it over all ``s``; the up
projections ``q_lora -> heads (nope + rope) / t`` and ``kv_lora -> heads (nope + v) / t`` and the
output projection ``heads v / t -> h`` are split; its value heads are ``v_head_dim`` wide, not
the query/key width.

The core has two implementations (``--attention``):

* ``flash`` (default): one fused kernel per pass (:class:`~simtrain.costs.kernels.Attention`),
  causal, with the backward's five products; nothing of size ``s^2`` reaches HBM.
* ``eager``: the unfused core of 2021-22 Megatron-LM (``megatron/model/transformer.py``,
  ``CoreAttention``): a batched GEMM for the scores ``Q K^T`` over the full ``s x s`` square (the
  causal mask is applied by the fused scale-mask-softmax kernel, ``fused_kernels/``), the softmax
  reading and writing the scores, dropout on the probabilities (reads them, writes them and a
  1-byte mask), the context GEMM ``P V`` and a copy that lays the context out as ``[s, b, h]``.
  Its backward runs the four product GEMMs (dP, dV, dQ, dK), the dropout and softmax backward
  kernels (reading the saved probabilities) and the copy's inverse. It keeps ``5 a s^2 b / t``
  bytes of activations per layer (Korthikanti et al. 2022, table 2; ``2 a s^2 b / t`` without
  dropout), which selective recompute drops.

Selective recompute (Korthikanti et al. 2022, section 4.2) runs the core's forward again right
before its backward, inside pass I. Of Megatron-LM's other ``--recompute-modules``
(``megatron/core/transformer/transformer_layer.py``, ``multi_latent_attention.py``), pass I
also runs the norm's forward again right before its backward (``layernorm``) and, before the
core, MLA's up projections and rotary (``mla_up_proj``). ``selective`` arguments take True (the
core alone, as before) or the tuple of recomputed modules.
"""

from __future__ import annotations

from simtrain.costs.elementwise import A, bias_grads, norm, residual, rotary
from simtrain.costs.kernels import Attention, Elementwise, Gemm, Kernel, OpCost
from simtrain.costs.shape import Shape, linear
from simtrain.specs.model import ModelSpec


def modules_of(selective: bool | tuple[str, ...]) -> tuple[str, ...]:
    """The recomputed modules a ``selective`` argument names: True is the core attention alone."""
    if selective is True:
        return ("core_attn",)
    return tuple(selective or ())


def value_dim(model: ModelSpec) -> int:
    """Features per value head: ``v_head_dim`` with MLA, else the head dimension."""
    return model.v_head_dim if model.is_mla else model.head_dim


def _projections(model: ModelSpec, shape: Shape) -> tuple[list[tuple[str, int, int, bool]], tuple[str, int, int]]:
    """([(name, k_in, n_out, split over TP)] before the core, (name, k_in, n_out) after it)."""
    h, t = model.hidden, shape.tp
    out = ("attn.proj", model.heads * value_dim(model) // t, h)
    if not model.is_mla:
        return [("attn.qkv", h, (model.q_width + 2 * model.kv_width) // t, True)], out
    pre = []
    if model.q_lora_rank:
        pre += [("attn.q_down", h, model.q_lora_rank, False),
                ("attn.q_up", model.q_lora_rank, model.q_width // t, True)]
    else:
        pre.append(("attn.q", h, model.q_width // t, True))
    pre += [("attn.kv_down", h, model.kv_lora_rank + model.qk_rope_head_dim, False),
            ("attn.kv_up", model.kv_lora_rank, model.heads * (model.qk_nope_head_dim + model.v_head_dim) // t, True)]
    return pre, out


def _flash(model: ModelSpec, shape: Shape, backward: bool, kv_tokens: int) -> Attention:
    """The fused kernel over the rank's queries (``seq / cp`` per sequence) and ``kv_tokens`` keys."""
    return Attention("attn.core.bwd" if backward else "attn.core", batch=shape.mbs * model.heads // shape.tp,
                     sq=shape.local_seq, skv=kv_tokens, d_qk=model.head_dim, d_v=value_dim(model), causal=True,
                     backward=backward)


def _eager(model: ModelSpec, shape: Shape, backward: bool) -> tuple[Kernel, ...]:
    """The unfused core over the full sequence (no context parallelism)."""
    s, dq, dv = shape.seq, model.head_dim, value_dim(model)
    b = shape.mbs * model.heads // shape.tp
    square = b * s * s  # score elements
    drop = model.dropout > 0
    layout = Elementwise("attn.context.copy", 2 * A * shape.tokens * model.heads * dv / shape.tp)
    if not backward:
        return tuple(k for k in (
            Gemm("attn.scores", s, s, dq, batch=b),
            Elementwise("attn.softmax", 2 * A * square),
            Elementwise("attn.dropout", (2 * A + 1) * square) if drop else None,
            Gemm("attn.context", s, dv, s, batch=b), layout) if k is not None)
    return tuple(k for k in (
        layout,
        Gemm("attn.context.dgrad_p", s, s, dv, batch=b), Gemm("attn.context.dgrad_v", s, dv, s, batch=b),
        Elementwise("attn.dropout.bwd", (2 * A + 1) * square) if drop else None,
        Elementwise("attn.softmax.bwd", 3 * A * square),
        Gemm("attn.scores.dgrad_q", s, dq, s, batch=b), Gemm("attn.scores.dgrad_k", s, dq, s, batch=b))
        if k is not None)


def core_kernels(model: ModelSpec, shape: Shape, kind: str, selective: bool | tuple[str, ...] = False,
                 kv_tokens: int | None = None) -> tuple[Kernel, ...]:
    """The attention core of pass ``kind`` (none in W); ``kv_tokens``: the keys of one context-
    parallel ring step (default: the full sequence)."""
    if kind == "W":
        return ()
    if kind == "B":
        kind = "I"
    selective = "core_attn" in modules_of(selective)
    kv = shape.seq if kv_tokens is None else kv_tokens
    if shape.attention == "eager":
        forward = _eager(model, shape, False)
        return forward if kind == "F" else (forward[:-1] if selective else ()) + _eager(model, shape, True)
    if kind == "F":
        return (_flash(model, shape, False, kv),)
    return ((_flash(model, shape, False, kv),) if selective else ()) + (_flash(model, shape, True, kv),)


def attention_parts(model: ModelSpec, shape: Shape, kind: str,
                    selective: bool | tuple[str, ...] = False) -> tuple[OpCost, OpCost, OpCost]:
    """The attention block of pass ``kind`` in launch order as (before the core, core, after the
    core); a backward pass runs the block in reverse, so its first part is the output
    projection's. Context parallelism runs the core in ring steps between the two outer parts."""
    pre, (out_name, out_k, out_n) = _projections(model, shape)
    modules = modules_of(selective)
    renorm = norm("attn", model, shape, "F") if "layernorm" in modules else ()
    up = [k for name, k_in, n_out, _ in pre if name in ("attn.q_up", "attn.kv_up")
          for k in linear(name, shape, k_in, n_out, "F")] + [*rotary(model, shape, "F")]
    up = up if "mla_up_proj" in modules and model.is_mla else []
    passes = ("I", "W") if kind == "B" else (kind,)
    head: list[Kernel] = []
    tail: list[Kernel] = []
    for p in passes:
        proj = linear(out_name, shape, out_k, out_n, p)
        inputs = [k for name, k_in, n_out, split in pre
                  for k in linear(name, shape, k_in, n_out, p, None if split else shape.sp_rows)]
        if p == "F":
            head += [*norm("attn", model, shape, "F"), *inputs, *rotary(model, shape, "F")]
            tail += [*proj, *residual("attn", model, shape, "F")]
        elif p == "I":
            head += [*residual("attn", model, shape, "I"), *proj, *up]
            tail += [*rotary(model, shape, "I"), *inputs, *renorm, *norm("attn", model, shape, "I")]
        else:
            head += proj
            tail += [*inputs, *bias_grads("attn", model, shape, (out_n,) + tuple(n for _, _, n, _ in pre))]
    core = core_kernels(model, shape, kind, selective)
    return OpCost(tuple(head)), OpCost(core), OpCost(tuple(tail))


def attention_cost(model: ModelSpec, shape: Shape, kind: str, selective: bool | tuple[str, ...] = False) -> OpCost:
    """The attention block of pass ``kind`` (F, I, W or B = I + W) on one rank."""
    head, core, tail = attention_parts(model, shape, kind, selective)
    return head + core + tail


def cp_step_core(model: ModelSpec, shape: Shape, kind: str, selective: bool | tuple[str, ...] = False) -> OpCost:
    """One ring step of context-parallel attention: the rank's queries against one K/V block
    (load-balanced causal chunks: each step does ``1/cp`` of the rank's causal work)."""
    return OpCost(core_kernels(model, shape, kind, selective, kv_tokens=shape.local_seq))


def cp_kv_bytes(model: ModelSpec, shape: Shape) -> float:
    """Bytes of the K and V blocks a CP rank passes to its ring neighbour per step (bf16, the
    rank's tokens, its 1/t share of the KV heads; MLA's values ``v_head_dim`` wide). The backward
    pass moves twice this per step (KV and their gradients), as the course notes' ring estimate
    ``3 (cp-1)`` volumes per layer assumes. The notes' volume is the whole K and V, not divided
    by TP, and the closed form keeps it (:data:`simtrain.analytic.compare.DELIBERATE_DIFFERENCES`)."""
    width = model.kv_heads * (model.head_dim + value_dim(model))
    return A * shape.tokens * width / shape.tp


def attention_activation_bytes(model: ModelSpec, shape: Shape, selective: bool | tuple[str, ...]) -> float:
    """The eager core's extra activations per layer and micro-batch: ``5 a s^2 b / t`` bytes
    (softmax output, dropout mask and output; ``2 a s^2 b / t`` without dropout), none with the
    fused kernel or when selective recompute rebuilds them (Korthikanti et al. 2022, table 2)."""
    if shape.attention != "eager" or "core_attn" in modules_of(selective):
        return 0.0
    per_element = 5 if model.dropout > 0 else 2
    return per_element * model.heads * shape.seq * shape.seq * shape.mbs / shape.tp
