"""Per-layer emission: the attention and MLP (or MoE) blocks of one layer for one pass and
micro-batch, with the communication that sits between them.

* TP (Megatron-LM, ``megatron/core/tensor_parallel/mappings.py``): with sequence parallelism an
  all-gather before and a reduce-scatter after each of the attention and MLP blocks in the forward
  pass, and the mirror pair in the input-gradient pass; without it one all-reduce after each block
  forward and one after each block's input gradient. A TP collective blocks the next block of the
  same micro-batch.
* CP: ring attention (Liu et al. 2023; Megatron-LM/TransformerEngine's ``cp_comm_type=p2p``).
* EP: dispatch and combine all-to-alls around the routed experts (Megatron-LM's all-to-all token
  dispatcher, ``megatron/core/transformer/moe``).
* Recompute: a fully recomputed layer runs its forward again (kind R) right before its backward.
"""

from __future__ import annotations

from simtrain import costs
from simtrain.schedules.ir import Schedule
from simtrain.specs.parallel import ParallelSpec
from simtrain.workload.data_parallel import DataParallelOps
from simtrain.workload.emit import Emitter
from simtrain.workload.program import STREAM, Op


class Blocks:
    """Emits the ops of one layer; ``last`` arguments and return values are op ids (``None``:
    nothing before)."""

    def __init__(self, em: Emitter, dp: DataParallelOps, par: ParallelSpec, schedule: Schedule,
                 chunks: list[range], tp_comm: bool, load_factor: dict[int, float]):
        self.em, self.dp, self.par, self.sched, self.chunks = em, dp, par, schedule, chunks
        self.tp_comm = tp_comm
        self.load_factor = load_factor  # MoE layer -> busiest EP rank's load over the mean
        self.recompute_layers = par.recompute_layers(max(len(c) for c in chunks))
        self.selective = par.recompute == "selective"
        sp = par.sequence_parallel
        self.pre, self.post = ("all_gather", "reduce_scatter") if sp else (None, "all_reduce")

    def recomputed(self, stage: int, layer: int) -> bool:
        """Whether ``layer`` of schedule stage ``stage`` runs a full recompute before its backward."""
        chunk = self.chunks[self.sched.chunk_of_stage(stage)]
        return layer - chunk.start < self.recompute_layers

    def _kept_bytes(self, stage: int, layer: int) -> float:
        """Activations of ``layer`` its backward releases: what the forward kept, plus the full
        set a recompute rebuilt."""
        m, sh = self.em.model, self.em.shape
        rc = self.recomputed(stage, layer)
        free = costs.layer_activation_bytes(m, sh, full_recompute=rc, selective=self.selective)
        if rc:
            free += costs.layer_activation_bytes(m, sh, full_recompute=False, selective=self.selective)
        return free

    def tp(self, rank: int, op_name: str | None, stage: int, layer: int, mb: int, last: int | None) -> int | None:
        """A TP collective after ``last`` (none when ``op_name`` is None or TP is off). When ``last``
        is itself the TP collective emitted just before (a reduce-scatter closing one block, the
        all-gather opening the next, with no compute between them), the two become one op running
        both back to back: same timing, half the events."""
        if op_name is None or self.par.tp == 1 or not self.tp_comm:
            return last
        em = self.em
        ops = em.prog.ops
        if last is not None and last == len(ops) - 1 and ops[last].stream == STREAM["tp"]:
            prev = ops[last]
            prev.comm = f"{prev.comm}+{op_name}"
            prev.name = f"{prev.name}+{op_name}"
            prev.nbytes += costs.tp_collective_bytes(em.model, em.shape)
            return last
        op = em.collective(rank, "tp", "tp", op_name, costs.tp_collective_bytes(em.model, em.shape),
                           stage, layer, mb, [last] if last is not None else [])
        return op.id

    # ---- passes of one layer ----------------------------------------------------------------
    def forward_layer(self, rank: int, stage: int, layer: int, mb: int, last: int | None,
                      kind: str = "F") -> int | None:
        """Attention and MLP forward of one layer (kind R when it is a recompute)."""
        em = self.em
        if kind == "F":
            self.dp.layer_started(self.dp.gather_layer(rank, stage, layer, mb))
            alloc = costs.layer_activation_bytes(em.model, em.shape, full_recompute=self.recomputed(stage, layer),
                                                 selective=self.selective)
        else:  # the recompute rebuilds the full activation set
            alloc = costs.layer_activation_bytes(em.model, em.shape, full_recompute=False, selective=self.selective)
        last = self.tp(rank, self.pre, stage, layer, mb, last)
        first, op = self._attention(rank, kind, "F", stage, layer, mb, last, alloc=alloc)
        self.dp.first_use(stage, layer, first)
        last = self.tp(rank, self.post, stage, layer, mb, op.id)
        if em.model.is_moe_layer(layer):
            return self._moe(rank, kind, "F", stage, layer, mb, last)
        last = self.tp(rank, self.pre, stage, layer, mb, last)
        op = em.compute(rank, kind, f"mlp.{kind}", stage, layer, mb, em.cost(costs.mlp_cost, "F"), last)
        return self.tp(rank, self.post, stage, layer, mb, op.id)

    def backward_layer(self, rank: int, stage: int, layer: int, mb: int, last: int | None,
                       kind: str) -> int | None:
        """Input-gradient (and, for B, weight-gradient) of one layer, recompute first if due."""
        em = self.em
        first = self.dp.gather_layer(rank, stage, layer, mb)
        if self.recomputed(stage, layer) and kind in ("B", "I"):
            last = self.forward_layer(rank, stage, layer, mb, last, kind="R")
        self.dp.layer_started(first)
        free = self._kept_bytes(stage, layer)
        if em.model.is_moe_layer(layer):
            last = self._moe(rank, kind, kind, stage, layer, mb, last)
        else:
            last = self.tp(rank, self.pre, stage, layer, mb, last)
            op = em.compute(rank, kind, f"mlp.{kind}", stage, layer, mb, em.cost(costs.mlp_cost, kind), last)
            self.dp.grad_done(stage, layer, op, kind)
            last = self.tp(rank, self.post, stage, layer, mb, op.id)
        last = self.tp(rank, self.pre, stage, layer, mb, last)
        _, op = self._attention(rank, kind, kind, stage, layer, mb, last, free=free if kind == "B" else 0.0)
        self.dp.grad_done(stage, layer, op, kind)
        return self.tp(rank, self.post, stage, layer, mb, op.id)

    def weight_layer(self, rank: int, stage: int, layer: int, mb: int, last: int | None) -> int:
        """Weight gradient (pass W) of one layer; it releases the layer's activations."""
        em = self.em
        free = self._kept_bytes(stage, layer)
        if em.model.is_moe_layer(layer):
            last = self._moe(rank, "W", "W", stage, layer, mb, last)
        else:
            op = em.compute(rank, "W", "mlp.W", stage, layer, mb, em.cost(costs.mlp_cost, "W"), last)
            self.dp.grad_done(stage, layer, op, "W")
            last = op.id
        op = em.compute(rank, "W", "attn.W", stage, layer, mb, em.cost(costs.attention_cost, "W"), last, free=free)
        self.dp.grad_done(stage, layer, op, "W")
        return op.id

    # ---- blocks -----------------------------------------------------------------------------
    def _attention(self, rank: int, kind: str, pass_kind: str, stage: int, layer: int, mb: int,
                   last: int | None, alloc: float = 0.0, free: float = 0.0) -> tuple[Op, Op]:
        """The attention block of one pass; with CP its core runs in ``cp`` ring steps.

        Ring attention (Liu et al. 2023; Megatron-LM/TransformerEngine's ``cp_comm_type=p2p``
        with load-balanced causal chunks): step i computes the local queries against the K/V
        block received at step i-1 while the next block travels on the CP stream, so the
        transfers hide behind the chunks unless a chunk is shorter than a transfer. Backward
        steps pass K/V and their gradients. Returns (first op, last op).
        """
        em, cp = self.em, self.par.cp
        if cp == 1:
            op = em.compute(rank, kind, f"attn.{kind}", stage, layer, mb,
                            em.cost(costs.attention_cost, pass_kind, self.selective), last,
                            alloc=alloc, free=free)
            return op, op
        first_cost, _, last_cost = em.cost(costs.attention_parts, pass_kind, self.selective)
        backward = pass_kind in ("I", "B")
        names = ("proj_out", "proj_qkv") if backward else ("proj_qkv", "proj_out")
        first = em.compute(rank, kind, f"attn.{names[0]}.{kind}", stage, layer, mb, first_cost, last, alloc=alloc)
        step_bytes = costs.cp_kv_bytes(em.model, em.shape) * (2 if backward else 1)
        chunk_cost = em.cost(costs.cp_step_core, pass_kind, self.selective)
        prev = first.id
        transfer = None
        for i in range(cp):
            deps = [prev] if transfer is None else [prev, transfer]
            if i < cp - 1:  # forward the block this step uses to the next rank
                transfer = em.collective(rank, "cp", "cp", "ring_shift", step_bytes, stage, layer, mb,
                                         [first.id] if i == 0 else []).id
            prev = em.emit(rank, "compute", kind, f"attn.core.{kind}", stage, layer, mb, deps, chunk_cost).id
        op = em.compute(rank, kind, f"attn.{names[1]}.{kind}", stage, layer, mb, last_cost, prev, free=free)
        return first, op

    def _moe(self, rank: int, kind: str, pass_kind: str, stage: int, layer: int, mb: int,
             last: int | None) -> int | None:
        """An MoE block (costs: :func:`simtrain.costs.moe_costs`): router, dispatch all-to-all,
        routed experts (the busiest EP rank's load), shared experts beside the all-to-all,
        combine all-to-all; the backward mirrors it. With expert TP > 1 the tokens are gathered
        over the expert-TP group first and scattered back after the backward."""
        em, dp = self.em, self.dp
        etp = self.par.expert_tp
        c = em.cost(costs.moe_costs, pass_kind, etp, self.par.ep, self.load_factor.get(layer, 1.0))
        if pass_kind == "W":
            op = em.compute(rank, "W", "moe.experts.W", stage, layer, mb, c.experts, last)
            dp.grad_done(stage, layer, op, "W")
            if c.shared is not None:
                op = em.compute(rank, "W", "moe.shared.W", stage, layer, mb, c.shared, op.id)
            op = em.compute(rank, "W", "moe.router.W", stage, layer, mb, c.router, op.id)
            dp.grad_done(stage, layer, op, "W")
            return op.id
        backward = pass_kind != "F"
        if etp > 1 and not backward:
            last = self.tp(rank, "all_gather", stage, layer, mb, last)
        if not backward:
            last = em.compute(rank, kind, f"moe.router.{kind}", stage, layer, mb, c.router, last).id
        a2a = c.all_to_all_bytes
        first_a2a = self._a2a(rank, "combine" if backward else "dispatch", stage, layer, mb, a2a, last)
        side = last
        if c.shared is not None:
            side = em.compute(rank, kind, f"moe.shared.{kind}", stage, layer, mb, c.shared, last).id
        op = em.compute(rank, kind, f"moe.experts.{kind}", stage, layer, mb, c.experts, first_a2a)
        if side is not None and side not in op.deps:
            op.deps.append(side)
        dp.grad_done(stage, layer, op, pass_kind)
        last = self._a2a(rank, "dispatch" if backward else "combine", stage, layer, mb, a2a, op.id)
        if backward:
            op = em.compute(rank, kind, f"moe.router.{kind}", stage, layer, mb, c.router, last)
            dp.grad_done(stage, layer, op, pass_kind)
            last = op.id
        if etp > 1 and backward:
            last = self.tp(rank, "reduce_scatter", stage, layer, mb, last)
        return last

    def _a2a(self, rank: int, what: str, stage: int, layer: int, mb: int, nbytes: float,
             last: int | None) -> int | None:
        """An EP all-to-all (``what``: dispatch or combine) after ``last``; none without EP."""
        if self.par.ep == 1:
            return last
        op = self.em.collective(rank, "ep", "ep", "all_to_all", nbytes, stage, layer, mb, [last])
        op.name = f"ep.{what}"
        return op.id
