"""Pure cost model: FLOPs, bytes and time of each operation one rank runs, and memory sizes.

Conventions (``DESIGN.md`` section 6; multiply-add = 2 FLOPs):

* a GEMM over ``n`` tokens with ``P`` weights costs ``2 n P`` FLOPs forward, the same again for
  the input gradient (pass I) and again for the weight gradient (pass W);
* causal attention core (QK^T and AV) costs ``2 s_full q_width`` FLOPs per query token forward
  (``4 s h`` unmasked, halved by the causal mask) and twice that in I (flash-attention recomputes
  the scores inside its backward); it has no weights and so no W;
* an op takes ``max(flops / (peak * efficiency), bytes / hbm_bandwidth)`` (roofline);
* activation memory per layer follows Korthikanti et al. 2022, "Reducing Activation Recomputation
  in Large Transformer Models", table 2, with flash attention (no ``5 a s / h`` term):
  ``34 s b h / t`` bytes with sequence parallelism, ``s b h (10 + 24 / t)`` without; a fully
  recomputed layer keeps only its input, ``2 s b h`` (``/ t`` with sequence parallelism);
* static memory per parameter: 2 (bf16 weights) + 2 (bf16 gradients) + 12 (fp32 master, Adam m
  and v), sharded by ZeRO (Rajbhandari et al. 2020): stage 1 shards the 12 over the data-parallel
  group, stage 2 also the gradients, stage 3 also the weights. This is the course notes'
  ``parallel_plan.py`` ledger (``4 psi + 12 psi / (dp cp)`` for ZeRO-1).

Everything here is a function of the specs; nothing touches the simulation.
"""

from __future__ import annotations

from dataclasses import dataclass

from simtrain.specs.gpu import GpuSpec
from simtrain.specs.model import ModelSpec
from simtrain.specs.parallel import ParallelSpec
from simtrain.units import BYTES_BF16, BYTES_FP32

BYTES_PARAM = BYTES_BF16  # bf16 weights
BYTES_GRAD = BYTES_BF16  # bf16 gradients, as the course notes' ledger
BYTES_OPTIMIZER = 3 * BYTES_FP32  # fp32 master weights, Adam m and v
# HBM traffic per parameter of one Adam step: read grad, master, m, v; write master, m, v, bf16 weight
BYTES_ADAM_STEP = 30
ACT_BYTES = BYTES_BF16  # bf16 activations


@dataclass(frozen=True)
class OpCost:
    """Work of one operation on one rank."""

    flops: float  # floating-point operations
    bytes: float  # HBM bytes read and written

    def time_s(self, gpu: GpuSpec) -> float:
        """Roofline time: the larger of the math time and the memory time."""
        return max(self.flops / gpu.effective_flops, self.bytes / gpu.hbm_bandwidth_Bps)

    def __add__(self, other: "OpCost") -> "OpCost":
        return OpCost(self.flops + other.flops, self.bytes + other.bytes)

    def scaled(self, factor: float) -> "OpCost":
        return OpCost(self.flops * factor, self.bytes * factor)


ZERO = OpCost(0.0, 0.0)


@dataclass(frozen=True)
class Shape:
    """The slice of work one rank does for one micro-batch."""

    tokens: int  # tokens per micro-batch on this rank: mbs * seq / cp
    seq: int  # full sequence length (keys a causal query attends to: about seq / 2)
    tp: int  # tensor-parallel degree dividing weights and heads
    sp: bool  # sequence parallelism (activations outside the GEMMs split over tp)

    @classmethod
    def of(cls, par: ParallelSpec) -> "Shape":
        return cls(tokens=par.mbs * par.seq // par.cp, seq=par.seq, tp=par.tp, sp=par.sequence_parallel)


def _gemm(n: int, params: float, tp: int) -> float:
    return 2.0 * n * params / tp


def attention_core_flops(model: ModelSpec, shape: Shape) -> float:
    """Forward FLOPs of causal QK^T and AV for the rank's query tokens (2 s q_width per token)."""
    return 2.0 * shape.tokens * shape.seq * model.q_width / shape.tp


def _io_bytes(model: ModelSpec, shape: Shape, weights: float, width: float) -> float:
    """HBM traffic of a block: its weight shard once plus activations of ``width`` features."""
    return BYTES_PARAM * weights / shape.tp + ACT_BYTES * shape.tokens * width / shape.tp * 4


def attention_cost(model: ModelSpec, shape: Shape, kind: str, selective_recompute: bool = False) -> OpCost:
    """Attention block (norm, QKV, core, output projection) for pass F, I, W or B (= I + W)."""
    params = model.attention_params()
    gemm = _gemm(shape.tokens, params, shape.tp)
    core = attention_core_flops(model, shape)
    io = _io_bytes(model, shape, params, model.hidden + model.q_width + 2 * model.kv_width)
    if kind == "F":
        return OpCost(gemm + core, io)
    if kind == "I":
        extra = core if selective_recompute else 0.0  # the recomputed forward scores
        return OpCost(gemm + 2 * core + extra, io)
    if kind == "W":
        return OpCost(gemm, io)
    if kind == "B":
        return attention_cost(model, shape, "I", selective_recompute) + attention_cost(model, shape, "W")
    raise ValueError(kind)


def attention_parts(model: ModelSpec, shape: Shape, kind: str,
                    selective_recompute: bool = False) -> tuple[OpCost, OpCost, OpCost]:
    """The attention block of pass ``kind`` split into (QKV projection, core, output projection).

    Their sum is :func:`attention_cost`; context parallelism runs the core in ``cp`` ring steps
    between the two projections. The projections split the block's GEMM FLOPs and bytes by their
    weight counts: QKV ``h (q + 2 kv)``, output ``q h``.
    """
    total = attention_cost(model, shape, kind, selective_recompute)
    core_f = attention_core_flops(model, shape)
    core = {"F": core_f, "I": core_f * (3 if selective_recompute else 2), "W": 0.0}
    core["B"] = core["I"]
    gemm = OpCost(total.flops - core[kind], total.bytes * 0.9)
    qkv_share = (model.q_width + 2 * model.kv_width) / (2 * model.q_width + 2 * model.kv_width)
    return (gemm.scaled(qkv_share), OpCost(core[kind], total.bytes * 0.1),
            gemm.scaled(1 - qkv_share))


def cp_kv_bytes(model: ModelSpec, shape: Shape) -> float:
    """Bytes of the K and V blocks a CP rank passes to its ring neighbour per step (bf16, the rank's
    tokens, its 1/t share of the KV heads). The backward pass moves twice this per step (KV and
    their gradients), as the course notes' ring estimate ``3 (cp-1)`` volumes per layer assumes."""
    return 2 * ACT_BYTES * shape.tokens * model.kv_width / shape.tp


def mlp_cost(model: ModelSpec, shape: Shape, kind: str, layer: int) -> OpCost:
    """MLP block of ``layer``; an MoE layer without expert parallelism costs its active experts."""
    if model.is_moe_layer(layer):
        params = model.top_k * model.expert_params() + model.shared_expert_params() + model.router_params()
        width = model.top_k * model.moe_ffn
    else:
        params = model.dense_mlp_params()
        width = model.ffn
    gemm = _gemm(shape.tokens, params, shape.tp)
    io = _io_bytes(model, shape, params, model.hidden + width)
    if kind in ("F", "I", "W"):
        return OpCost(gemm, io)
    if kind == "B":
        return OpCost(2 * gemm, 2 * io)
    raise ValueError(kind)


def embedding_cost(model: ModelSpec, shape: Shape, kind: str) -> OpCost:
    """Token (and learned position) embedding on the first stage: a gather forward, a scatter-add in W."""
    rows = ACT_BYTES * shape.tokens * model.hidden / (shape.tp if shape.sp else 1)
    if kind == "F":
        return OpCost(0.0, 2 * rows)
    if kind in ("W", "B"):
        return OpCost(0.0, 3 * rows)
    return ZERO


def logits_bytes(model: ModelSpec, shape: Shape) -> float:
    """Bytes of one micro-batch's logits on one rank of the last stage: tokens x V / t (the
    vocabulary split over TP), 4 bytes each as the cross-entropy runs in fp32. The LM head's
    forward writes them, the loss reads them, and they stay allocated until the LM head's
    backward."""
    return BYTES_FP32 * shape.tokens * model.vocab / shape.tp


def lm_head_cost(model: ModelSpec, shape: Shape, kind: str) -> OpCost:
    """Final norm, output projection (2 n h V / t per pass) and cross-entropy on the last stage."""
    gemm = 2.0 * shape.tokens * model.hidden * model.vocab / shape.tp
    logits = logits_bytes(model, shape)  # written and read
    weights = BYTES_PARAM * model.hidden * model.vocab / shape.tp
    if kind == "F":
        return OpCost(gemm, weights + 2 * logits)
    if kind in ("I", "W"):
        return OpCost(gemm, weights + logits)
    if kind == "B":
        return OpCost(2 * gemm, 2 * (weights + logits))
    raise ValueError(kind)


# ---- mixture of experts ----------------------------------------------------------------------

MOE_PASSES = {"F": 1, "I": 1, "W": 1, "B": 2}  # GEMM passes of each kind (B = I + W)


@dataclass(frozen=True)
class MoeCosts:
    """The work of one MoE block for one pass on one rank."""

    router: OpCost  # the gate over the rank's tokens
    experts: OpCost  # the routed experts of the busiest EP rank
    shared: OpCost | None  # the shared experts; None without them
    all_to_all_bytes: float  # dispatch (= combine) volume of the busiest EP rank


def moe_tokens(shape: Shape, expert_tp: int) -> float:
    """Tokens entering one rank's MoE block: with sequence parallelism they stay split across
    the TP ranks (expert TP 1), with expert TP > 1 they are gathered over the expert-TP group
    first (Megatron-LM's all-to-all token dispatcher, ``megatron/core/transformer/moe``)."""
    tokens = shape.tokens / shape.tp if shape.sp else shape.tokens
    if expert_tp > 1:
        tokens = shape.tokens
    return tokens


def _moe_gemm(model: ModelSpec, params: float, tokens: float, passes: int, split: int) -> OpCost:
    """``passes`` GEMMs of ``params`` weights split ``split`` ways over ``tokens`` tokens
    (2 n P FLOPs each), reading the weight shard and four activation tensors of width h."""
    return OpCost(2.0 * tokens * params * passes / split,
                  BYTES_PARAM * params / split + 4 * ACT_BYTES * tokens * model.hidden)


def moe_costs(model: ModelSpec, shape: Shape, kind: str, expert_tp: int, load_factor: float = 1.0) -> MoeCosts:
    """Router, routed experts, shared experts and all-to-all volume of one MoE block in pass
    ``kind`` (F, I, W or B).

    Each token goes to ``top_k`` routed experts; the busiest EP rank receives (dispatch) and
    sends back (combine) ``load_factor`` times the mean volume
    (:func:`simtrain.workload.moe_routing.load_factors`), and a direct all-to-all lasts as long as
    its busiest rank's transfers. Routed experts are split over the expert-TP group; shared
    experts (DeepSeek-V3, arXiv:2412.19437, section 2.1.2) run over all the rank's tokens as a
    dense MLP split over the TP group (Megatron-LM's ``megatron/core/transformer/moe``).
    """
    tokens = moe_tokens(shape, expert_tp)
    routed = tokens * model.top_k * load_factor
    a2a = ACT_BYTES * tokens * model.top_k * model.hidden * load_factor
    passes = MOE_PASSES[kind]
    experts = _moe_gemm(model, model.expert_params(), routed, passes, expert_tp)
    shared = (_moe_gemm(model, model.shared_expert_params(), shape.tokens, passes, shape.tp)
              if model.shared_experts else None)
    router = _moe_gemm(model, model.router_params(), tokens, passes, 1)
    return MoeCosts(router=router, experts=experts, shared=shared, all_to_all_bytes=a2a)


def optimizer_cost(params_on_rank: float, shard: int) -> OpCost:
    """One Adam step over this rank's optimizer shard: memory-bound, BYTES_ADAM_STEP per parameter."""
    return OpCost(0.0, BYTES_ADAM_STEP * params_on_rank / shard)


# ---- communication sizes (bytes) -------------------------------------------------------------

def tp_collective_bytes(model: ModelSpec, shape: Shape) -> float:
    """Bytes of the full activation a TP collective assembles: tokens x hidden in bf16.

    With sequence parallelism this is the all-gather output / reduce-scatter input; without, the
    all-reduce buffer. Either way the ring moves 2 (t-1)/t of it per block pair (Megatron-LM).
    """
    return ACT_BYTES * shape.tokens * model.hidden


def pp_activation_bytes(model: ModelSpec, shape: Shape) -> float:
    """Bytes sent between pipeline stages per micro-batch (activations forward, gradients back);
    with sequence parallelism each TP rank sends its 1/t share."""
    return ACT_BYTES * shape.tokens * model.hidden / (shape.tp if shape.sp else 1)


# ---- memory ----------------------------------------------------------------------------------

def layer_activation_bytes(model: ModelSpec, shape: Shape, full_recompute: bool) -> float:
    """Activations one layer keeps for one micro-batch until its backward (Korthikanti table 2)."""
    sbh = shape.tokens * model.hidden
    t = shape.tp
    if full_recompute:
        return 2.0 * sbh / (t if shape.sp else 1)
    if shape.sp or t == 1:
        return 34.0 * sbh / t
    return sbh * (10.0 + 24.0 / t)


def static_bytes(params_on_rank: float, zero: int, dp_shard: int) -> float:
    """Weights, gradients and optimizer state of ``params_on_rank`` under ZeRO ``zero``."""
    w, g, o = BYTES_PARAM, BYTES_GRAD, BYTES_OPTIMIZER
    if zero >= 1:
        o /= dp_shard
    if zero >= 2:
        g /= dp_shard
    if zero >= 3:
        w /= dp_shard
    return params_on_rank * (w + g + o)
