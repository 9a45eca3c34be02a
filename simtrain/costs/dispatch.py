"""What an expert-parallel all-to-all carries: Megatron-LM's token dispatcher or DeepEP's.

* ``alltoall`` (Megatron-LM's ``MoEAlltoAllTokenDispatcher``,
  ``megatron/core/transformer/moe/token_dispatcher.py``): each token travels once per routed
  expert, ``top_k`` copies in bf16, whatever GPU or node the experts sit on.
* ``deepep`` (DeepSeek-V3 report, arXiv:2412.19437, section 3.2.2; deepseek-ai/DeepEP, which
  Megatron-LM runs with ``--moe-enable-deepep``): a token crosses the scale-out network once per
  distinct destination *node*, to the GPU of its own rail there, which forwards it over NVLink to
  the GPUs holding its experts; inside a node it travels once per distinct destination *GPU*. The
  combine mirrors it (partial sums are added inside the node before they go back).

Both carry the bf16 hidden states, FP8 training or not. DeepSeek-V3's own framework dispatches
in FP8 (the report's section 3.3.4), but Megatron-LM hands DeepEP the bf16 tensor
(``megatron/core/transformer/moe/fused_a2a.py``, ``FusedDispatch``; its HybridEP path says
"Currently, we do not support fp8 dispatch"): TransformerEngine casts the tokens to FP8 inside
the experts' grouped GEMM, after the dispatch.

Node-limited routing (section 2.1.2; ``n_group`` and ``topk_group`` in DeepSeek-V3's
``config.json``) sends each token to experts of at most ``expert_groups_per_token`` of
``expert_groups`` groups; where the groups align with the EP nodes, this caps the nodes a token
reaches. :func:`hit_probability` gives the chance that a block of experts (one node's, one
GPU's) receives at least one copy of a token, for uniform routing.

The simulated all-to-all sends ``nbytes / n`` from each of the ``n`` members to each other
(:func:`simtrain.network.phases.direct_phases`). :func:`a2a_rows` returns, per token, the rows of
an all-to-all buffer whose share to the other nodes is exactly what DeepEP puts on the NICs
(or, inside one node, on NVLink): the scale-out network is the bottleneck DeepEP is built
around, so its time is right; the NVLink forwarding beside it is not simulated separately (it
has 3x or more the bandwidth and DeepEP overlaps it with the network transfers, section 3.2.2).
"""

from __future__ import annotations

from math import comb

from simtrain.costs.mlp import moe_tokens
from simtrain.costs.shape import ACT_BYTES, Shape
from simtrain.specs.model import ModelSpec

def _miss(pool: int, block: int, k: int) -> float:
    """Chance that ``k`` distinct experts drawn uniformly from ``pool`` miss a given ``block``."""
    return comb(pool - block, k) / comb(pool, k) if pool - block >= k else 0.0


def hit_probability(model: ModelSpec, block: int) -> float:
    """Chance that a token routes at least one of its ``top_k`` experts into a given contiguous
    ``block`` of experts, for uniform routing within the token's allowed groups.

    Without a group limit: ``1 - C(E - b, k) / C(E, k)``. With ``M`` of ``G`` groups of
    ``s = E / G`` experts: a block inside one group is reached only if its group is chosen
    (``M / G``), then as above within the ``M s`` allowed experts; a block of ``g`` whole groups
    sums over how many of them are chosen (hypergeometric). A block that cuts groups any other
    way is treated as without a limit (an upper bound)."""
    e, k = model.num_experts, model.top_k
    groups, chosen = model.expert_groups, model.expert_groups_per_token
    if chosen == 0 or chosen >= groups:
        return 1.0 - _miss(e, block, k)
    size = e // groups
    pool = chosen * size
    if block <= size and size % block == 0:
        return chosen / groups * (1.0 - _miss(pool, block, k))
    if block % size == 0:
        g = block // size
        return sum(comb(g, j) * comb(groups - g, chosen - j) / comb(groups, chosen) * (1.0 - _miss(pool, j * size, k))
                   for j in range(1, min(g, chosen) + 1))
    return 1.0 - _miss(e, block, k)


def a2a_rows(model: ModelSpec, dispatcher: str, ep: int, ep_per_node: int) -> float:
    """Rows (token copies) per token of one all-to-all buffer (see the module docstring) on an EP
    group of ``ep`` ranks, ``ep_per_node`` of them on each node.

    ``alltoall``: ``top_k``. ``deepep`` across ``N = ep / ep_per_node`` nodes: the expected
    distinct other nodes a token reaches, ``(N - 1) P(node)``, scaled by ``ep / (ep - ep_per_node)``
    so that the buffer's share to other nodes is that; inside one node: the distinct other GPUs,
    ``(ep - 1) P(GPU)``, scaled by ``ep / (ep - 1)``."""
    if dispatcher == "alltoall" or ep == 1:
        return float(model.top_k)
    per_rank = model.num_experts // ep
    nodes = ep // ep_per_node
    if nodes > 1:
        return (nodes - 1) * hit_probability(model, per_rank * ep_per_node) * ep / (ep - ep_per_node)
    return (ep - 1) * hit_probability(model, per_rank) * ep / (ep - 1)


def a2a_bytes(model: ModelSpec, shape: Shape, rows: float, load: float = 1.0) -> float:
    """Bytes of one all-to-all buffer of one rank: its tokens (:func:`~simtrain.costs.mlp.moe_tokens`)
    times ``rows`` per token (:func:`a2a_rows`), ``hidden`` bf16 values each, times
    ``load`` (the busiest EP rank's over the mean: a direct all-to-all lasts as long as its busiest
    rank's transfers)."""
    return ACT_BYTES * moe_tokens(shape) * rows * model.hidden * load
