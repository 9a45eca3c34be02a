"""The MoE block: Megatron-LM's all-to-all dispatcher with expert TP (bytes by hand), shared
experts with their TP collectives beside the dispatch, and routing skew as per-EP-rank work."""

from __future__ import annotations

import pytest

from simtrain import costs
from simtrain.engine import simulator as engine
from simtrain.results.metrics import summarize
from simtrain.network.analytic import AnalyticNetwork
from simtrain.schedules import generate
from simtrain.specs.gpu import get_gpu
from simtrain.specs.model import ModelSpec, load_model
from simtrain.specs.parallel import ParallelSpec
from simtrain.topology.cluster import build_topology
from simtrain.topology.mesh import build_mesh
from simtrain.topology.routing.router import Router
from simtrain.workload.lower import lower
from simtrain.workload.moe_routing import Routing, ep_loads
from simtrain.workload.options import WorkloadOptions

pytestmark = pytest.mark.quick

GPU = get_gpu("h100-sxm")
LAYERS_ONLY = dict(embedding=False, lm_head=False, optimizer=False, dp_comm=False)


def tiny_moe(shared: int = 0) -> ModelSpec:
    """Four layers, hidden 1024, 8 experts of width 512, top 2 (and ``shared`` shared experts)."""
    return ModelSpec(name="tiny-moe", hidden=1024, layers=4, heads=8, kv_heads=8, ffn=4096, vocab=32000,
                     num_experts=8, top_k=2, moe_ffn=512, shared_experts=shared)


def program(model: ModelSpec, par: ParallelSpec, opts: WorkloadOptions = WorkloadOptions(**LAYERS_ONLY)):
    mesh = build_mesh(par.tp, par.cp, par.dp, par.pp, ep=par.ep, etp=par.expert_tp, order=par.order)
    return lower(model, par, GPU, generate("1f1b", par.pp, par.num_microbatches), mesh, opts)


def run(model: ModelSpec, par: ParallelSpec, opts: WorkloadOptions):
    data = {"gpu": "h100-sxm", "nodes": 2, "node": {"gpus": 8, "nic_gbps": 400},
            "fabric": {"kind": "fat-tree", "nodes_per_leaf": 2, "spines": 2}}
    cluster = build_topology(data, "c")
    prog = program(model, par, opts)
    res = engine.run(prog, AnalyticNetwork(cluster, Router(cluster)))
    rep = summarize(res.timeline, model=model, gpu=GPU, num_gpus=par.world, seq=par.seq, gbs=par.gbs,
                    rank_weight=prog.rank_weight, pipeline_rank_of=prog.pipeline_rank_of,
                    static_bytes=prog.static_bytes)
    return prog, res.timeline, rep


def ops_named(prog, name: str, rank: int = 0, layer: int = 0, mb: int = 0):
    return [op for op in prog.ops if op.name == name and op.rank == rank and op.layer == layer and op.mb == mb]


def test_mixtral_tp2_dispatch_carries_the_sequence_shard_then_gathers_over_expert_tp():
    mixtral = load_model("mixtral-8x7b")
    par = ParallelSpec(tp=2, pp=1, dp=4, ep=4, seq=4096, gbs=4)  # expert TP = TP = 2
    prog = program(mixtral, par)
    # Megatron-LM's MoEAlltoAllTokenDispatcher: 4096 / 2 sequence-parallel tokens x top 2 x
    # hidden 4096 x 2 bytes leave in the dispatch, half of the TP-gathered 67.1 MB
    dispatch, dispatch_grad = ops_named(prog, "ep.dispatch")  # forward, then the backward's
    assert dispatch.nbytes == 4096 // 2 * 2 * 4096 * 2 == 33_554_432
    combine, combine_grad = ops_named(prog, "ep.combine")
    assert combine.nbytes == combine_grad.nbytes == dispatch_grad.nbytes == 33_554_432
    # the received rows are all-gathered over the 2 expert-TP ranks: output 2 x 33.5 MB
    gathers = ops_named(prog, "tp.etp.all_gather")
    scatters = ops_named(prog, "tp.etp.reduce_scatter")
    assert [g.nbytes for g in gathers] == [2 * 33_554_432] * 2  # forward and backward
    assert [s.nbytes for s in scatters] == [2 * 33_554_432] * 2
    # forward order: router, dispatch, all-gather, experts, reduce-scatter, combine
    (router,) = ops_named(prog, "moe.router.F")
    assert dispatch.deps == [router.id]
    fwd_gather, bwd_gather = gathers
    fwd_scatter, bwd_scatter = scatters
    assert fwd_gather.deps == [dispatch.id]
    (experts_f,) = ops_named(prog, "moe.experts.F")
    assert fwd_gather.id in experts_f.deps and fwd_scatter.deps == [experts_f.id]
    # the backward mirrors it: combine's gradient, all-gather, experts, reduce-scatter, dispatch's
    (experts_b,) = ops_named(prog, "moe.experts.B")
    assert bwd_gather.deps == [combine_grad.id]
    assert bwd_gather.id in experts_b.deps and bwd_scatter.deps == [experts_b.id]
    assert dispatch_grad.deps == [bwd_scatter.id]
    # the experts run 2 x 2048 x 2 = 8192 rows over 2 local experts, ffn split over expert TP
    c = costs.moe_costs(mixtral, costs.Shape.of(par), "F", 2, 4)
    up = next(k for k in c.experts.kernels if k.name == "moe.expert.fc1")
    assert (up.m, up.n, up.batch) == (4096, 2 * 14336 // 2, 2)
    assert experts_f.flops == c.experts.flops


def test_expert_tp_one_keeps_the_tokens_split_and_needs_no_gather():
    mixtral = load_model("mixtral-8x7b")
    par = ParallelSpec(tp=2, etp=1, pp=1, dp=4, ep=8, seq=4096, gbs=4)
    prog = program(mixtral, par)
    dispatch, _ = ops_named(prog, "ep.dispatch")
    assert dispatch.nbytes == 2048 * 2 * 4096 * 2
    assert not ops_named(prog, "tp.etp.all_gather")


def test_shared_experts_gather_over_tp_and_run_beside_the_dispatch():
    model = tiny_moe(shared=1)
    par = ParallelSpec(tp=2, pp=1, dp=4, ep=4, etp=1, seq=4096, gbs=4)
    prog, tl, _ = run(model, par, WorkloadOptions(**LAYERS_ONLY))
    (router,) = ops_named(prog, "moe.router.F")
    dispatch, _ = ops_named(prog, "ep.dispatch")
    (shared,) = ops_named(prog, "moe.shared.F")
    combine, _ = ops_named(prog, "ep.combine")
    # a TP-sharded MLP on the sequence-parallel tokens: all-gather 4096 x 1024 x 2 bytes before,
    # reduce-scatter of as much after (Megatron-LM's shared_experts.py)
    gather = prog.ops[shared.deps[0]]
    assert (gather.comm, gather.nbytes, gather.deps) == ("all_gather", 4096 * 1024 * 2, [router.id])
    scatter = next(op for op in prog.ops if op.deps == [shared.id] and op.comm == "reduce_scatter")
    assert scatter.nbytes == 4096 * 1024 * 2
    assert dispatch.id not in shared.deps  # beside the all-to-all, not after it
    assert scatter.id in combine.deps  # the block's output adds the shared experts' share
    # the backward mirrors it: gather the output gradient (and the input again, for the weight
    # gradient), run, reduce-scatter the input gradient before the router's backward sums it
    (shared_b,) = ops_named(prog, "moe.shared.B")
    gather_b = prog.ops[shared_b.deps[0]]
    assert (gather_b.comm, gather_b.nbytes) == ("all_gather", 2 * 4096 * 1024 * 2)
    scatter_b = next(op for op in prog.ops if op.deps == [shared_b.id] and op.comm == "reduce_scatter")
    (router_b,) = ops_named(prog, "moe.router.B")
    assert scatter_b.nbytes == 4096 * 1024 * 2 and scatter_b.id in router_b.deps
    # on the timeline the shared experts' gather runs beside the dispatch, both right after the
    # router, and their compute comes before the routed experts'
    d = tl.spans(tl.mask(rank=0, stream="ep"))[0]
    g = next(x for x in tl.spans(tl.mask(rank=0, stream="tp")) if x.start_s >= d.start_s - 1e-12)
    comp = [x for x in tl.spans(tl.mask(rank=0, stream="compute")) if x.mb == 0 and x.layer == 0]
    names = [x.name for x in comp]
    r, sh, ex = (comp[names.index(n)] for n in ("moe.router.F", "moe.shared.F", "moe.experts.F"))
    assert d.name == "ep.dispatch" and d.start_s == pytest.approx(r.end_s) and g.start_s == pytest.approx(r.end_s)
    assert g.start_s < d.end_s and d.start_s < g.end_s
    assert sh.end_s <= ex.start_s + 1e-12


def test_without_shared_expert_overlap_they_run_after_the_combine_and_their_gradient_first():
    """Megatron-LM's default (no --moe-shared-expert-overlap): MoELayer adds the shared experts to
    the combined output, so their forward waits for the combine and, in the input-gradient pass,
    the combine's gradient waits for theirs (the output's last addend, autograd's first)."""
    model = tiny_moe(shared=1)
    par = ParallelSpec(tp=2, pp=1, dp=4, ep=4, etp=1, seq=4096, gbs=4, moe_shared_expert_overlap=False)
    prog, tl, rep = run(model, par, WorkloadOptions(**LAYERS_ONLY))
    (shared,) = ops_named(prog, "moe.shared.F")
    combine_f, combine_b = ops_named(prog, "ep.combine")  # the forward's, then the backward's (program order)
    gather = prog.ops[shared.deps[0]]
    assert gather.comm == "all_gather" and gather.deps == [combine_f.id]
    (shared_b,) = ops_named(prog, "moe.shared.B")
    scatter_b = next(op for op in prog.ops if op.deps == [shared_b.id] and op.comm == "reduce_scatter")
    assert combine_b.deps == [scatter_b.id]
    comp = {x.name: x for x in tl.spans(tl.mask(rank=0, stream="compute")) if x.mb == 0 and x.layer == 0}
    first_combine = min((x for x in tl.spans(tl.mask(rank=0, stream="ep")) if x.name == "ep.combine" and x.mb == 0
                         and x.layer == 0), key=lambda x: x.start_s)
    assert comp["moe.shared.F"].start_s >= first_combine.end_s - 1e-12
    beside = run(model, ParallelSpec(tp=2, pp=1, dp=4, ep=4, etp=1, seq=4096, gbs=4), WorkloadOptions(**LAYERS_ONLY))
    assert beside[2]["step_time_s"] < rep["step_time_s"]  # beside the dispatch, their time hides under it


SKEW = dict(tp=1, pp=2, dp=8, ep=4, seq=2048, gbs=16)


def test_skew_gives_each_ep_rank_its_own_share_and_the_rest_wait_at_the_combine():
    model = tiny_moe()
    par = ParallelSpec(**SKEW)
    routing = Routing(skew=1.0, seed=3)
    loads = ep_loads(8, 4, 4, routing)
    prog, tl, _ = run(model, par, WorkloadOptions(**LAYERS_ONLY, routing=routing))
    # one simulated pipeline per EP position (4 x 2 ranks), each standing for 2 pipelines
    assert len(prog.ranks) == 8 and set(prog.rank_weight.values()) == {2}
    mesh = build_mesh(1, 1, 8, 2, ep=4)
    first = [r for r in prog.ranks if prog.pipeline_rank_of[r] == 0]
    position = {r: mesh.expert.coords(r)["ep"] for r in first}
    assert sorted(position.values()) == [0, 1, 2, 3]
    uniform = program(model, par)
    (mean_f,) = ops_named(uniform, "moe.experts.F")
    for layer in (0, 1):
        for r in first:  # top 2 of 8 over 2048 tokens: 4096 x load rows on 2 local experts
            (op,) = ops_named(prog, "moe.experts.F", rank=r, layer=layer)
            gemm_share = op.flops / mean_f.flops
            assert gemm_share == pytest.approx(loads[layer][position[r]], rel=2e-3)
        # the combine starts when the busiest rank's experts end: the others wait
        spans = [x for x in tl.spans(tl.mask()) if x.layer == layer and x.mb == 0 and x.rank in position]
        ends = {x.rank: x.end_s for x in spans if x.name == "moe.experts.F"}
        starts = {r: min(x.start_s for x in spans if x.rank == r and x.name == "ep.combine") for r in first}
        busiest = max(first, key=lambda r: loads[layer][position[r]])
        assert len(set(starts.values())) == 1
        assert starts[busiest] == pytest.approx(ends[busiest], abs=1e-12)
        for r in first:
            if r != busiest:
                assert starts[r] - ends[r] > 0  # waiting, shown as idle before the combine


@pytest.mark.parametrize("layout, shared", [
    (SKEW, 0),
    (dict(SKEW, tp=2, etp=1, dp=4), 1),  # TP groups span 2 EP positions; shared experts on TP
])
def test_skewed_fold_equals_no_fold_and_counts_only_real_work(layout, shared):
    model = tiny_moe(shared)
    par = ParallelSpec(**layout)
    reps = {}
    for fold, skew in ((True, 1.0), (False, 1.0), (True, 0.0)):
        opts = WorkloadOptions(fold=fold, routing=Routing(skew=skew, seed=3), embedding=False, lm_head=False,
                               optimizer=False)
        reps[fold, skew] = run(model, par, opts)[2]
    folded, unfolded, uniform = reps[True, 1.0], reps[False, 1.0], reps[True, 0.0]
    for key in ("step_time_s", "mfu", "hfu", "hardware_flops_per_step"):
        assert folded[key] == pytest.approx(unfolded[key], rel=1e-12)
    for k, v in folded["breakdown_s"].items():
        assert v == pytest.approx(unfolded["breakdown_s"][k], rel=1e-9, abs=1e-15)
    # the EP ranks' shares add up to the uniform work (whole rows per expert aside), so HFU over
    # MFU is the same as without skew: no recompute, no work that was never done
    assert folded["hardware_flops_per_step"] == pytest.approx(uniform["hardware_flops_per_step"], rel=1e-3)
    assert folded["hfu"] / folded["mfu"] == pytest.approx(uniform["hfu"] / uniform["mfu"], rel=1e-3)
    assert folded["step_time_s"] > uniform["step_time_s"]


def test_no_skew_stays_folded_to_one_pipeline():
    prog = program(tiny_moe(), ParallelSpec(**SKEW))
    assert len(prog.ranks) == 2 and set(prog.rank_weight.values()) == {8}


def _a2a_bytes(res, name: str) -> float:
    """Bytes of the forward's all-to-all ``name`` of layer 0, micro-batch 0 (the earlier one)."""
    tl = res.timeline
    m = (tl["name"] == tl.names.index(name)) & (tl["layer"] == 0) & (tl["mb"] == 0)
    return float(tl["bytes"][m][tl["start_s"][m].argmin()])


def test_deepep_sends_one_copy_per_remote_node_in_bf16():
    """Mixtral (8 experts, top 2) with EP 8 over two nodes, four ranks each: a token reaches the
    other node's four experts with P = 1 - C(4,2)/C(8,2) = 22/28, so DeepEP's buffer has
    (22/28) x 8/4 rows per token against Megatron-LM's 2; FP8 training or not, dispatch and
    combine carry the bf16 hidden states (Megatron-LM's ``fused_a2a.py``)."""
    from helpers import simulate_settings

    base = dict(model="mixtral-8x7b", topology="h100-ib", gpus=16, tp=1, pp=1, ep=8, seq=4096, gbs=16,
                order="tp-cp-dp-ep-pp", fp8=True)
    megatron = simulate_settings(**base)
    deepep = simulate_settings(**base, moe_dispatcher="deepep")
    tokens_x_hidden = 4096 * 4096
    rows = 22 / 28 * 8 / 4
    assert _a2a_bytes(megatron, "ep.dispatch") == _a2a_bytes(megatron, "ep.combine") == 2 * tokens_x_hidden * 2
    assert _a2a_bytes(deepep, "ep.dispatch") == _a2a_bytes(deepep, "ep.combine") == pytest.approx(2 * tokens_x_hidden * rows)
    ep_time = [r.report["exposed_comm_s"]["ep"] + r.report["overlapped_comm_s"]["ep"] for r in (megatron, deepep)]
    assert ep_time[1] < 0.8 * ep_time[0]  # 22/28 of the bytes
