"""The cost model: the kernels each operation of one rank runs, their FLOPs, bytes and times, and
the sizes of its communication and memory.

Everything here is a function of the specs; nothing touches the simulation. Modules:

* :mod:`~simtrain.costs.kernels`: the kernel vocabulary (GEMM, fused attention, elementwise) and
  :class:`OpCost`, an operation's kernels;
* :mod:`~simtrain.costs.shape`: :class:`Shape`, a rank's micro-batch, and linear layers' GEMMs;
* :mod:`~simtrain.costs.elementwise`, :mod:`~simtrain.costs.attention`,
  :mod:`~simtrain.costs.mlp`, :mod:`~simtrain.costs.ends`: the kernels of each block and pass;
* :mod:`~simtrain.costs.timing` (with the architectures' profiles in
  :mod:`simtrain.specs.arch`): kernel times per GPU architecture (GEMM efficiency by shape,
  attention, memory-bound kernels, launches); :mod:`~simtrain.costs.dispatch`: the MoE
  token dispatch; :mod:`~simtrain.costs.measure`: the kernels ``simtrain calibrate`` measures;
* :mod:`~simtrain.costs.calibration`: measured kernel times that replace the model;
* :mod:`~simtrain.costs.sizes`: communication volumes and memory.

Conventions (multiply-add = 2 FLOPs): a GEMM over ``n`` tokens with ``P`` weights costs
``2 n P`` FLOPs forward, the same for the input gradient (pass I) and for the weight gradient
(pass W); a causal attention core costs ``2 s_kv (d_qk + d_v) / 2`` FLOPs per query token and
head forward and 2.5 times that backward (fused) or the full square twice (eager); it has no
weights and so no W. An operation's time is the sum of its kernels' times.
"""

from simtrain.costs.attention import attention_cost, attention_parts, cp_kv_bytes, cp_step_core
from simtrain.costs.ends import embedding_cost, lm_head_cost, logits_bytes, optimizer_cost
from simtrain.costs.kernels import ZERO, OpCost
from simtrain.costs.mlp import (MoeCosts, mlp_cost, mlp_parts, moe_cost, moe_costs, moe_etp_bytes,
                                moe_etp_gather, moe_routed_rows, moe_tokens)
from simtrain.costs.shape import Shape
from simtrain.costs.sizes import (BYTES_PARAM, layer_activation_bytes, pp_activation_bytes, static_bytes,
                                  tp_collective_bytes)
from simtrain.costs.timing import KernelTimer

__all__ = ["BYTES_PARAM", "KernelTimer", "MoeCosts", "OpCost", "Shape", "ZERO", "attention_cost",
           "attention_parts", "cp_kv_bytes", "cp_step_core", "embedding_cost", "layer_activation_bytes",
           "lm_head_cost", "logits_bytes", "mlp_cost", "mlp_parts", "moe_cost", "moe_costs",
           "moe_etp_bytes", "moe_etp_gather", "moe_routed_rows", "moe_tokens", "optimizer_cost",
           "pp_activation_bytes", "static_bytes", "tp_collective_bytes"]
