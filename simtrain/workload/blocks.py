"""Per-layer emission: the attention and MLP (or MoE) blocks of one layer for one pass and
micro-batch, with the communication that sits between them.

* TP (Megatron-LM, ``megatron/core/tensor_parallel/mappings.py``): with sequence parallelism an
  all-gather before and a reduce-scatter after each of the attention and MLP blocks in the forward
  pass, and the mirror pair in the input-gradient pass; without it one all-reduce after each block
  forward and one after each block's input gradient. A TP collective blocks the next block of the
  same micro-batch; in pass B the closing one runs beside the weight gradient, and the input's
  re-gather (sequence parallelism) beside the input gradient (:meth:`Blocks._block`). With
  ``--tp-comm-overlap`` the sequence-parallel collectives run in ``tp`` chunks beside their GEMM
  (TransformerEngine's userbuffers), so one chunk is exposed.
* CP: ring attention (Liu et al. 2023; Megatron-LM/TransformerEngine's ``cp_comm_type=p2p``).
* EP: dispatch and combine all-to-alls around the routed experts, expert-TP collectives and the
  shared experts (:mod:`simtrain.workload.moe_block`).
* Recompute: a fully recomputed layer runs its forward again (kind R) right before its backward;
  selective recompute's modules (``--recompute-modules``) run their forward kernels again inside
  the block's pass I (:mod:`simtrain.costs.attention`, :mod:`simtrain.costs.mlp`) and keep fewer
  activations (:func:`simtrain.costs.layer_activation_bytes`).
"""

from __future__ import annotations

from typing import cast

from simtrain import costs
from simtrain.costs import Shape
from simtrain.errors import SpecError
from simtrain.schedules.ir import Schedule
from simtrain.specs.model import ModelSpec
from simtrain.specs.parallel import ParallelSpec
from simtrain.workload.data_parallel import DataParallelOps
from simtrain.workload.emit import Emitter
from simtrain.workload.moe_block import MoeBlock
from simtrain.workload.program import STREAM, OpRef


#: Each dense block's column-parallel and row-parallel GEMMs: the first and last of its forward.
_GEMMS = {"attn": ("proj_qkv", "proj_out"), "mlp": ("fc1", "fc2")}


def _joined(model: ModelSpec, shape: Shape, a: costs.OpCost, b: costs.OpCost) -> costs.OpCost:
    """The kernels of ``a`` then ``b`` as one cost (through :meth:`Emitter.cost`, built once)."""
    return a + b


class DenseBlocks:
    """Emits a dense block (attention or MLP) of one pass with its TP collectives; ``last``
    arguments and return values are op ids (``None``: nothing before)."""

    def __init__(self, em: Emitter, dp: DataParallelOps, par: ParallelSpec, tp_comm: bool,
                 selective: tuple[str, ...]):
        self.em, self.dp, self.par, self.tp_comm, self.selective = em, dp, par, tp_comm, selective
        sp = par.sequence_parallel
        self.pre: str | None
        self.post: str
        self.pre, self.post = ("all_gather", "reduce_scatter") if sp else (None, "all_reduce")
        self.regather = sp and tp_comm  # the weight gradient gathers the sharded input again
        self.chunked = par.tp_comm_overlap and tp_comm and par.tp > 1
        if self.chunked and not sp:
            raise SpecError("--tp-comm-overlap needs sequence parallelism (drop --no-sp)")

    def tp(self, rank: int, op_name: str | None, stage: int, layer: int, mb: int, last: int | None,
           share: float = 1.0, merge: bool = True) -> int | None:
        """A TP collective of ``share`` of a block's activation after ``last`` (none when
        ``op_name`` is None or TP is off). When ``last`` is itself the TP collective emitted just
        before (a reduce-scatter closing one block, the all-gather opening the next, with no
        compute between them) and ``merge``, the two become one op running both back to back:
        same timing, half the events."""
        if op_name is None or self.par.tp == 1 or not self.tp_comm:
            return last
        em = self.em
        ops = em.prog.ops
        nbytes = share * costs.tp_collective_bytes(em.model, em.shape)
        if merge and last is not None and last == len(ops) - 1 and ops[last].stream == STREAM["tp"]:
            prev = ops[last]
            prev.comm = f"{prev.comm}+{op_name}"
            prev.name = f"{prev.name}+{op_name}"
            prev.nbytes += nbytes
            return last
        op = em.collective(rank, "tp", "tp", op_name, nbytes, stage, layer, mb, [last] if last is not None else [])
        return op.id

    def _open(self, rank: int, stage: int, layer: int, mb: int, last: int | None) -> tuple[int | None, int | None]:
        """The collective opening a block: (what its first op waits for, what the rest of the
        block waits for). With TP overlap the all-gather runs in ``tp`` chunks beside the first
        GEMM's chunks, which wait only for the first one."""
        if not self.chunked:
            last = self.tp(rank, self.pre, stage, layer, mb, last)
            return last, last
        t = self.par.tp
        head = self.tp(rank, self.pre, stage, layer, mb, last, share=1 / t)
        return head, self.tp(rank, self.pre, stage, layer, mb, head, share=(t - 1) / t, merge=False)

    def _parts(self, block: str, pass_kind: str) -> tuple[costs.OpCost, costs.OpCost, costs.OpCost]:
        """The (head, core, tail) costs of a dense block in pass F, I or W."""
        if block == "attn":
            return self.em.cost(costs.attention_parts, pass_kind, self.selective)
        return self.em.cost(costs.mlp_parts, pass_kind, self.selective)

    def weight_block(self, rank: int, block: str, stage: int, layer: int, mb: int, last: int | None,
                     free: float = 0.0) -> int:
        """Pass W of a dense block: one op, or with sequence parallelism the row-parallel part
        beside the input's re-gather, then the column-parallel part."""
        em = self.em
        if not self.regather:
            op = em.compute(rank, "W", f"{block}.W", stage, layer, mb, self._whole(block, "W"), last, free=free)
        else:
            head, _, tail = self._parts(block, "W")
            gathered = self.tp(rank, "all_gather", stage, layer, mb, last, merge=False)
            column, row = _GEMMS[block]
            op = em.compute(rank, "W", f"{block}.{row}.W", stage, layer, mb, head, last)
            op = em.compute(rank, "W", f"{block}.{column}.W", stage, layer, mb, tail, op.id, free=free)
            op.deps.append(cast(int, gathered))  # emitted: regathering is sequence parallelism (TP > 1), TP comm on
        self.dp.grad_done(stage, layer, op, "W")
        return op.id

    def _whole(self, block: str, pass_kind: str) -> costs.OpCost:
        """The cost of a dense block in one op."""
        if block == "attn":
            return self.em.cost(costs.attention_cost, pass_kind, self.selective)
        return self.em.cost(costs.mlp_cost, pass_kind, self.selective)

    def block(self, rank: int, block: str, kind: str, stage: int, layer: int, mb: int, last: int | None,
              alloc: float = 0.0, free: float = 0.0) -> tuple[OpRef, int | None]:
        """A dense block (``attn`` or ``mlp``) of pass F, R, B or I between its TP collectives;
        returns (its first compute op, what the next block waits for).

        Backward B as Megatron-LM's ``LinearWithGradAccumulationAndAsyncCommunication``
        (``megatron/core/tensor_parallel/layers.py``): the row-parallel GEMM's input and weight
        gradients, the core's backward, then the column-parallel GEMM's input gradient while the
        layer input is gathered again (sequence parallelism keeps only its shard), then its weight
        gradient while the input gradient is reduce-scattered (all-reduced without sequence
        parallelism). With TP overlap (TransformerEngine's userbuffers) the opening all-gather and,
        where no weight gradient hides it, the closing reduce-scatter run in ``tp`` chunks beside
        the adjacent GEMM (see :meth:`_open`, :meth:`_close`)."""
        em = self.em
        pk = "F" if kind == "R" else kind
        split = pk == "B" and self.par.tp > 1 and self.tp_comm
        ring = block == "attn" and self.par.cp > 1
        start, rest = self._open(rank, stage, layer, mb, last)
        if not (split or ring or self.chunked):
            op = em.compute(rank, kind, f"{block}.{kind}", stage, layer, mb, self._whole(block, pk), start,
                            alloc=alloc, free=free)
            self.dp.grad_done(stage, layer, op, kind)
            return op, self.tp(rank, self.post, stage, layer, mb, op.id)
        head, core, tail = self._parts(block, "I" if split else pk)
        w_head, w_tail = self._parts(block, "W")[::2] if split else (costs.ZERO, costs.ZERO)
        names = _GEMMS[block][::-1] if pk in ("I", "B") else _GEMMS[block]
        first = em.compute(rank, kind, f"{block}.{names[0]}.{kind}", stage, layer, mb, em.cost(_joined, head, w_head), start,
                           alloc=alloc)
        if ring:
            before_tail = self._ring(rank, kind, pk, stage, layer, mb, first.id, rest)
        else:
            before_tail = em.emit(rank, "compute", kind, f"{block}.core.{kind}", stage, layer, mb,
                                  [first.id, rest], core).id
        gathered = self.tp(rank, "all_gather", stage, layer, mb, before_tail, merge=False) \
            if split and self.regather else None
        op = em.compute(rank, kind, f"{block}.{names[1]}.{kind}", stage, layer, mb, tail, before_tail,
                        free=0.0 if split else free)
        if not split:
            self.dp.grad_done(stage, layer, op, kind)
            return first, self._close(rank, stage, layer, mb, before_tail, op.id)
        if not self.par.tp_backward_overlap:  # one after another: re-gather, input gradient, its collective
            if gathered is not None:
                op.deps.append(gathered)
            post = self.tp(rank, self.post, stage, layer, mb, op.id, merge=False)
            w = em.compute(rank, kind, f"{block}.{names[1]}.wgrad.{kind}", stage, layer, mb, w_tail, post,
                           free=free)
            self.dp.grad_done(stage, layer, w, kind)
            return first, post
        w = em.compute(rank, kind, f"{block}.{names[1]}.wgrad.{kind}", stage, layer, mb, w_tail, op.id, free=free)
        if gathered is not None:
            w.deps.append(gathered)
        self.dp.grad_done(stage, layer, w, kind)
        return first, self.tp(rank, self.post, stage, layer, mb, op.id, merge=False)

    def _close(self, rank: int, stage: int, layer: int, mb: int, before: int, last: int) -> int | None:
        """The collective closing a block whose last GEMM runs in op ``last`` (started after op
        ``before``): whole after it, or with TP overlap in ``tp`` chunks beside it, the last
        chunk after it."""
        if not self.chunked:
            return self.tp(rank, self.post, stage, layer, mb, last)
        t = self.par.tp
        beside = self.tp(rank, self.post, stage, layer, mb, before, share=(t - 1) / t, merge=False)
        tail = self.tp(rank, self.post, stage, layer, mb, last, share=1 / t, merge=False)
        self.em.prog.ops[cast(int, tail)].deps.append(cast(int, beside))  # chunked: both emitted (TP > 1, on)
        return tail

    def _ring(self, rank: int, kind: str, pass_kind: str, stage: int, layer: int, mb: int, first: int,
              rest: int | None) -> int:
        """The attention core as ``cp`` ring steps after op ``first``; returns the last step.

        Ring attention (Liu et al. 2023; Megatron-LM/TransformerEngine's ``cp_comm_type=p2p``
        with load-balanced causal chunks): step i computes the local queries against the K/V
        block received at step i-1 while the next block travels on the CP stream, so the
        transfers hide behind the chunks unless a chunk is shorter than a transfer. Backward
        steps pass K/V and their gradients.
        """
        em, cp = self.em, self.par.cp
        backward = pass_kind in ("I", "B")
        step_bytes = costs.cp_kv_bytes(em.model, em.shape) * (2 if backward else 1)
        chunk_cost = em.cost(costs.cp_step_core, pass_kind, self.selective)
        prev = first
        transfer = None
        for i in range(cp):
            deps = [prev, rest] if transfer is None else [prev, transfer]
            if i < cp - 1:  # forward the block this step uses to the next rank
                transfer = em.collective(rank, "cp", "cp", "ring_shift", step_bytes, stage, layer, mb,
                                         [first] if i == 0 else []).id
            prev = em.emit(rank, "compute", kind, f"attn.core.{kind}", stage, layer, mb, deps, chunk_cost).id
        return prev


class Blocks:
    """Emits the ops of one layer (its dense blocks through :class:`DenseBlocks`); ``last``
    arguments and return values are op ids (``None``: nothing before)."""

    def __init__(self, em: Emitter, dp: DataParallelOps, par: ParallelSpec, schedule: Schedule,
                 chunks: list[range], tp_comm: bool, loads: dict[int, tuple[float, ...]]):
        self.em, self.dp, self.par, self.sched, self.chunks = em, dp, par, schedule, chunks
        self.recompute_layers = par.recompute_layers(max(len(c) for c in chunks))
        self.selective = par.recomputed_modules  # selective recompute's modules; () for other policies
        self.dense = DenseBlocks(em, dp, par, tp_comm, self.selective)
        self.tp = self.dense.tp
        self.moe = MoeBlock(em, dp, par, tp_comm, loads, self.dense)  # loads: MoE layer -> per EP rank

    def recomputed(self, stage: int, layer: int) -> bool:
        """Whether ``layer`` of schedule stage ``stage`` runs a full recompute before its backward."""
        chunk = self.chunks[self.sched.chunk_of_stage(stage)]
        return layer - chunk.start < self.recompute_layers

    def _kept_bytes(self, stage: int, layer: int) -> float:
        """Activations of ``layer`` its backward releases: what the forward kept, plus the full
        set a recompute rebuilt."""
        rc = self.recomputed(stage, layer)
        free = self._activations(layer, rc)
        if rc:
            free += self._activations(layer, False)
        return free

    def _activations(self, layer: int, full_recompute: bool) -> float:
        """Activations ``layer`` keeps for its backward (:func:`simtrain.costs.layer_activation_bytes`)."""
        m = self.em.model
        return self.em.cost(costs.layer_activation_bytes, full_recompute, self.selective, m.is_moe_layer(layer),
                            self.par.expert_tp)

    # ---- passes of one layer ----------------------------------------------------------------
    def forward_layer(self, rank: int, stage: int, layer: int, mb: int, last: int | None,
                      kind: str = "F") -> int | None:
        """Attention and MLP forward of one layer (kind R when it is a recompute)."""
        em = self.em
        if kind == "F":
            self.dp.layer_started(self.dp.gather_layer(rank, stage, layer, mb))
            alloc = self._activations(layer, self.recomputed(stage, layer))
        else:  # the recompute rebuilds the full activation set
            alloc = self._activations(layer, False)
        first, last = self.dense.block(rank, "attn", kind, stage, layer, mb, last, alloc=alloc)
        self.dp.first_use(stage, layer, first)
        if em.model.is_moe_layer(layer):
            return self._moe(rank, kind, "F", stage, layer, mb, last)
        return self.dense.block(rank, "mlp", kind, stage, layer, mb, last)[1]

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
            last = self.dense.block(rank, "mlp", kind, stage, layer, mb, last)[1]
        return self.dense.block(rank, "attn", kind, stage, layer, mb, last, free=free if kind == "B" else 0.0)[1]

    def weight_layer(self, rank: int, stage: int, layer: int, mb: int, last: int | None) -> int:
        """Weight gradient (pass W) of one layer; it releases the layer's activations. With
        sequence parallelism each block first gathers its input again for its column-parallel
        GEMM's weight gradient, beside the row-parallel GEMM's."""
        em = self.em
        free = self._kept_bytes(stage, layer)
        if em.model.is_moe_layer(layer):
            last = self._moe(rank, "W", "W", stage, layer, mb, last)
        else:
            last = self.dense.weight_block(rank, "mlp", stage, layer, mb, last)
        return self.dense.weight_block(rank, "attn", stage, layer, mb, last, free=free)

    def _moe(self, rank: int, kind: str, pass_kind: str, stage: int, layer: int, mb: int,
             last: int | None) -> int | None:
        """An MoE block with its dispatch, expert-TP and shared-expert communication
        (:class:`simtrain.workload.moe_block.MoeBlock`)."""
        return self.moe.emit(rank, kind, pass_kind, stage, layer, mb, last)
