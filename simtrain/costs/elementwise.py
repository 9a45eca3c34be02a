"""The memory-bound kernels around a block's GEMMs: norm, rotary, activation, residual add.

Bytes per element follow what each kernel reads and writes in bf16 (2 bytes; ``A`` below), as
Megatron-LM runs them fused (``megatron/core/fusions``: ``fused_bias_gelu``, ``fused_bias_swiglu``,
``fused_bias_dropout``, ``fused_layer_norm``, and ``fused_apply_rotary_pos_emb``):

* norm (LayerNorm or RMSNorm): forward reads x, writes y: ``2A``; backward reads x and dy,
  writes dx, then the residual branch's gradient is added to the stream's (reads two, writes
  one): ``6A`` in two kernels. Their per-row statistics are negligible.
* rotary position embedding on q and k: read and write, forward and backward alike: ``2A``;
  MLA's query, key and value are then laid out for the core (:func:`mla_layout`).
* activation: GeLU with its bias reads and writes the ``f`` wide tensor, ``2A`` forward and
  ``3A`` backward (also reads its input); SwiGLU reads gate and up and writes one, ``3A``, and
  backward reads three and writes two, ``5A``.
* residual add (with the bias and, where the model has it, dropout): reads the branch and the
  residual, writes the sum, ``3A``, plus a 1-byte mask with dropout; backward, dropout reads the
  gradient and the mask and writes ``2A + 1`` (without dropout the gradient passes unchanged).

Outside the GEMMs a sequence-parallel rank holds ``tokens / t`` rows; the activation of the MLP
is ``f / t`` wide on every TP rank.
"""

from __future__ import annotations

from simtrain.costs.kernels import Elementwise, Kernel
from simtrain.costs.shape import ACT_BYTES, Shape
from simtrain.specs.model import ModelSpec

A = ACT_BYTES


def norm(name: str, model: ModelSpec, shape: Shape, kind: str) -> tuple[Kernel, ...]:
    """The block's input norm: forward, or backward with the residual gradient add (pass I)."""
    rows = shape.sp_tokens * model.hidden
    if kind == "F":
        return (Elementwise(f"{name}.norm", 2 * A * rows),)
    if kind == "I":
        return (Elementwise(f"{name}.norm.bwd", 6 * A * rows, launches=2),)
    return ()


def residual(name: str, model: ModelSpec, shape: Shape, kind: str) -> tuple[Kernel, ...]:
    """The bias(-dropout)-residual add closing a block (forward), or its dropout's backward."""
    rows = shape.sp_tokens * model.hidden
    drop = model.dropout > 0
    if kind == "F":
        return (Elementwise(f"{name}.residual", (3 * A + (1 if drop else 0)) * rows),)
    if kind == "I" and drop:
        return (Elementwise(f"{name}.dropout.bwd", (2 * A + 1) * rows),)
    return ()


def activation(model: ModelSpec, shape: Shape, width: float, kind: str, tokens: float | None = None) -> tuple[Kernel, ...]:
    """The MLP's activation over ``tokens`` (default: the shape's) and ``width`` features per rank."""
    elems = (shape.tokens if tokens is None else tokens) * width
    if kind == "F":
        return (Elementwise("mlp.act", (3 if model.gated_mlp else 2) * A * elems),)
    if kind == "I":
        return (Elementwise("mlp.act.bwd", (5 if model.gated_mlp else 3) * A * elems),)
    return ()


#: HBM traffic of Megatron-LM's unfused rotary embedding per byte of the rotated part ``t``
#: (``megatron/core/models/common/embeddings/rope_utils.py``, ``_apply_rotary_pos_emb_bshd``):
#: ``t * cos`` (read and write: 2), ``_rotate_half``'s negation of one half and concatenation
#: (1 + 2), ``* sin`` (2), the sum (3) and the concatenation with the unrotated rest (2); MLA's
#: de-interleaving concatenation of the even and odd features first (2 more). Six kernels (seven
#: with MLA) over ``t``, and six small ones over the frequencies (cos, sin, their scale and cast).
UNFUSED_ROPE_BYTES = 12
UNFUSED_ROPE_MLA_BYTES = UNFUSED_ROPE_BYTES + 2


def rotary(model: ModelSpec, shape: Shape, kind: str) -> tuple[Kernel, ...]:
    """Rotary embedding of q and k (none for a learned position embedding); with MLA, then the
    layout of its query, key and value (:func:`mla_layout`).

    Fused (TransformerEngine's kernel, Megatron-LM's default): one read and one write of the
    rotated part. Unfused (``--no-rope-fusion``; NeMo's and Megatron Bridge's DeepSeek configs set
    ``apply_rope_fusion`` False): :data:`UNFUSED_ROPE_BYTES` per byte, and the backward, the
    autograd of the same products and concatenations, as many."""
    if model.learned_pos or kind not in ("F", "I"):
        return ()
    if model.is_mla:  # only the rope part: heads x qk_rope of q and the shared qk_rope of k
        width = model.heads * model.qk_rope_head_dim / shape.tp + model.qk_rope_head_dim
    else:
        width = (model.q_width + model.kv_width) / shape.tp
    name, part = "attn.rope" if kind == "F" else "attn.rope.bwd", A * shape.tokens * width
    if shape.rope_fusion:
        rope = Elementwise(name, 2 * part)
    else:
        per_byte, launches = (UNFUSED_ROPE_MLA_BYTES, 7) if model.is_mla else (UNFUSED_ROPE_BYTES, 6)
        rope = Elementwise(name, per_byte * part, launches=launches + 6)
    return (rope, *mla_layout(model, shape, kind))


def mla_layout(model: ModelSpec, shape: Shape, kind: str) -> tuple[Kernel, ...]:
    """MLA's query, key and value laid out for the attention core, as Megatron-LM builds them
    after the up projections and the rope (``megatron/core/transformer/multi_latent_attention.py``,
    ``qkv_up_proj_and_rope_apply``): the query concatenated from its no-rope and rope parts
    (``torch.cat``: reads and writes ``heads (nope + rope)``), the key from its no-rope part and
    the one rope key expanded over the heads (reads ``heads nope + rope``, writes ``heads (nope +
    rope)``), and the value copied out of the key-value projection's output (``.contiguous()``:
    reads and writes ``heads v``), per rank ``heads / t`` of them, in bf16. The backward moves
    as many bytes: the query's gradient split and concatenated back into the up projection's
    output, the key's no-rope and the value's gradients concatenated into the key-value
    projection's, the rope key's summed over the heads. Megatron-LM recomputes it with the up
    projections (``mla_up_proj``). None without MLA."""
    if not model.is_mla or kind not in ("F", "I"):
        return ()
    nope, rope, v = model.qk_nope_head_dim, model.qk_rope_head_dim, model.v_head_dim
    per_token = model.heads / shape.tp * (2 * (nope + rope) + nope + (nope + rope) + 2 * v) + rope
    return (Elementwise("attn.mla_layout" if kind == "F" else "attn.mla_layout.bwd", A * shape.tokens * per_token,
                        launches=3),)


def bias_grads(name: str, model: ModelSpec, shape: Shape, widths: tuple[float, ...]) -> tuple[Kernel, ...]:
    """Bias gradients of a block's linear layers (column sums of dY), pass W; none without biases."""
    if not model.bias:
        return ()
    return (Elementwise(f"{name}.bias_grad", A * shape.tokens * sum(widths), launches=len(widths)),)
