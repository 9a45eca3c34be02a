"""The MoE block of one layer for one pass and micro-batch, with its communication.

As Megatron-LM's all-to-all token dispatcher (``megatron/core/transformer/moe/token_dispatcher.py``,
``MoEAlltoAllTokenDispatcher``) runs it, forward:

1. the router over the rank's own (sequence-parallel) tokens;
2. the dispatch all-to-all over the EP group, carrying those tokens' ``top_k`` copies (not the
   TP-gathered tokens);
3. with expert TP > 1, an all-gather of the received rows over the expert-TP group
   (``gather_from_sequence_parallel_region``), the routed experts, a reduce-scatter back
   (``reduce_scatter_to_sequence_parallel_region``);
4. the combine all-to-all.

The input-gradient pass mirrors it (combine's gradient, all-gather, experts, reduce-scatter,
dispatch's gradient, router). Shared experts (``megatron/core/transformer/moe/shared_experts.py``)
run as a TP-sharded MLP on the sequence-parallel tokens, with the all-gather before and the
reduce-scatter after of a dense MLP (an all-reduce after without sequence parallelism), beside
the dispatch all-to-all: their compute runs while the tokens travel (Megatron-LM's
``--moe-shared-expert-overlap``, which NeMo's DeepSeek configs set). Without it (Megatron-LM's
default, ``moe_shared_expert_overlap`` False) ``MoELayer`` adds them to the combined output, so
they run after the combine, and in the input-gradient pass, the gradient of that last addend,
before the combine's gradient.

Under routing skew each EP rank computes its own share of the tokens (``load`` times the mean,
:func:`simtrain.workload.moe_routing.ep_loads`); the all-to-alls move the busiest rank's volume
and start when every member has arrived, so the less-loaded ranks wait at the combine for the
busiest.
"""

from __future__ import annotations

from typing import Protocol, cast

from simtrain import costs
from simtrain.costs import dispatch
from simtrain.specs.parallel import ParallelSpec
from simtrain.topology.mesh import DeviceMesh
from simtrain.workload.data_parallel import DataParallelOps
from simtrain.workload.emit import Emitter


def ep_ranks_per_node(mesh: DeviceMesh, rank: int) -> int:
    """Ranks of ``rank``'s EP group on each node the group spans."""
    group = mesh.group_of("ep", rank)
    return len(group) // len({mesh.node_of(r) for r in group})


class TpCollectives(Protocol):
    """The TP collectives of a dense block (:class:`simtrain.workload.blocks.DenseBlocks`)."""

    pre: str | None  # opening a block: all_gather with sequence parallelism, else none
    post: str  # closing it: reduce_scatter with sequence parallelism, else all_reduce
    regather: bool  # the weight gradient gathers the sharded input again

    def tp(self, rank: int, op_name: str | None, stage: int, layer: int, mb: int, last: int | None,
           share: float = 1.0, merge: bool = True) -> int | None: ...


class MoeBlock:
    """Emits MoE blocks; ``last`` arguments and return values are op ids (``None``: nothing
    before). ``loads`` maps an MoE layer to each EP position's load over the mean; ``dense``
    emits the shared experts' TP collectives as a dense MLP's."""

    def __init__(self, em: Emitter, dp: DataParallelOps, par: ParallelSpec, tp_comm: bool,
                 loads: dict[int, tuple[float, ...]], dense: TpCollectives) -> None:
        self.em, self.dp, self.par, self.tp_comm, self.loads = em, dp, par, tp_comm, loads
        self.dense = dense
        self.etp = costs.moe_etp_gather(em.shape, par.expert_tp)

    def load(self, rank: int, layer: int) -> tuple[float, float]:
        """(``rank``'s EP position's load, the busiest position's load) over the mean in ``layer``."""
        loads = self.loads.get(layer)
        if loads is None:
            return 1.0, 1.0
        return loads[self.em.mesh.expert.coords(rank)["ep"]], max(loads)

    def emit(self, rank: int, kind: str, pass_kind: str, stage: int, layer: int, mb: int,
             last: int | None) -> int | None:
        """An MoE block of pass F (kind F or R), B, I or W after op ``last``; returns what the next
        block waits for."""
        em, dp = self.em, self.dp
        own, busiest = self.load(rank, layer)
        c = em.cost(costs.moe_costs, pass_kind, self.par.expert_tp, self.par.ep, own, self.par.recomputed_modules,
                    self.par.moe_dispatcher)
        if pass_kind == "W":
            op = em.compute(rank, "W", "moe.experts.W", stage, layer, mb, c.experts, last)
            dp.grad_done(stage, layer, op, "W")
            if c.shared is not None:
                gathered = self._tp(rank, "all_gather", stage, layer, mb, last) if self.dense.regather else None
                op = em.compute(rank, "W", "moe.shared.W", stage, layer, mb, c.shared, op.id)
                if gathered is not None:
                    op.deps.append(gathered)
            op = em.compute(rank, "W", "moe.router.W", stage, layer, mb, c.router, op.id)
            dp.grad_done(stage, layer, op, "W")
            return op.id
        backward = pass_kind != "F"
        beside = self.par.moe_shared_expert_overlap
        if not backward:
            last = em.compute(rank, kind, f"moe.router.{kind}", stage, layer, mb, c.router, last).id
        elif c.shared is not None and not beside:  # the output's last addend: its gradient comes first
            last = self._shared(rank, kind, pass_kind, stage, layer, mb, c.shared, last)[1]
        a2a_bytes = self._a2a_bytes(rank, busiest)
        first_a2a = self._a2a(rank, "combine" if backward else "dispatch", stage, layer, mb, a2a_bytes, last)
        side, shared_done = last, None
        if c.shared is not None and beside:
            side, shared_done = self._shared(rank, kind, pass_kind, stage, layer, mb, c.shared, last)
        etp_bytes = em.cost(costs.moe_etp_bytes, self.par.expert_tp, own)
        gathered = self._etp(rank, "all_gather", stage, layer, mb, etp_bytes, first_a2a)
        op = em.compute(rank, kind, f"moe.experts.{kind}", stage, layer, mb, c.experts, gathered)
        if side is not None and side not in op.deps:
            op.deps.append(side)
        dp.grad_done(stage, layer, op, pass_kind)
        scattered = self._etp(rank, "reduce_scatter", stage, layer, mb, etp_bytes, op.id)
        last = self._a2a(rank, "dispatch" if backward else "combine", stage, layer, mb, a2a_bytes, scattered)
        if backward:
            op = em.compute(rank, kind, f"moe.router.{kind}", stage, layer, mb, c.router, last)
            dp.grad_done(stage, layer, op, pass_kind)
            last = op.id
        if shared_done is not None and shared_done != last:
            em.prog.ops[cast(int, last)].deps.append(shared_done)  # the last all-to-all or router op
        if c.shared is not None and not beside and not backward:  # added to the combined output
            last = self._shared(rank, kind, pass_kind, stage, layer, mb, c.shared, last)[1]
        return last

    def _shared(self, rank: int, kind: str, pass_kind: str, stage: int, layer: int, mb: int,
                cost: costs.OpCost, last: int | None) -> tuple[int, int]:
        """The shared experts beside the all-to-all: gather the tokens over TP (in pass B also the
        input again, for the weight gradient), run, reduce-scatter; returns (the compute op, the
        closing collective or the compute op)."""
        share = 2.0 if pass_kind == "B" and self.dense.regather else 1.0
        start = self._tp(rank, self.dense.pre, stage, layer, mb, last, share)
        op = self.em.compute(rank, kind, f"moe.shared.{kind}", stage, layer, mb, cost, start)
        done = self._tp(rank, self.dense.post, stage, layer, mb, op.id)
        return op.id, done if done is not None else op.id

    def _tp(self, rank: int, op_name: str | None, stage: int, layer: int, mb: int, last: int | None,
            share: float = 1.0) -> int | None:
        """A TP collective of the shared experts (none when ``op_name`` is None, TP is 1 or TP
        collectives are off); it waits for ``last``."""
        return self.dense.tp(rank, op_name, stage, layer, mb, last, share=share, merge=False)

    def _etp(self, rank: int, op_name: str, stage: int, layer: int, mb: int, nbytes: float,
             last: int | None) -> int | None:
        """An expert-TP collective of the routed rows after ``last`` (none without an expert-TP
        gather or with TP collectives off)."""
        if self.etp == 1 or not self.tp_comm:
            return last
        op = self.em.collective(rank, "tp", "etp", op_name, nbytes, stage, layer, mb,
                                [last] if last is not None else [])
        op.name = f"tp.etp.{op_name}"
        return op.id

    def _a2a_bytes(self, rank: int, load: float) -> float:
        """Bytes of one all-to-all (dispatch or combine, either pass) at ``load`` times the mean
        tokens, for the dispatcher and the nodes ``rank``'s EP group spans
        (:mod:`simtrain.costs.dispatch`)."""
        par = self.par
        rows = dispatch.a2a_rows(self.em.model, par.moe_dispatcher, par.ep, ep_ranks_per_node(self.em.mesh, rank))
        return self.em.cost(dispatch.a2a_bytes, rows, load)

    def _a2a(self, rank: int, what: str, stage: int, layer: int, mb: int, nbytes: float,
             last: int | None) -> int | None:
        """An EP all-to-all (``what``: dispatch or combine) after ``last``; none without EP."""
        if self.par.ep == 1:
            return last
        op = self.em.collective(rank, "ep", "ep", "all_to_all", nbytes, stage, layer, mb,
                                [last] if last is not None else [])
        op.name = f"ep.{what}"
        return op.id
