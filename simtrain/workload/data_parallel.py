"""Data parallelism: where each parameter's gradient is reduced, gradient buckets, ZeRO's
parameter gathers and reductions, and the static memory of a pipeline rank.

* Megatron-LM (``megatron/core/distributed/param_and_grad_buffer.py``): gradients are reduced per
  bucket of consecutive layers in backward order, launched when the bucket's last weight gradient
  is done (``--overlap-grad-reduce``; without it, all after the step's backward), over the
  data-parallel group including CP ranks; all-reduce without ZeRO,
  reduce-scatter with it. With ZeRO 1 or 2 the updated parameters are all-gathered per bucket
  before their first forward of the step (steady state of ``--overlap-param-gather``), a rank's
  model chunks in the order it first runs them (:meth:`ParamLayout.gather_order`); without it
  (``overlap_param_gather`` False, Megatron-LM's default) the optimizer step gathers them all
  synchronously, so the next step's first forward waits for every bucket.
* Routed experts are reduced over the expert data-parallel group instead, sharded over
  ``ep`` x ``etp`` (Megatron's MoE parallel folding).
* ZeRO-3 / PyTorch FSDP: every layer's parameter shards are all-gathered before each pass that
  uses them, prefetched one layer ahead.
* ZeRO-2 and ZeRO-3 / FSDP reduce-scatter every micro-batch's gradients, bucket by bucket, as
  soon as the bucket's weight gradients of that micro-batch are done (DeepSpeed's
  ``reduce_scatter`` of each ``reduce_bucket_size`` bucket in the backward hooks,
  ``deepspeed/runtime/zero/stage_1_and_2.py``; FSDP's post-backward reduce-scatter of each unit,
  ``torch/distributed/fsdp/_runtime_utils.py``): a rank keeps only its gradient shard between
  micro-batches, plus the unsharded gradient of the buckets in flight. ZeRO 0 and 1 keep the
  full gradient buffer and reduce once per step, after the last micro-batch (Megatron-LM's
  distributed optimizer). On the one data-parallel stream a finished bucket's reduce-scatter is
  queued behind the next parameter gather, so that it does not hold back that prefetch.
* Gradients are reduced in their accumulation precision: fp32 by default, as Megatron-LM does for
  bf16 training (``--grad-dtype bf16``: its ``--grad-reduce-in-bf16``); parameters are gathered
  in bf16.
* Static memory per parameter under ZeRO: :func:`simtrain.costs.static_bytes` (Rajbhandari et
  al. 2020).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from simtrain import costs
from simtrain.costs.shape import GRAD_BYTES
from simtrain.schedules.ir import Schedule
from simtrain.specs.model import ModelSpec
from simtrain.specs.parallel import ParallelSpec
from simtrain.workload.emit import Emitter
from simtrain.workload.options import WorkloadOptions
from simtrain.workload.program import STREAM, OpRef

EMBEDDING = -1  # layer index of the input embedding
LM_HEAD = -2  # layer index of the LM head and final norm


#: A :meth:`DataParallelOps.grad_done` call: (stage, layer, op id, kind).
GradCall = tuple[int, int, int, str]


def bucket_size(par: ParallelSpec, opts: WorkloadOptions) -> float:
    """Parameters per gradient bucket: ``opts.dp_bucket_params``, or Megatron-LM's default
    ``max(40M, 1M x data-parallel size)`` (``DistributedDataParallelConfig.bucket_size``)."""
    return opts.dp_bucket_params or max(40_000_000, 1_000_000 * par.dp * par.cp)


def group_sizes(par: ParallelSpec) -> dict[str, int]:
    """Ranks of each reduction group: ``dpcp`` (data parallel including CP ranks) for dense
    weights, ``edp`` (expert data parallel) for routed experts."""
    return {"dpcp": par.dp * par.cp, "edp": par.edp}


@dataclass
class Bucket:
    """Consecutive layers of one stage whose gradients are reduced together over one group."""

    stage: int  # schedule stage holding the layers
    group: str  # reduction group: dpcp or edp
    layers: list[int] = field(default_factory=list)  # in backward order
    params: float = 0.0  # parameters on one rank


@dataclass(frozen=True)
class ParamLayout:
    """Which parameters each stage holds, and over which group each is reduced and sharded."""

    model: ModelSpec
    par: ParallelSpec
    schedule: Schedule
    chunks: list[range]  # layers of each model chunk

    def layer_shards(self, layer: int) -> list[tuple[str, float]]:
        """Parameters of ``layer`` (or :data:`EMBEDDING`, :data:`LM_HEAD`) on one rank, by the
        group that reduces their gradients."""
        m, par = self.model, self.par
        if layer == LM_HEAD:  # with MTP on a later stage than the first, a copy of the embedding too
            mtp_embedding = m.embedding_params() if m.mtp_layers and par.pp > 1 else 0
            return [("dpcp", (m.lm_head_params() + m.final_norm_params() + mtp_embedding) / par.tp)]
        if layer == EMBEDDING:
            return [("dpcp", m.embedding_params() / par.tp)]
        if not m.is_moe_layer(layer):
            return [("dpcp", m.layer_params(layer) / par.tp)]
        experts = m.num_experts * m.expert_params()
        return [("dpcp", (m.layer_params(layer) - experts) / par.tp),
                ("edp", experts / (par.ep * par.expert_tp))]

    def buckets(self, pp_index: int, bucket_params: float, embedding: bool, lm_head: bool) -> list[Bucket]:
        """Gradient buckets of pipeline rank ``pp_index``: the layers of each stage it runs, in
        backward order, one bucket sequence per reduction group, each closed once it holds
        ``bucket_params`` parameters."""
        sizes = group_sizes(self.par)
        out: list[Bucket] = []
        for stage in self.schedule.stages_of_rank(pp_index):
            chunk = self.schedule.chunk_of_stage(stage)
            layers = []
            if chunk == len(self.chunks) - 1 and lm_head and not self.model.tied_embeddings:
                layers.append(LM_HEAD)
            layers += list(reversed(self.chunks[chunk]))
            if chunk == 0 and embedding:
                layers.append(EMBEDDING)
            current: dict[str, Bucket | None] = {}
            for layer in layers:
                for group, params in self.layer_shards(layer):
                    if sizes[group] == 1:
                        continue
                    bucket = current.get(group)
                    if bucket is None:
                        bucket = current[group] = Bucket(stage, group)
                        out.append(bucket)
                    bucket.layers.append(layer)
                    bucket.params += params
                    if bucket.params >= bucket_params:
                        current[group] = None
        return out

    def gather_order(self, pp_index: int, buckets: list[Bucket]) -> list[Bucket]:
        """``buckets`` (of :meth:`buckets`) in the order pipeline rank ``pp_index`` first uses
        them in its forward passes: its stages in the order of their first forward action in the
        schedule, each stage's buckets in forward layer order. Megatron-LM's interleaved schedule
        gathers the parameters of model chunks 0 and 1 before its first forward and each later
        chunk's one chunk ahead of its first use (``megatron/core/pipeline_parallel/schedules.py``,
        ``forward_backward_pipelining_with_interleaving``: "Synchronize params for first two model
        chunks", then ``param_sync_chunk_id``), so a rank's first chunk never waits behind its
        later chunks' gathers."""
        first = self._first_forward(pp_index)
        return sorted(reversed(buckets), key=lambda b: first.get(b.stage, len(first)))  # stable: layer order kept

    def _first_forward(self, pp_index: int) -> dict[int, int]:
        """Stage -> its position among pipeline rank ``pp_index``'s stages by first forward action
        (the walk stops once every stage has had one: within the warm-up)."""
        order: dict[int, int] = {}
        stages = len(self.schedule.stages_of_rank(pp_index))
        for action in self.schedule.actions[pp_index]:
            for half in action.halves():
                if half.kind == "F" and half.stage not in order:
                    order[half.stage] = len(order)
            if len(order) == stages:
                break
        return order

    def static_of_pipeline_rank(self, pp_index: int) -> tuple[float, float]:
        """(static memory, parameters the optimizer updates) of pipeline rank ``pp_index``: each
        shard under ZeRO over its own reduction group (stage 1 optimizer state, 2 also gradients,
        3 also weights)."""
        by_group = {"dpcp": 0.0, "edp": 0.0}
        for stage in self.schedule.stages_of_rank(pp_index):
            chunk = self.schedule.chunk_of_stage(stage)
            layers = list(self.chunks[chunk])
            if chunk == 0:
                layers.append(EMBEDDING)
            if chunk == len(self.chunks) - 1 and not self.model.tied_embeddings:
                layers.append(LM_HEAD)
            for layer in layers:
                for group, params in self.layer_shards(layer):
                    by_group[group] += params
        zero, sizes = self.par.zero, group_sizes(self.par)
        grad = GRAD_BYTES[self.par.grad_dtype]
        static = sum(costs.static_bytes(p, zero, sizes[g], grad) for g, p in by_group.items())
        updated = sum(p / (sizes[g] if zero >= 1 else 1) for g, p in by_group.items())
        return static, updated

    def reduce_buffer_bytes(self, pp_index: int, opts: WorkloadOptions) -> float:
        """Under ZeRO 2 or 3, the unsharded gradients of the buckets in flight on pipeline rank
        ``pp_index``: two of its largest buckets (one reduce-scatter running while the next
        bucket fills: DeepSpeed's ``overlap_comm`` double buffer), one without
        ``overlap_grad_reduce``; none under ZeRO 0 or 1, whose full gradient buffer is static."""
        if self.par.zero < 2 or not opts.dp_comm:
            return 0.0
        buckets = self.buckets(pp_index, bucket_size(self.par, opts), opts.embedding, opts.lm_head)
        if not buckets:
            return 0.0
        in_flight = 2 if self.par.overlap_grad_reduce else 1
        return in_flight * GRAD_BYTES[self.par.grad_dtype] * max(b.params for b in buckets)


class DataParallelOps:
    """The data-parallel ops of the simulated rank being lowered: ZeRO-1/2 bucket gathers before
    first use, ZeRO-3 per-layer gathers, and the gradient reduction of each bucket (once per
    step, or under ZeRO 2 and 3 once per micro-batch)."""

    def __init__(self, em: Emitter, layout: ParamLayout, opts: WorkloadOptions):
        self.em, self.layout, self.opts = em, layout, opts
        self.zero = layout.par.zero
        self.sizes = group_sizes(layout.par)
        self.bucket_params = bucket_size(layout.par, opts)
        self.per_micro_batch = self.zero >= 2
        self.rank = -1  # the rank being lowered
        self.recorded: list[GradCall] | None = None  # grad_done calls, while an action template is captured
        self.buckets: list[Bucket] = []
        self.param_gather: dict[tuple[int, int], int] = {}  # (stage, layer) -> ZeRO-1/2 gather op
        self.used: set[tuple[int, int]] = set()  # (stage, layer) already waiting for its gather
        self.grad_ops: dict[tuple[int, int], int] = {}  # (stage, layer) -> last weight-gradient op
        self.layer_anchor: int | None = None  # first op of the previous layer of this pass
        self.pending_gathers: list[int] = []  # ZeRO-3 gathers the next layer waits for
        self.pass_grads: dict[tuple[int, int], int] = {}  # (stage, layer) -> its gradient op in this pass
        self.closed: set[int] = set()  # indices of the buckets this pass has finished
        self.finished: list[tuple[Bucket, list[int]]] = []  # buckets of a pass done, not yet queued
        self.reductions: list[int] = []  # per-micro-batch reductions queued so far

    def static_of_rank(self, rank: int) -> tuple[float, float]:
        """(static memory, parameters the optimizer updates) of ``rank``: its pipeline rank's
        shards (:meth:`ParamLayout.static_of_pipeline_rank`) and its gradient buckets in flight
        (:meth:`ParamLayout.reduce_buffer_bytes`)."""
        pp_index = self.em.prog.pipeline_rank_of[rank]
        static, updated = self.layout.static_of_pipeline_rank(pp_index)
        return static + self.layout.reduce_buffer_bytes(pp_index, self.opts), updated

    def begin_rank(self, rank: int) -> None:
        """Start ``rank``'s program: its buckets and, under ZeRO 1 or 2, one parameter all-gather
        per bucket in forward order of first use."""
        self.param_gather, self.used, self.grad_ops = {}, set(), {}
        self.pass_grads, self.finished, self.reductions, self.rank = {}, [], [], rank
        pp_index = self.em.prog.pipeline_rank_of[rank]
        self.buckets = self.layout.buckets(pp_index, self.bucket_params, self.opts.embedding,
                                           self.opts.lm_head) if self.opts.dp_comm else []
        if self.zero in (1, 2):
            for bucket in self.layout.gather_order(pp_index, self.buckets):
                op = self.em.collective(rank, "dp", bucket.group, "all_gather",
                                        costs.BYTES_PARAM * bucket.params, bucket.stage, -1, -1, [])
                for layer in bucket.layers:
                    self.param_gather[(bucket.stage, layer)] = op.id
            if not self.layout.par.overlap_param_gather and self.param_gather:  # every layer waits for them all
                self.param_gather = dict.fromkeys(self.param_gather, op.id)

    def first_use(self, stage: int, layer: int, op: OpRef) -> None:
        """``op`` is the first of ``layer`` in the step: it waits for the layer's bucket gather."""
        ag = self.param_gather.get((stage, layer))
        if ag is not None and (stage, layer) not in self.used:
            self.used.add((stage, layer))
            op.deps.append(ag)

    def grad_done(self, stage: int, layer: int, op: OpRef, kind: str) -> None:
        """Record ``op`` as the latest weight-gradient op of ``layer`` (passes B and W); while
        ``recorded`` is a list, the call is also appended to it (:mod:`simtrain.workload.templates`)."""
        if self.recorded is not None:
            self.recorded.append((stage, layer, op.id, kind))
        if kind in ("B", "W"):
            self.grad_ops[(stage, layer)] = op.id
            if self.per_micro_batch:
                self.pass_grads[(stage, layer)] = op.id

    def grads_done(self, latest: Iterable[tuple[tuple[int, int], int]]) -> None:
        """As :meth:`grad_done` of passes B and W for several layers: ``latest`` gives each (stage,
        layer)'s last weight-gradient op, in the order of their first calls (an action template's
        copy, made only where nothing is recorded and gradients reduce once per step)."""
        assert self.recorded is None and not self.per_micro_batch
        self.grad_ops.update(latest)

    def settled(self, stage: int, layers: Iterable[int]) -> bool:
        """Whether an action on ``layers`` of ``stage`` emits no data-parallel op and waits for
        none: once per step (ZeRO 0 and 1) and after the step's first use of every layer's
        parameters (its first forward waits for their gathers)."""
        return not self.per_micro_batch and all(
            (stage, layer) in self.used or (stage, layer) not in self.param_gather for layer in layers)

    def begin_pass(self) -> None:
        """A new action starts: the first layer's ZeRO-3 gather has no previous layer to follow;
        every bucket the previous action completed is done."""
        self.layer_anchor = None
        self._close_buckets(None)
        self.pass_grads, self.closed = {}, set()

    def _close_buckets(self, running: int | None) -> None:
        """Per-micro-batch reduction: the buckets whose layers all have their gradient of this
        pass, none of them the layer ``running`` (the one about to start; None: the pass is
        over), are done; without ``overlap_grad_reduce`` only at the end of the pass, after its
        last compute op."""
        if not self.pass_grads or (running is not None and not self.layout.par.overlap_grad_reduce):
            return
        after: list[int] = []
        if running is None and not self.layout.par.overlap_grad_reduce:
            after = list(self.em.prog.order.get((self.rank, STREAM["compute"]), [])[-1:])
        for i, bucket in enumerate(self.buckets):
            if i in self.closed or running in bucket.layers:
                continue
            ops = [self.pass_grads.get((bucket.stage, layer)) for layer in bucket.layers]
            if all(o is not None for o in ops):
                self.closed.add(i)
                self.finished.append((bucket, sorted({o for o in ops if o is not None} | set(after))))

    def _queue_finished(self) -> None:
        """Queue the reduce-scatter of every finished bucket, in the order they finished."""
        for bucket, deps in self.finished:
            self.reductions.append(self.em.collective(self.rank, "dp", bucket.group, "reduce_scatter",
                                                      self.em.shape.grad_bytes * bucket.params,
                                                      bucket.stage, -1, -1, deps).id)
        self.finished = []

    def gather_layer(self, rank: int, stage: int, layer: int, mb: int) -> int:
        """ZeRO-3/FSDP: all-gather the layer's parameter shards before it runs (every pass and
        micro-batch), prefetched one layer ahead: the gather may start once the previous layer
        of the same pass has started (PyTorch FSDP's default backward/forward prefetch of one).
        Under ZeRO 2 and 3 the reduce-scatters of the buckets finished before ``layer`` are
        queued next. Returns the index of the first op of the layer, whose dependencies
        :meth:`layer_started` completes."""
        gathers = []
        if self.zero == 3 and self.opts.dp_comm:
            anchor = [self.layer_anchor] if self.layer_anchor is not None else []
            for group, params in self.layout.layer_shards(layer):
                if self.sizes[group] > 1:
                    gathers.append(self.em.collective(rank, "dp", group, "all_gather",
                                                      costs.BYTES_PARAM * params, stage, layer, mb, anchor).id)
        self.pending_gathers = gathers
        self._close_buckets(layer)
        self._queue_finished()
        return len(self.em.prog.ops)

    def layer_started(self, first_index: int) -> None:
        """The layer's first op waits for its parameter gathers; it anchors the next prefetch."""
        ops = self.em.prog.ops
        if first_index < len(ops):
            ops[first_index].deps.extend(self.pending_gathers)
            self.layer_anchor = first_index
        self.pending_gathers = []

    def reduce(self, rank: int) -> list[int]:
        """The step's gradient reductions; returns their op ids. Per micro-batch (ZeRO 2, 3): the
        last pass's buckets, queued after those of the earlier micro-batches. Once per step: one
        reduction per bucket, in the order the buckets' gradients complete (or, without
        ``overlap_grad_reduce``, all after the rank's last backward op)."""
        if self.per_micro_batch:
            self._close_buckets(None)
            self._queue_finished()
            return self.reductions
        reductions = []
        grad_ops = self.grad_ops
        ordered = sorted(self.buckets, key=lambda b: max(grad_ops.get((b.stage, layer), -1) for layer in b.layers))
        op_name = "reduce_scatter" if self.zero >= 1 else "all_reduce"
        compute: Sequence[int] = self.em.prog.order.get((rank, STREAM["compute"]), [])
        after_backward = [compute[-1]] if compute and not self.layout.par.overlap_grad_reduce else []
        for bucket in ordered:
            deps = sorted({grad_ops[(bucket.stage, layer)] for layer in bucket.layers
                           if (bucket.stage, layer) in grad_ops} | set(after_backward))
            reductions.append(self.em.collective(rank, "dp", bucket.group, op_name,
                                                 self.em.shape.grad_bytes * bucket.params, bucket.stage, -1, -1,
                                                 deps).id)
        return reductions
