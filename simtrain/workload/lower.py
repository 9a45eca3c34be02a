"""Lowering: specs + pipeline schedule + cost model -> per-rank programs with dependencies.

Where communication sits follows Megatron-LM:

* TP (``megatron/core/tensor_parallel/mappings.py``): with sequence parallelism an all-gather
  before and a reduce-scatter after each of the attention and MLP blocks in the forward pass, and
  the mirror pair in the input-gradient pass; without it one all-reduce after each block forward
  and one after each block's input gradient. A TP collective blocks the next block of the same
  micro-batch.
* PP: the last forward op of a stage sends the activation to the next stage of the micro-batch's
  chain, the last backward op sends the gradient back; sends are asynchronous, the receiver waits.
* DP (``megatron/core/distributed/param_and_grad_buffer.py``): gradients are reduced per bucket
  of consecutive layers in backward order, launched when the bucket's last weight gradient is
  done, over the data-parallel group including CP ranks; all-reduce without ZeRO, reduce-scatter
  with it. With ZeRO >= 1 the updated parameters are all-gathered per bucket before their first
  forward of the step (steady state of ``--overlap-param-gather``). The optimizer step follows
  the last reduction.

With folding (the default), one representative rank per pipeline rank is simulated: the ranks
that share its pipeline position run identical programs, and each collective it joins costs as
much as the slowest of the groups it stands for.
"""

from __future__ import annotations

from dataclasses import dataclass

from simtrain import costs
from simtrain.costs import Shape
from simtrain.errors import SpecError
from simtrain.topology.mesh import DeviceMesh
from simtrain.workload.program import KIND, STREAM, Op, Program
from simtrain.workload.moe_routing import Routing, load_factors
from simtrain.schedules.ir import Action, Schedule
from simtrain.specs.gpu import GpuSpec
from simtrain.specs.model import ModelSpec
from simtrain.specs.parallel import ParallelSpec
from simtrain.workload.stages import split_layers


@dataclass(frozen=True)
class WorkloadOptions:
    fold: bool = True  # simulate one representative rank per pipeline rank
    dp_bucket_params: int | None = None  # gradient bucket size; None = Megatron's max(40M, 1M * dp)
    embedding: bool = True  # embedding on the first stage
    lm_head: bool = True  # LM head and loss on the last stage
    optimizer: bool = True  # optimizer step at the end of the step
    dp_comm: bool = True  # data-parallel gradient reduction and parameter gather
    tp_comm: bool = True  # tensor-parallel collectives
    routing: Routing = Routing()  # MoE token routing (uniform unless skewed)


class _Lowering:
    """State of one lowering pass; used once by :func:`lower`."""

    def __init__(self, model: ModelSpec, par: ParallelSpec, gpu: GpuSpec, schedule: Schedule,
                 mesh: DeviceMesh, opts: WorkloadOptions):
        self.model, self.par, self.gpu, self.sched, self.mesh, self.opts = model, par, gpu, schedule, mesh, opts
        self.shape = Shape.of(par)
        self.prog = Program()
        self.chunks = self._split()
        self.pp_groups = mesh.groups("pp")
        self.sends: dict[tuple, int] = {}  # (stage, mb, "act"|"grad") -> p2p op id
        self.needs: list[tuple[int, tuple]] = []  # (op id, send key)
        self.counters: dict[tuple[int, int], int] = {}
        self.group_cache: dict[tuple, tuple[tuple[int, ...], ...]] = {}
        self.cost_cache: dict[tuple, float] = {}
        self.memo: dict[tuple, object] = {}
        self.recompute_layers = par.recompute_layers(max(len(c) for c in self.chunks))
        self.selective = par.recompute == "selective"
        moe_layers = [i for i in range(model.layers) if model.is_moe_layer(i)]
        factors = load_factors(model.num_experts, par.ep, len(moe_layers), opts.routing) if moe_layers else []
        self.load_factor = dict(zip(moe_layers, factors))
        self.group_size = {"dpcp": par.dp * par.cp, "edp": par.edp}
        self.layer_anchor: int | None = None
        self.pending_gathers: list[int] = []

    def _split(self) -> list[range]:
        return split_layers(self.model, self.par, self.gpu, self.sched.chain_length, self.opts)

    # ---- groups ------------------------------------------------------------------------------
    def _slices(self, rank: int) -> list[list[int]]:
        """The pipeline groups ``rank``'s program stands for (all of them when folding)."""
        if self.opts.fold:
            return self.pp_groups
        return [self.mesh.group_of("pp", rank)]

    def _dim_groups(self, dim: str, rank: int) -> tuple[tuple[int, ...], ...]:
        """Groups along ``dim`` the op of ``rank`` stands for; ``dpcp`` = DP including CP ranks."""
        stage = self.prog.rank_stage[rank]
        cache_key = (dim, rank if not self.opts.fold else -1, stage)
        cached = self.group_cache.get(cache_key)
        if cached is not None:
            return cached
        groups = []
        for pp_group in self._slices(rank):
            member = pp_group[stage]
            if dim == "edp":
                g = self.mesh.group_of("edp", member)
            elif dim == "dpcp":
                g = sorted({d for c in self.mesh.group_of("cp", member) for d in self.mesh.group_of("dp", c)})
            else:
                g = self.mesh.group_of(dim, member)
            groups.append(tuple(g))
        out = self.group_cache[cache_key] = tuple(sorted(set(groups)))
        return out

    # ---- op emission -------------------------------------------------------------------------
    def _emit(self, rank: int, stream: str, kind: str, name: str, stage: int, layer: int, mb: int,
              deps: list[int], cost: costs.OpCost | None = None, **kw) -> Op:
        if None in deps:
            deps = [d for d in deps if d is not None]
        op = Op(0, rank, STREAM[stream], KIND[kind], name, stage, layer, mb, deps=deps, **kw)
        if cost is not None:
            op.flops = cost.flops
            op.nbytes = cost.bytes
            op.duration_s = self._time(cost)
        return self.prog.add(op)

    def _c(self, fn, *args):
        """A cost function of (model, shape, *args), computed once per distinct arguments."""
        key = (fn, args)
        value = self.memo.get(key)
        if value is None:
            value = self.memo[key] = fn(self.model, self.shape, *args)
        return value

    def _mlp(self, kind: str, layer: int) -> costs.OpCost:
        """The MLP cost depends on the layer only through whether it is an MoE layer."""
        key = ("mlp", kind, self.model.is_moe_layer(layer))
        value = self.memo.get(key)
        if value is None:
            value = self.memo[key] = costs.mlp_cost(self.model, self.shape, kind, layer)
        return value

    def _time(self, cost: costs.OpCost) -> float:
        key = (cost.flops, cost.bytes)
        t = self.cost_cache.get(key)
        if t is None:
            t = self.cost_cache[key] = cost.time_s(self.gpu)
        return t

    def _collective(self, rank: int, stream: str, dim: str, op_name: str, nbytes: float,
                    stage: int, layer: int, mb: int, deps: list[int]) -> Op:
        groups = self._dim_groups(dim, rank)
        n = self.counters.get((rank, STREAM[stream]), 0)
        self.counters[(rank, STREAM[stream])] = n + 1
        key = (stream, groups[0], n) if not self.opts.fold else (stream, rank, n)
        return self._emit(rank, stream, stream, f"{stream}.{op_name}", stage, layer, mb, deps,
                          nbytes=nbytes, comm=op_name, group_set=self.prog.group_set_id(groups), key=key)

    # ---- one action --------------------------------------------------------------------------
    def _tp(self, rank, op_name, stage, layer, mb, last):
        """A TP collective after ``last``. When ``last`` is itself the TP collective emitted just
        before (a reduce-scatter closing one block, the all-gather opening the next, with no
        compute between them), the two become one op running both back to back: same timing,
        half the events."""
        if self.par.tp == 1 or not self.opts.tp_comm:
            return last
        ops = self.prog.ops
        if last is not None and last == len(ops) - 1 and ops[last].stream == STREAM["tp"]:
            prev = ops[last]
            prev.comm = f"{prev.comm}+{op_name}"
            prev.name = f"{prev.name}+{op_name}"
            prev.nbytes += costs.tp_collective_bytes(self.model, self.shape)
            return last
        op = self._collective(rank, "tp", "tp", op_name, costs.tp_collective_bytes(self.model, self.shape),
                              stage, layer, mb, [last] if last is not None else [])
        return op.id

    def _compute(self, rank, kind, name, stage, layer, mb, cost, last, **kw):
        op = self._emit(rank, "compute", kind, name, stage, layer, mb,
                        [last] if last is not None else [], cost, **kw)
        return op

    def _zero3_gather(self, rank, stage, layer, mb) -> int:
        """ZeRO-3/FSDP: all-gather the layer's parameter shards before it runs (every pass and
        micro-batch), prefetched one layer ahead: the gather may start once the previous layer
        of the same pass has started (PyTorch FSDP's default backward/forward prefetch of one).
        Returns the index of the first op of the layer, whose dependencies the caller completes."""
        gathers = []
        if self.par.zero == 3 and self.opts.dp_comm:
            anchor = [self.layer_anchor] if self.layer_anchor is not None else []
            for group, params in self._layer_shards(layer):
                if self.group_size[group] > 1:
                    gathers.append(self._collective(rank, "dp", group, "all_gather", costs.BYTES_PARAM * params,
                                                    stage, layer, mb, anchor).id)
        self.pending_gathers = gathers
        return len(self.prog.ops)

    def _layer_started(self, first_index: int) -> None:
        """The layer's first op waits for its parameter gathers; it anchors the next prefetch."""
        if first_index < len(self.prog.ops):
            self.prog.ops[first_index].deps.extend(self.pending_gathers)
            self.layer_anchor = first_index
        self.pending_gathers = []

    def _forward_layer(self, rank, stage, layer, mb, last, kind="F"):
        """Attention and MLP forward of one layer (kind R when it is a recompute)."""
        if kind == "F":
            self._layer_started(self._zero3_gather(rank, stage, layer, mb))
        sp = self.par.sequence_parallel
        m, sh = self.model, self.shape
        rc = self._recomputed(stage, layer)
        if kind == "F":
            alloc = costs.layer_activation_bytes(m, sh, full_recompute=rc)
        else:  # the recompute rebuilds the full activation set
            alloc = costs.layer_activation_bytes(m, sh, full_recompute=False)
        pre, post = ("all_gather", "reduce_scatter") if sp else (None, "all_reduce")
        if pre:
            last = self._tp(rank, pre, stage, layer, mb, last)
        first, op = self._attention(rank, kind, "F", stage, layer, mb, last, alloc=alloc)
        self._first_use(rank, stage, layer, first)
        last = self._tp(rank, post, stage, layer, mb, op.id)
        if m.is_moe_layer(layer):
            return self._moe(rank, kind, "F", stage, layer, mb, last)
        if pre:
            last = self._tp(rank, pre, stage, layer, mb, last)
        op = self._compute(rank, kind, f"mlp.{kind}", stage, layer, mb, self._mlp("F", layer), last)
        return self._tp(rank, post, stage, layer, mb, op.id)

    def _moe(self, rank, kind, pass_kind, stage, layer, mb, last):
        """An MoE block: router, dispatch all-to-all, routed experts (the busiest EP rank's load),
        shared experts beside the all-to-all, combine all-to-all; the backward mirrors it.

        Megatron-LM's all-to-all token dispatcher (``megatron/core/transformer/moe``): tokens stay
        sequence-split across TP ranks (expert TP 1) or are gathered over the expert-TP group first.
        """
        m, sh, par = self.model, self.shape, self.par
        etp = par.expert_tp
        tokens = sh.tokens / par.tp if par.sequence_parallel else sh.tokens
        if etp > 1:
            tokens = sh.tokens
        factor = self.load_factor.get(layer, 1.0)
        routed = tokens * m.top_k * factor
        # the busiest EP rank receives (dispatch) and sends back (combine) ``factor`` times the
        # mean volume; a direct all-to-all lasts as long as its busiest rank's transfers
        a2a = costs.ACT_BYTES * tokens * m.top_k * m.hidden * factor
        passes = {"F": 1, "I": 1, "W": 1, "B": 2}[pass_kind]
        gemm = lambda p, n, split: costs.OpCost(2.0 * n * p * passes / split,  # noqa: E731
                                                 costs.BYTES_PARAM * p / split + 4 * costs.ACT_BYTES * n * m.hidden)
        experts = gemm(m.expert_params(), routed, etp)
        shared = gemm(m.shared_expert_params(), sh.tokens, par.tp) if m.shared_experts else None
        router = gemm(m.router_params(), tokens, 1)
        if pass_kind == "W":
            op = self._compute(rank, "W", "moe.experts.W", stage, layer, mb, experts, last)
            self._grad_done(rank, stage, layer, op, "W")
            if shared:
                op = self._compute(rank, "W", "moe.shared.W", stage, layer, mb, shared, op.id)
            op = self._compute(rank, "W", "moe.router.W", stage, layer, mb, router, op.id)
            self._grad_done(rank, stage, layer, op, "W")
            return op.id
        backward = pass_kind != "F"
        if etp > 1 and not backward:
            last = self._tp(rank, "all_gather", stage, layer, mb, last)
        if not backward:
            op = self._compute(rank, kind, f"moe.router.{kind}", stage, layer, mb, router, last)
            last = op.id
        first_a2a = self._a2a(rank, "dispatch" if not backward else "combine", stage, layer, mb, a2a, last)
        side = last
        if shared:
            side = self._compute(rank, kind, f"moe.shared.{kind}", stage, layer, mb, shared, last).id
        op = self._compute(rank, kind, f"moe.experts.{kind}", stage, layer, mb, experts, first_a2a)
        if side is not None and side not in op.deps:
            op.deps.append(side)
        self._grad_done(rank, stage, layer, op, pass_kind)
        last = self._a2a(rank, "combine" if not backward else "dispatch", stage, layer, mb, a2a, op.id)
        if backward:
            op = self._compute(rank, kind, f"moe.router.{kind}", stage, layer, mb, router, last)
            self._grad_done(rank, stage, layer, op, pass_kind)
            last = op.id
        if etp > 1 and backward:
            last = self._tp(rank, "reduce_scatter", stage, layer, mb, last)
        return last

    def _a2a(self, rank, what, stage, layer, mb, nbytes, last):
        if self.par.ep == 1:
            return last
        op = self._collective(rank, "ep", "ep", "all_to_all", nbytes, stage, layer, mb, [last])
        op.name = f"ep.{what}"
        return op.id

    def _attention(self, rank, kind, pass_kind, stage, layer, mb, last, alloc=0.0, free=0.0):
        """The attention block of one pass; with CP its core runs in ``cp`` ring steps.

        Ring attention (Liu et al. 2023; Megatron-LM/TransformerEngine's ``cp_comm_type=p2p``
        with load-balanced causal chunks): step i computes the local queries against the K/V
        block received at step i-1 while the next block travels on the CP stream, so the
        transfers hide behind the chunks unless a chunk is shorter than a transfer. Backward
        steps pass K/V and their gradients. Returns (first op, last op).
        """
        m, sh, cp = self.model, self.shape, self.par.cp
        if cp == 1:
            op = self._compute(rank, kind, f"attn.{kind}", stage, layer, mb,
                               self._c(costs.attention_cost, pass_kind, self.selective), last,
                               alloc=alloc, free=free)
            return op, op
        qkv, core, out = self._c(costs.attention_parts, pass_kind, self.selective)
        backward = pass_kind in ("I", "B")
        first_cost, last_cost = (out, qkv) if backward else (qkv, out)
        names = ("proj_out", "proj_qkv") if backward else ("proj_qkv", "proj_out")
        first = self._compute(rank, kind, f"attn.{names[0]}.{kind}", stage, layer, mb, first_cost, last,
                              alloc=alloc)
        step_bytes = costs.cp_kv_bytes(m, sh) * (2 if backward else 1)
        chunk_cost = core.scaled(1.0 / cp)
        prev = first.id
        transfer = None
        for i in range(cp):
            deps = [prev] if transfer is None else [prev, transfer]
            if i < cp - 1:  # forward the block this step uses to the next rank
                transfer = self._collective(rank, "cp", "cp", "ring_shift", step_bytes, stage, layer, mb,
                                            [first.id] if i == 0 else []).id
            chunk = self._emit(rank, "compute", kind, f"attn.core.{kind}", stage, layer, mb, deps, chunk_cost)
            prev = chunk.id
        op = self._compute(rank, kind, f"attn.{names[1]}.{kind}", stage, layer, mb, last_cost, prev, free=free)
        return first, op

    def _recomputed(self, stage: int, layer: int) -> bool:
        chunk = self.chunks[self.sched.chunk_of_stage(stage)]
        return layer - chunk.start < self.recompute_layers

    def _backward_layer(self, rank, stage, layer, mb, last, kind):
        """Input-gradient (and, for B, weight-gradient) of one layer, recompute first if due."""
        m, sh = self.model, self.shape
        rc = self._recomputed(stage, layer)
        first = self._zero3_gather(rank, stage, layer, mb)
        if rc and kind in ("B", "I"):
            last = self._forward_layer(rank, stage, layer, mb, last, kind="R")
        self._layer_started(first)
        sp = self.par.sequence_parallel
        pre, post = ("all_gather", "reduce_scatter") if sp else (None, "all_reduce")
        free = costs.layer_activation_bytes(m, sh, full_recompute=rc)
        if rc:
            free += costs.layer_activation_bytes(m, sh, full_recompute=False)
        frees_here = kind == "B"
        if m.is_moe_layer(layer):
            last = self._moe(rank, kind, kind, stage, layer, mb, last)
        else:
            if pre:
                last = self._tp(rank, pre, stage, layer, mb, last)
            op = self._compute(rank, kind, f"mlp.{kind}", stage, layer, mb, self._mlp(kind, layer), last)
            self._grad_done(rank, stage, layer, op, kind)
            last = self._tp(rank, post, stage, layer, mb, op.id)
        if pre:
            last = self._tp(rank, pre, stage, layer, mb, last)
        _, op = self._attention(rank, kind, kind, stage, layer, mb, last,
                                free=free if frees_here else 0.0)
        self._grad_done(rank, stage, layer, op, kind)
        return self._tp(rank, post, stage, layer, mb, op.id)

    def _weight_layer(self, rank, stage, layer, mb, last):
        m, sh = self.model, self.shape
        rc = self._recomputed(stage, layer)
        free = costs.layer_activation_bytes(m, sh, full_recompute=rc)
        if rc:
            free += costs.layer_activation_bytes(m, sh, full_recompute=False)
        if m.is_moe_layer(layer):
            last = self._moe(rank, "W", "W", stage, layer, mb, last)
        else:
            op = self._compute(rank, "W", "mlp.W", stage, layer, mb, self._mlp("W", layer), last)
            self._grad_done(rank, stage, layer, op, "W")
            last = op.id
        op = self._compute(rank, "W", "attn.W", stage, layer, mb, self._c(costs.attention_cost, "W"),
                           last, free=free)
        self._grad_done(rank, stage, layer, op, "W")
        return op.id

    def _action(self, rank: int, action: Action) -> None:
        """Lower one action; an overlapped F&B pair (DualPipe) starts when the inputs of both of
        its halves have arrived, then runs the halves' ops back to back."""
        start = len(self.prog.ops)
        for half in action.halves():
            self._plain_action(rank, half)
        if action.kind == "FB":
            _, next_stage = self.sched.stage_neighbours(action.b_stage)
            self._needs_from(start, (next_stage, action.b_mb, "grad") if next_stage is not None else None)

    def _plain_action(self, rank: int, a: Action) -> None:
        m, sh = self.model, self.shape
        chunk = self.sched.chunk_of_stage(a.stage)
        layers = self.chunks[chunk]
        first, last_chunk = chunk == 0, chunk == len(self.chunks) - 1
        prev_stage, next_stage = self.sched.stage_neighbours(a.stage)
        start = len(self.prog.ops)
        self.layer_anchor = None
        last = None
        if a.kind == "F":
            if first and self.opts.embedding:
                last = self._compute(rank, "F", "embed.F", a.stage, -1, a.mb,
                                     self._c(costs.embedding_cost, "F"), last).id
            for layer in layers:
                last = self._forward_layer(rank, a.stage, layer, a.mb, last)
            if last_chunk and self.opts.lm_head:
                logits = 4.0 * sh.tokens * m.vocab / sh.tp
                last = self._compute(rank, "F", "lm_head.F", a.stage, -1, a.mb,
                                     self._c(costs.lm_head_cost, "F"), last, alloc=logits).id
            self._needs_from(start, (prev_stage, a.mb, "act") if prev_stage is not None else None)
            if next_stage is not None:
                self._send(rank, a.stage, next_stage, a.mb, "act", last)
        elif a.kind in ("B", "I"):
            if last_chunk and self.opts.lm_head:
                logits = 4.0 * sh.tokens * m.vocab / sh.tp
                op = self._compute(rank, a.kind, f"lm_head.{a.kind}", a.stage, -1, a.mb,
                                   self._c(costs.lm_head_cost, a.kind), last, free=logits)
                self._grad_done(rank, a.stage, -2, op, a.kind)
                last = op.id
            for layer in reversed(layers):
                last = self._backward_layer(rank, a.stage, layer, a.mb, last, a.kind)
            if first and self.opts.embedding and a.kind == "B":
                op = self._compute(rank, "B", "embed.B", a.stage, -1, a.mb,
                                   self._c(costs.embedding_cost, "B"), last)
                self._grad_done(rank, a.stage, -1, op, "B")
            self._needs_from(start, (next_stage, a.mb, "grad") if next_stage is not None else None)
            if prev_stage is not None and last is not None:
                self._send(rank, a.stage, prev_stage, a.mb, "grad", last)
        elif a.kind == "W":
            if last_chunk and self.opts.lm_head:
                op = self._compute(rank, "W", "lm_head.W", a.stage, -1, a.mb, self._c(costs.lm_head_cost, "W"), last)
                self._grad_done(rank, a.stage, -2, op, "W")
                last = op.id
            for layer in reversed(layers):
                last = self._weight_layer(rank, a.stage, layer, a.mb, last)
            if first and self.opts.embedding:
                op = self._compute(rank, "W", "embed.W", a.stage, -1, a.mb, self._c(costs.embedding_cost, "W"), last)
                self._grad_done(rank, a.stage, -1, op, "W")
        else:
            raise ValueError(f"unexpected action kind {a.kind!r}")

    def _needs_from(self, first_op: int, key: tuple | None) -> None:
        """The action's first compute or TP op waits for the transfer ``key`` (none at the chain's
        ends); parameter gathers before it do not."""
        if key is None:
            return
        dp = STREAM["dp"]
        for i in range(first_op, len(self.prog.ops)):
            if self.prog.ops[i].stream != dp:
                self.needs.append((i, key))
                return

    def _send(self, rank: int, stage: int, to_stage: int, mb: int, what: str, after: int) -> None:
        src_pp = self.sched.stage_to_rank[stage]
        dst_pp = self.sched.stage_to_rank[to_stage]
        peer = self._sim_rank(rank, dst_pp)
        pairs = tuple(sorted({(g[src_pp], g[dst_pp]) for g in self._slices(rank)}))
        nbytes = costs.pp_activation_bytes(self.model, self.shape)
        op = self._emit(rank, "pp_send", "pp", f"pp.send.{what}", stage, -1, mb, [after], nbytes=nbytes,
                        comm="p2p", group_set=self.prog.group_set_id(pairs), peer=peer,
                        peer_stage=to_stage)
        self.sends[(stage, mb, what)] = op.id

    def _sim_rank(self, rank: int, pp_index: int) -> int:
        return self.mesh.group_of("pp", rank)[pp_index]

    # ---- data parallelism --------------------------------------------------------------------
    def _layer_shards(self, layer: int) -> list[tuple[str, float]]:
        """Parameters of ``layer`` on one rank, by the group that reduces their gradients:
        ``dpcp`` (data parallel including CP ranks) for dense weights, ``edp`` (expert data
        parallel) for routed experts, sharded over ``ep`` x ``etp`` (Megatron MoE folding)."""
        m, par = self.model, self.par
        if layer == -2:
            return [("dpcp", (m.lm_head_params() + m.final_norm_params()) / par.tp)]
        if layer == -1:
            return [("dpcp", m.embedding_params() / par.tp)]
        if not m.is_moe_layer(layer):
            return [("dpcp", m.layer_params(layer) / par.tp)]
        experts = m.num_experts * m.expert_params()
        return [("dpcp", (m.layer_params(layer) - experts) / par.tp),
                ("edp", experts / (par.ep * par.expert_tp))]

    def _buckets(self, rank: int) -> list[dict]:
        """Gradient buckets of ``rank``: the layers of each stage it holds, in backward order,
        one bucket sequence per reduction group, each closed once it reaches the bucket size."""
        par, m = self.par, self.model
        size = self.opts.dp_bucket_params or max(40_000_000, 1_000_000 * par.dp * par.cp)
        out = []
        for stage in self.sched.stages_of_rank(self.prog.rank_stage[rank]):
            chunk = self.sched.chunk_of_stage(stage)
            layers = []  # -2 = LM head, -1 = embedding
            if chunk == len(self.chunks) - 1 and self.opts.lm_head and not m.tied_embeddings:
                layers.append(-2)
            layers += list(reversed(self.chunks[chunk]))
            if chunk == 0 and self.opts.embedding:
                layers.append(-1)
            current: dict[str, dict | None] = {}
            for layer in layers:
                for group, params in self._layer_shards(layer):
                    if self.group_size[group] == 1:
                        continue
                    bucket = current.get(group)
                    if bucket is None:
                        bucket = current[group] = {"stage": stage, "group": group, "layers": [], "params": 0.0}
                        out.append(bucket)
                    bucket["layers"].append(layer)
                    bucket["params"] += params
                    if bucket["params"] >= size:
                        current[group] = None
        return out

    def _first_use(self, rank: int, stage: int, layer: int, op: Op) -> None:
        ag = self.param_gather.get((stage, layer))
        if ag is not None and (stage, layer) not in self.used:
            self.used.add((stage, layer))
            op.deps.append(ag)

    def _grad_done(self, rank: int, stage: int, layer: int, op: Op, kind: str) -> None:
        if kind in ("B", "W"):
            self.grad_ops[(stage, layer)] = op.id

    def _static_bytes(self, rank: int) -> tuple[float, float]:
        return self.static_of_pipeline_rank(self.prog.rank_stage[rank])

    def static_of_pipeline_rank(self, pp_index: int) -> tuple[float, float]:
        """(static memory, parameters the optimizer updates) of pipeline rank ``pp_index``: each
        shard under ZeRO over its own reduction group (stage 1 optimizer state, 2 also gradients,
        3 also weights)."""
        m = self.model
        by_group = {"dpcp": 0.0, "edp": 0.0}
        for stage in self.sched.stages_of_rank(pp_index):
            chunk = self.sched.chunk_of_stage(stage)
            layers = list(self.chunks[chunk])
            if chunk == 0:
                layers.append(-1)
            if chunk == len(self.chunks) - 1 and not m.tied_embeddings:
                layers.append(-2)
            for layer in layers:
                for group, params in self._layer_shards(layer):
                    by_group[group] += params
        zero = self.par.zero
        static = sum(costs.static_bytes(p, zero, self.group_size[g]) for g, p in by_group.items())
        updated = sum(p / (self.group_size[g] if zero >= 1 else 1) for g, p in by_group.items())
        return static, updated

    # ---- driver ------------------------------------------------------------------------------
    def build(self) -> Program:
        par, prog = self.par, self.prog
        base_group = self.mesh.group_of("pp", 0)
        if self.opts.fold:
            slices = [base_group]
        else:
            slices = self.pp_groups
        for group in slices:
            for pp_index, rank in enumerate(group):
                prog.rank_stage[rank] = pp_index
                prog.rank_weight[rank] = len(self.pp_groups) if self.opts.fold else 1
        for rank in prog.ranks:
            self.param_gather: dict[tuple[int, int], int] = {}
            self.used: set[tuple[int, int]] = set()
            self.grad_ops: dict[tuple[int, int], int] = {}
            buckets = self._buckets(rank) if self.opts.dp_comm else []
            if par.zero in (1, 2):
                for bucket in reversed(buckets):  # forward order of first use
                    op = self._collective(rank, "dp", bucket["group"], "all_gather", 2 * bucket["params"],
                                          bucket["stage"], -1, -1, [])
                    for layer in bucket["layers"]:
                        self.param_gather[(bucket["stage"], layer)] = op.id
            for action in self.sched.actions[prog.rank_stage[rank]]:
                self._action(rank, action)
            reductions = []
            ordered = sorted(buckets, key=lambda b: max(self.grad_ops.get((b["stage"], l), -1) for l in b["layers"]))
            for bucket in ordered:
                deps = sorted({self.grad_ops[(bucket["stage"], l)] for l in bucket["layers"]
                               if (bucket["stage"], l) in self.grad_ops})
                op_name = "reduce_scatter" if par.zero >= 1 else "all_reduce"
                reductions.append(self._collective(rank, "dp", bucket["group"], op_name, 2 * bucket["params"],
                                                   bucket["stage"], -1, -1, deps).id)
            prog.static_bytes[rank], updated = self._static_bytes(rank)
            if self.opts.optimizer:
                self._emit(rank, "compute", "opt", "optimizer", -1, -1, -1, reductions,
                           costs.optimizer_cost(updated, 1))
        for op_id, key in self.needs:
            src = self.sends.get(key)
            if src is None:
                raise SpecError(f"schedule {self.sched.name}: nothing sends {key[2]} of micro-batch "
                                f"{key[1]} from stage {key[0]}")
            self.prog.ops[op_id].deps.append(src)
        return prog


def memory_plan(model: ModelSpec, par: ParallelSpec, gpu: GpuSpec, schedule: Schedule, mesh: DeviceMesh,
                recompute_layers: int, opts: WorkloadOptions | None = None) -> list[float]:
    """Peak bytes per pipeline rank if the first ``recompute_layers`` layers of every chunk are
    fully recomputed, without simulating. A rank's allocations all happen on its compute stream,
    which runs its actions in schedule order, so its memory high-water mark follows from that
    order alone; this replays the lowering's allocations (a forward keeps each layer's
    activations, or only its input when recomputed, and the last stage its logits; a recompute
    rebuilds a layer's activations just before its backward; B, or W after I, releases them)."""
    from dataclasses import replace

    low = _Lowering(model, replace(par, recompute=str(recompute_layers)), gpu, schedule, mesh,
                    opts or WorkloadOptions())
    sh = low.shape
    full = costs.layer_activation_bytes(model, sh, full_recompute=False)
    kept = costs.layer_activation_bytes(model, sh, full_recompute=True)
    logits = 4.0 * sh.tokens * model.vocab / sh.tp if low.opts.lm_head else 0.0
    last_chunk = len(low.chunks) - 1
    peaks = []
    for pp_index, row in enumerate(schedule.actions):
        static, _ = low.static_of_pipeline_rank(pp_index)
        level = peak = 0.0
        for action in row:
            for a in action.halves():
                chunk_index = schedule.chunk_of_stage(a.stage)
                chunk = low.chunks[chunk_index]
                rc = [i - chunk.start < low.recompute_layers for i in chunk]
                if a.kind == "F":
                    for r in rc:
                        level += kept if r else full
                        peak = max(peak, level)
                    if chunk_index == last_chunk:
                        level += logits
                        peak = max(peak, level)
                    continue
                if a.kind in ("B", "I") and chunk_index == last_chunk:
                    level -= logits  # the LM head's backward runs first
                for r in reversed(rc):
                    if r and a.kind in ("B", "I"):
                        level += full  # the recompute forward
                        peak = max(peak, level)
                    if a.kind in ("B", "W"):
                        level -= kept + full if r else full
        peaks.append(static + peak)
    return peaks


def lower(model: ModelSpec, par: ParallelSpec, gpu: GpuSpec, schedule: Schedule, mesh: DeviceMesh,
          opts: WorkloadOptions | None = None) -> Program:
    """Per-rank programs for one training step."""
    return _Lowering(model, par, gpu, schedule, mesh, opts or WorkloadOptions()).build()
