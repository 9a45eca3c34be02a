"""Lowering: specs + pipeline schedule + cost model -> per-rank programs with dependencies.

The driver walks each simulated rank's schedule actions in order and emits, per action, the
embedding, the layers of the stage's chunk (:mod:`simtrain.workload.blocks`) and the LM head, then
the PP transfer to the neighbouring stage of the micro-batch's chain: the last forward op of a
stage sends the activation to the next stage, the last backward op sends the gradient back. The
receiver's first op of the action waits for the transfer; sends are asynchronous, or, without
``overlap_p2p_comm``, the sender's next action waits for its send (Megatron-LM's default
``batch_isend_irecv`` followed by a wait, ``megatron/core/pipeline_parallel/p2p_communication.py``).
Without sequence parallelism each TP rank sends its slice of the activation and the receiver
all-gathers the slices over the TP group (Narayanan et al. 2021, section 4.1, the scatter/gather
optimisation). Data-parallel
gathers and reductions come from :mod:`simtrain.workload.data_parallel`; after the last reduction
the global gradient norm is all-reduced over every GPU, then the optimizer steps.

An end chunk without decoder layers (Megatron-LM's split with the embedding and the loss
accounted for, :func:`simtrain.workload.stages.accounted_split`) may emit no op in a pass: its
send then waits for the transfer the pass received, and the embedding's weight gradient after an
empty input-gradient pass waits for the gradient from the next stage.

With folding (the default), one representative rank per pipeline rank is simulated, or under
MoE routing skew one per pipeline rank and EP position (:mod:`simtrain.workload.fold`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from simtrain import costs
from simtrain.specs import budget
from simtrain.errors import SpecError
from simtrain.schedules.ir import Action, Schedule
from simtrain.specs.gpu import GpuSpec
from simtrain.specs.model import ModelSpec
from simtrain.specs.parallel import ParallelSpec
from simtrain.topology.mesh import DeviceMesh
from simtrain.workload.blocks import Blocks
from simtrain.workload.data_parallel import EMBEDDING, LM_HEAD, DataParallelOps, ParamLayout
from simtrain.workload.emit import Emitter
from simtrain.workload.fold import fold_classes
from simtrain.workload.moe_routing import ep_loads
from simtrain.workload.options import WorkloadOptions
from simtrain.workload.overlap import Reorder, Shape, interleave
from simtrain.workload.program import KIND, STREAM, OpRef, Program
from simtrain.workload.replicas import RankReplicas, SendKey
from simtrain.workload.stages import split_layers
from simtrain.workload.templates import ActionTemplates


_PP_SEND, _PP = STREAM["pp_send"], KIND["pp"]


class _Lowering:
    """State of one lowering pass; used once by :func:`lower`."""

    def __init__(self, model: ModelSpec, par: ParallelSpec, gpu: GpuSpec, schedule: Schedule,
                 mesh: DeviceMesh, opts: WorkloadOptions, max_ops: int | None = None):
        self.model, self.sched, self.mesh, self.opts, self.max_ops = model, schedule, mesh, opts, max_ops
        self.em = Emitter(model, par, gpu, mesh, opts.fold, opts.calibration, dict(opts.speeds), dict(opts.gpus))
        self.prog = self.em.prog
        self.chunks = split_layers(model, par, gpu, schedule.chain_length, opts)
        self.dp = DataParallelOps(self.em, ParamLayout(model, par, schedule, self.chunks), opts)
        moe_layers = [i for i in range(model.total_layers) if model.is_moe_layer(i)]
        loads = ep_loads(model.num_experts, par.ep, len(moe_layers), opts.routing) if moe_layers else []
        self.blocks = Blocks(self.em, self.dp, par, schedule, self.chunks, opts.tp_comm,
                             dict(zip(moe_layers, loads)))
        # skewed routing gives each EP position its own program: fold by EP position
        self.by_ep = any(len(set(x)) > 1 for x in loads)
        self.step = 0  # the step being lowered
        self.sends: dict[SendKey, int] = {}  # (pipeline, step, stage, mb, "act"|"grad") -> p2p op id
        self.last_send: dict[int, int] = {}  # rank -> its latest p2p send (blocking sends wait for it)
        self.pairs: dict[tuple[int, int, int], tuple[tuple[int, int], ...]] = {}  # (rank, from, to pp rank) -> pairs
        self.blocking_p2p = not par.overlap_p2p_comm
        # without sequence parallelism each TP rank sends its slice; the receiver all-gathers them
        self.gather_received = par.tp > 1 and not par.sequence_parallel and opts.tp_comm
        self.needs: list[tuple[int, SendKey]] = []  # (op id, send key)
        self.send_log: list[SendKey] = []  # the keys of self.sends, in the order of the sends
        # (rank, stage, stage it sends to) -> (peer, group set, bytes, pipeline group) of its transfers
        self.send_plans: dict[tuple[int, int, int], tuple[int, int, float, int]] = {}
        self.templates = ActionTemplates(self.em, self.dp)
        self.interleaved: dict[Shape, Reorder] = {}  # overlapped pairs' reorders by shape
        self.work: dict[int, int] = {}  # pipeline rank -> layer passes of its step (_work)
        # unfolded, every GPU computing alike, routing even: the ranks of a pipeline position copy the first
        alike = not opts.fold and not opts.speeds and not opts.gpus and not self.by_ep
        self.replicas = RankReplicas(self, bool(moe_layers) and par.ep > 1) if alike else None

    def build(self) -> Program:
        """Every simulated rank's program: its actions in schedule order, then its gradient reductions,
        the global gradient norm and the optimizer step; finally each action waits for its transfer."""
        prog, em = self.prog, self.em
        touched = self.opts.touched
        for group, stands_for in fold_classes(self.mesh, self.opts.fold, self.by_ep, touched):
            for pp_index, rank in enumerate(group):
                prog.pipeline_rank_of[rank] = pp_index
                prog.rank_weight[rank] = len(stands_for)
                if self.opts.fold and (self.by_ep or touched):
                    em.stand_for(rank, stands_for)
        replicas = self.replicas
        for rank in prog.ranks:
            if replicas is not None and replicas.copy(rank):
                continue
            start, needs_from, sends_from = len(prog.ops), len(self.needs), len(self.send_log)
            optimizer = None
            for step in range(self.opts.steps):
                self.step = step
                optimizer = self._step(rank, optimizer)
                if (rank, step) == (prog.ranks[0], 0):
                    _check_budget(self)
            if replicas is not None:
                replicas.offer(rank, start, needs_from, sends_from)
        if replicas is not None:
            replicas.flush()
        prog.members = {key: n for key, n in prog.members.items() if n > 1}  # absent: one member
        prog.forget_keys()
        prog.layers_per_chunk = [len(c) for c in self.chunks]
        prog.kernel_sources = dict(em.timer.counts)
        for op_id, key in self.needs:
            src = self.sends.get(key)
            if src is None:
                raise SpecError(f"schedule {self.sched.name}: nothing sends {key[4]} of micro-batch "
                                f"{key[3]} from stage {key[2]}")
            prog.ops.add_dep(op_id, src)
        return prog

    def _step(self, rank: int, previous: int | None) -> int | None:
        """One step of ``rank``'s program: its actions, reductions, the global gradient norm
        (unless the optimizer is validated after the fact) and the optimizer step, whose op id it
        returns. A later step's parameter gathers wait for the ``previous`` step's optimizer; its
        compute follows it on the compute stream."""
        prog, em, dp = self.prog, self.em, self.dp
        first = len(prog.ops)
        dp.begin_rank(rank)
        if previous is not None:
            for i in range(first, len(prog.ops)):
                prog.ops.add_dep(i, previous)
        for action in _probed(self, rank):
            self._action(rank, action)
        reductions = dp.reduce(rank)
        prog.static_bytes[rank], updated = dp.static_of_rank(rank)
        if not self.opts.optimizer:
            return None
        norm = _grad_norm(self, rank, reductions) if self.opts.optimizer_sync == "grad-norm" else None
        return em.emit(rank, "compute", "opt", "optimizer", -1, -1, -1, [*reductions, norm],
                       costs.optimizer_cost(updated, 1, em.shape.grad_bytes)).id

    def _action(self, rank: int, action: Action) -> None:
        """Lower one action. An overlapped F&B pair (DualPipe) starts when the inputs of both of
        its halves have arrived; its halves' components then interleave
        (:func:`~simtrain.workload.overlap.interleave`), and with blocking sends the pair as a
        whole waits for the send before it."""
        previous_send = self.last_send.get(rank)
        if action.kind != "FB":
            self._plain_action(rank, action, previous_send)
            return
        forward, backward = action.halves()
        start = len(self.prog.ops)
        self._plain_action(rank, forward, previous_send)
        mid = len(self.prog.ops)
        self._plain_action(rank, backward, previous_send)
        _, next_stage = self.sched.stage_neighbours(action.b_stage)
        _needs_from(self, start, (next_stage, action.b_mb, "grad") if next_stage is not None else None, rank)
        interleave(self.prog, rank, start, mid, len(self.prog.ops), self.interleaved)
        sends: Sequence[int] = self.prog.order.get((rank, STREAM["pp_send"]), [])
        if sends and sends[-1] >= start:  # the pair's send that leaves last
            self.last_send[rank] = sends[-1]

    def _plain_action(self, rank: int, a: Action, previous_send: int | None) -> None:
        """One F, B, I or W action of schedule stage ``a.stage`` on micro-batch ``a.mb``; with
        blocking sends it waits for op ``previous_send``."""
        dp = self.dp
        chunk = self.sched.chunk_of_stage(a.stage)
        layers = self.chunks[chunk]
        embed = chunk == 0 and self.opts.embedding
        head = chunk == len(self.chunks) - 1 and self.opts.lm_head
        prev_stage, next_stage = self.sched.stage_neighbours(a.stage)
        start = len(self.prog.ops)
        dp.begin_pass()
        receives = prev_stage is not None if a.kind == "F" else (next_stage is not None and a.kind in ("B", "I"))
        last = self.templates.emit((rank, a.kind, a.stage, receives), rank, a.mb, dp.settled(a.stage, layers),
                                   lambda: self._body(rank, a, layers, embed, head, receives))
        if a.kind == "F":
            if next_stage is not None:
                _send(self, rank, a.stage, next_stage, a.mb, "act", last)
            _needs_from(self, start, (prev_stage, a.mb, "act") if prev_stage is not None else None, rank)
        elif a.kind in ("B", "I"):
            if prev_stage is not None and (last is not None or not layers):
                _send(self, rank, a.stage, prev_stage, a.mb, "grad", last)
            received = ((next_stage, a.mb, "grad") if next_stage is not None else
                        (prev_stage, a.mb, "act") if len(self.prog.ops) > start and last is None else None)
            _needs_from(self, start, received, rank)
        elif not layers and next_stage is not None:  # W of an empty first chunk: its I emitted nothing
            _needs_from(self, start, (next_stage, a.mb, "grad"), rank)
        first = _first_non_dp(self.prog, start)
        if self.blocking_p2p and first is not None and previous_send is not None:
            self.prog.ops.add_dep(first, previous_send)

    def _body(self, rank: int, a: Action, layers: range, embed: bool, head: bool, receives: bool) -> int | None:
        """The ops of action ``a`` (its pass over the chunk's ``layers``, with the embedding and the
        LM head where the chunk has them); returns what the action's send waits for."""
        dp, blocks, last = self.dp, self.blocks, None
        logits = costs.logits_bytes(self.model, self.em.shape)
        if receives and self.gather_received:
            last = blocks.tp(rank, "all_gather", a.stage, -1, a.mb, None)
        if a.kind == "F":
            if embed:
                last = self._end_op(rank, a, "embed", a.kind, costs.embedding_cost, last).id
            for layer in layers:
                last = blocks.forward_layer(rank, a.stage, layer, a.mb, last)
            if head:
                last = self._end_op(rank, a, "lm_head", a.kind, costs.lm_head_cost, last, alloc=logits).id
        elif a.kind in ("B", "I", "W"):
            if head:
                op = self._end_op(rank, a, "lm_head", a.kind, costs.lm_head_cost, last,
                                  free=logits if a.kind != "W" else 0.0)
                dp.grad_done(a.stage, LM_HEAD, op, a.kind)
                last = op.id
            for layer in reversed(layers):
                last = (blocks.weight_layer(rank, a.stage, layer, a.mb, last) if a.kind == "W" else
                        blocks.backward_layer(rank, a.stage, layer, a.mb, last, a.kind))
            if embed and a.kind != "I":
                dp.grad_done(a.stage, EMBEDDING, self._end_op(rank, a, "embed", a.kind, costs.embedding_cost, last),
                             a.kind)
        else:
            raise ValueError(f"unexpected action kind {a.kind!r}")
        return last

    def _end_op(self, rank: int, a: Action, name: str, kind: str, cost_fn: Callable[..., costs.OpCost],
                last: int | None, **kw: Any) -> OpRef:
        """The embedding or the LM head (``name``) in pass ``kind`` of action ``a``."""
        em = self.em
        return em.compute(rank, kind, f"{name}.{kind}", a.stage, -1, a.mb, em.cost(cost_fn, kind), last, **kw)

    def pairs_of(self, rank: int, src_pp: int, dst_pp: int) -> tuple[tuple[int, int], ...]:
        """The (sender, receiver) GPU pairs of ``rank``'s transfer from pipeline rank ``src_pp`` to ``dst_pp``."""
        pairs = self.pairs.get((rank, src_pp, dst_pp))
        if pairs is None:
            pairs = self.pairs[(rank, src_pp, dst_pp)] = tuple(sorted(
                {(g[src_pp], g[dst_pp]) for g in self.em.slices(rank)}))
        return pairs


def _send(lw: _Lowering, rank: int, stage: int, to_stage: int, mb: int, what: str, after: int | None) -> None:
    """The PP transfer of ``what`` (act or grad) of micro-batch ``mb`` from schedule stage
    ``stage`` to ``to_stage``, after op ``after`` (none: the pass emitted no op). Its peer, pairs
    and bytes are found once per (rank, stage, stage it goes to)."""
    plan = lw.send_plans.get((rank, stage, to_stage))
    if plan is None:
        src_pp, dst_pp = lw.sched.stage_to_rank[stage], lw.sched.stage_to_rank[to_stage]
        group = lw.em.pp_group(rank)
        plan = lw.send_plans[(rank, stage, to_stage)] = (
            group[dst_pp], lw.prog.group_set_id(lw.pairs_of(rank, src_pp, dst_pp)),
            costs.pp_activation_bytes(lw.model, lw.em.shape), group[0])
    peer, gid, nbytes, pipeline = plan
    op_id = lw.prog.append(rank, _PP_SEND, _PP, f"pp.send.{what}", stage, -1, mb, nbytes=nbytes, comm="p2p",
                           group_set=gid, peer=peer, peer_stage=to_stage, deps=[after] if after is not None else [])
    key = (pipeline, lw.step, stage, mb, what)
    lw.sends[key] = op_id
    lw.send_log.append(key)
    lw.last_send[rank] = op_id


def _grad_norm(lw: _Lowering, rank: int, reductions: list[int]) -> int:
    """The global gradient norm before the optimizer step: each rank's sum of squares (one
    fp32), after its reductions and its last compute op, all-reduced over every GPU, as
    Megatron-LM's gradient clipping does (``clip_grad_norm_fp32``,
    ``megatron/core/optimizer/clip_grads.py``); every optimizer waits for the slowest rank."""
    world = (tuple(range(lw.mesh.world)),)
    computed: Sequence[int] = lw.prog.order.get((rank, STREAM["compute"]), [])
    after = [*reductions, computed[-1]] if computed else reductions
    return lw.em.emit(rank, "dp", "dp", "dp.grad_norm", -1, -1, -1, after, nbytes=4.0,
                      comm="all_reduce", group_set=lw.prog.group_set_id(world),
                      key=("grad_norm", lw.step)).id


def _needs_from(lw: _Lowering, first_op: int, key: tuple[int | None, int, str] | None, rank: int) -> None:
    """The action's first compute or TP op waits for the transfer ``key`` (none at the chain's
    ends) within ``rank``'s pipeline group; parameter gathers before it do not."""
    first = _first_non_dp(lw.prog, first_op) if key is not None else None
    if first is not None and key is not None:  # (first is None without a key)
        lw.needs.append((first, (lw.em.pp_group(rank)[0], lw.step, *key)))


def _probed(lw: _Lowering, rank: int) -> Iterator[Action]:
    """``rank``'s actions in schedule order; in the first rank's first step, the run's budget is
    checked after an eighth and after half of them (:func:`_check_budget`), so that even a run of
    one simulated rank is refused before most of its program is built."""
    actions = lw.sched.actions[lw.prog.pipeline_rank_of[rank]]
    if lw.max_ops is None or rank != lw.prog.ranks[0] or lw.step != 0 or len(actions) < 8:
        yield from actions
        return
    points = {len(actions) // 8, len(actions) // 2}
    for k, action in enumerate(actions, 1):
        yield action
        if k in points:
            _check_budget(lw, k)


def _check_budget(lw: _Lowering, done: int | None = None) -> None:
    """After ``done`` actions of the first rank's first step (None: all of that step): the run
    refused where ``max_ops`` cannot hold it (:func:`simtrain.specs.budget.check_lowered`, with the
    share of the layer passes lowered so far)."""
    if lw.max_ops is None:
        return
    prog = lw.prog
    for p in {prog.pipeline_rank_of[r] for r in prog.ranks} - set(lw.work):
        lw.work[p] = _work(lw.sched, lw.chunks, p)
    work = [lw.work[prog.pipeline_rank_of[r]] for r in prog.ranks]
    so_far = work[0] if done is None else _work(lw.sched, lw.chunks, prog.pipeline_rank_of[prog.ranks[0]], done)
    budget.check_lowered(len(prog.ops), ranks=len(prog.ranks), steps=lw.opts.steps, max_events=lw.max_ops,
                         share=so_far / sum(work), partial=done is not None)


def _work(sched: Schedule, chunks: list[range], pipeline_rank: int, upto: int | None = None) -> int:
    """Layer passes of a pipeline rank's step (of its first ``upto`` actions), each action
    counting one more (its ends and transfers): what its operation count grows with
    (:func:`simtrain.specs.budget.check_lowered`)."""
    actions = sched.actions[pipeline_rank][:upto]
    halves = (h for a in actions for h in (a.halves() if a.kind == "FB" else (a,)))
    return sum(len(chunks[sched.chunk_of_stage(h.stage)]) + 1 for h in halves)


def _first_non_dp(prog: Program, first_op: int) -> int | None:
    """The first op of ``prog`` from ``first_op`` on that is not a data-parallel gather."""
    dp = STREAM["dp"]
    streams = prog.ops.stream
    if first_op < len(streams) and streams[first_op] != dp:  # (most actions: no gather first)
        return first_op
    return next((i for i in range(first_op, len(streams)) if streams[i] != dp), None)


def lower(model: ModelSpec, par: ParallelSpec, gpu: GpuSpec, schedule: Schedule, mesh: DeviceMesh,
          opts: WorkloadOptions | None = None, max_ops: int | None = None) -> Program:
    """Per-rank programs for one training step (each of ``opts.steps``); with ``max_ops``, a run
    estimated beyond that many operations (or the memory available) is refused after its first
    rank's first step (:func:`simtrain.specs.budget.check_lowered`)."""
    return _Lowering(model, par, gpu, schedule, mesh, opts or WorkloadOptions(), max_ops).build()
