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
"""

from __future__ import annotations

from simtrain.costs.attention import attention_activation_bytes
from simtrain.costs.shape import ACT_BYTES, Shape
from simtrain.specs.model import ModelSpec
from simtrain.units import BYTES_BF16, BYTES_FP32

BYTES_PARAM = BYTES_BF16  # bf16 weights
BYTES_OPTIMIZER = 3 * BYTES_FP32  # fp32 master weights, Adam m and v


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


def layer_activation_bytes(model: ModelSpec, shape: Shape, full_recompute: bool,
                           selective: bool = False) -> float:
    """Activations one layer keeps for one micro-batch until its backward (Korthikanti table 2)."""
    sbh = shape.tokens * model.hidden
    t = shape.tp
    if full_recompute:
        return 2.0 * sbh / (t if shape.sp else 1)
    core = attention_activation_bytes(model, shape, selective)
    if shape.sp or t == 1:
        return 34.0 * sbh / t + core
    return sbh * (10.0 + 24.0 / t) + core


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
