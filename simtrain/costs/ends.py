"""The ends of the model and of the step: embedding, final norm, LM head and loss, optimizer.

* Embedding (first stage, Megatron-LM's ``VocabParallelEmbedding``): a gather of ``tokens`` rows
  of ``h`` (read and write), plus the learned position embedding's add and the embedding
  dropout where the model has them; pass W scatter-adds the gradient rows into the fp32 gradient
  buffer (read the gradient, read and write the buffer rows).
* LM head (last stage): the final norm, the logits GEMM ``h -> V / t``, and the vocabulary-
  parallel cross-entropy (``megatron/core/tensor_parallel/cross_entropy.py``) on logits upcast to
  fp32: the upcast (read 2, write 4), the max (read 4), the shift (read 4, write 4), the
  exponentials in place (read 4, write 4), their sum (read 4) and the normalisation kept for the
  backward (read 4, write 4): 38 bytes per logit; the backward scales the saved softmax in place
  (read 4, write 4) and casts the gradient back to bf16 (read 4, write 2): 14. The fp32 logits
  stay allocated until the backward.
* Multi-token prediction (``model.mtp_layers``, Megatron-Core's ``MultiTokenPredictionBlock`` on
  the last stage, ``megatron/core/transformer/multi_token_prediction.py``): each module normalises
  the next token's embedding and the hidden state (``enorm``, ``hnorm``), projects their
  concatenation 2h -> h (``eh_proj``, column-parallel: h / t outputs), runs a transformer layer
  (a layer of the last chunk, :mod:`simtrain.workload.stages`) and then its own final norm,
  logits GEMM and cross-entropy through the shared output layer: the LM head's kernels once more
  per module, its fp32 logits kept until the backward as well.
* Optimizer step (Adam, Megatron-LM's ``megatron/core/optimizer``, apex/TE fused multi-tensor
  kernels): the gradient norm reads every gradient; Adam reads the gradient and reads and writes
  the fp32 master weight, m and v; the updated master weights are copied to the bf16 weights:
  ``g + g + 24 + 4 + 2`` bytes per parameter for ``g``-byte gradients (38 with fp32 gradients).
"""

from __future__ import annotations

from simtrain.costs.elementwise import A, norm
from simtrain.costs.kernels import Elementwise, Kernel, OpCost
from simtrain.costs.shape import Shape, linear
from simtrain.specs.model import ModelSpec
from simtrain.units import BYTES_FP32

LOSS_FORWARD_BYTES = 2 + 9 * BYTES_FP32  # per logit: upcast, max, shift, exp, sum, normalise
LOSS_BACKWARD_BYTES = 3 * BYTES_FP32 + 2  # per logit: scale the softmax, cast to bf16
#: Adam with master weights, beyond the gradient reads: fp32 weight, m and v read and written
#: (24 bytes) and the bf16 copy of the updated weight (read 4, write 2).
ADAM_STATE_BYTES = 6 * BYTES_FP32 + BYTES_FP32 + 2


def embedding_cost(model: ModelSpec, shape: Shape, kind: str) -> OpCost:
    """Token (and learned position) embedding on the first stage: a gather forward, a scatter-
    add into the gradient buffer in W (B includes it)."""
    rows = shape.tokens * model.hidden
    if kind == "F":
        extra = (3 * A * rows if model.learned_pos else 0.0) + ((2 * A + 1) * rows if model.dropout > 0 else 0.0)
        return OpCost((Elementwise("embed", 2 * A * rows + extra),))
    if kind in ("W", "B"):
        return OpCost((Elementwise("embed.grad", (A + 2 * shape.grad_bytes) * rows),))
    return OpCost()


def logits_bytes(model: ModelSpec, shape: Shape) -> float:
    """Bytes of one micro-batch's logits on one rank of the last stage: tokens x V / t (the
    vocabulary split over TP), 4 bytes each as the cross-entropy runs in fp32. The LM head's
    forward writes them, the loss reads them, and they stay allocated until the LM head's
    backward."""
    return BYTES_FP32 * shape.tokens * model.vocab / shape.tp * (1 + model.mtp_layers)


def _head(model: ModelSpec, shape: Shape, p: str, name: str) -> list[Kernel]:
    """One final norm, logits GEMM and cross-entropy in pass ``p`` (F, I or W)."""
    logits = shape.tokens * model.vocab / shape.tp
    gemm = linear(f"{name}lm_head", shape, model.hidden, model.vocab // shape.tp, p)
    if p == "F":
        return [*norm(f"{name}final", model, shape, "F"), *gemm,
                Elementwise(f"{name}loss", LOSS_FORWARD_BYTES * logits, 6)]
    if p == "I":
        return [Elementwise(f"{name}loss.bwd", LOSS_BACKWARD_BYTES * logits, 2), *gemm,
                *norm(f"{name}final", model, shape, "I")]
    return list(gemm)


def _mtp_input(model: ModelSpec, shape: Shape, p: str) -> list[Kernel]:
    """An MTP module's ``enorm`` and ``hnorm`` and its ``eh_proj`` 2h -> h / t in pass ``p``."""
    gemm = linear("mtp.eh_proj", shape, 2 * model.hidden, model.hidden // shape.tp, p)
    if p == "W":
        return list(gemm)
    norms = [*norm("mtp.enorm", model, shape, p), *norm("mtp.hnorm", model, shape, p)]
    return [*norms, *gemm] if p == "F" else [*gemm, *norms]


def lm_head_cost(model: ModelSpec, shape: Shape, kind: str) -> OpCost:
    """Final norm, output projection and cross-entropy on the last stage, pass ``kind``, and
    each multi-token prediction module's input projection and own head (module docstring)."""
    passes = ("I", "W") if kind == "B" else (kind,)
    out: list[Kernel] = []
    for p in passes:
        out += _head(model, shape, p, "")
        for k in range(model.mtp_layers):
            out += _mtp_input(model, shape, p) + _head(model, shape, p, f"mtp{k}.")
    return OpCost(tuple(out))


def optimizer_cost(params_on_rank: float, shard: int, grad_bytes: int = BYTES_FP32) -> OpCost:
    """One Adam step over this rank's optimizer shard (memory-bound; three multi-tensor kernels:
    gradient norm, Adam, copy to the bf16 weights)."""
    per_param = 2 * grad_bytes + ADAM_STATE_BYTES
    return OpCost((Elementwise("optimizer", per_param * params_on_rank / shard, launches=3),))
