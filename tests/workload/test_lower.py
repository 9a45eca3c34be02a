"""The lowering: a folded run equals the unfolded one; every schedule lowers onto real costs."""

from __future__ import annotations

import json

import pytest

from helpers import cli, simulate, tiny_model
from simtrain.network.analytic import AnalyticNetwork
from simtrain.specs.parallel import ParallelSpec
from simtrain.topology.cluster import build_topology
from simtrain.topology.routing.router import Router
from simtrain.workload.options import WorkloadOptions


@pytest.mark.quick
def test_folded_equals_unfolded():
    model = tiny_model(layers=4)
    data = {"gpu": "h100-sxm", "nodes": 2, "node": {"gpus": 8, "nic_gbps": 400},
            "fabric": {"kind": "fat-tree", "nodes_per_leaf": 2, "spines": 2}}
    cluster = build_topology(data, "c")
    net = AnalyticNetwork(cluster, Router(cluster))
    par = ParallelSpec(tp=2, dp=4, pp=2, gbs=16, seq=1024)
    reps = []
    for fold in (True, False):
        _, _, rep = simulate(model, par, opts=WorkloadOptions(fold=fold), network=net)
        reps.append(rep)
    folded, unfolded = reps
    for key in ("step_time_s", "mfu", "hfu", "bubble_ratio"):
        assert folded[key] == pytest.approx(unfolded[key], rel=1e-12)
    for k, v in folded["breakdown_s"].items():
        assert v == pytest.approx(unfolded["breakdown_s"][k], rel=1e-9, abs=1e-15)
    assert folded["peak_memory_gib"] == pytest.approx(unfolded["peak_memory_gib"])


@pytest.mark.parametrize("schedule, extra", [
    ("gpipe", ()), ("1f1b", ()), ("interleaved-1f1b", ("--vpp", 2)), ("zb-h1", ()), ("zb-h2", ()),
    ("zb-v", ()), ("dualpipe", ()), ("dualpipev", ()), ("zb-auto", ()),
])
def test_every_schedule_runs_on_real_costs(tmp_path, schedule, extra):
    code, out, err = cli("run", "--model", "llama3-8b", "--topology", "h100-ib", "--gpus", 32, "--tp", 4,
                         "--pp", 4, "--gbs", 16, "--seq", 2048, "--schedule", schedule, *extra,
                         "--no-plot", "--json", "--out", tmp_path)
    assert code == 0, err
    rep = json.loads(out)
    assert rep["breakdown_s"]["imbalance"] > 0  # the LM head makes the last stage heavier
    assert sum(rep["breakdown_s"].values()) == pytest.approx(rep["step_time_s"], rel=1e-9)


@pytest.mark.quick
def test_blocking_sends_and_the_scatter_gather_of_received_activations():
    """Without sequence parallelism each TP rank sends its slice and the receiving stage
    all-gathers them; without --overlap-p2p-comm a rank's next action waits for its send."""
    from helpers import simulate_settings

    base = dict(model="llama3-8b", topology="h100-ib", gpus=32, tp=4, pp=4, seq=2048, gbs=16, sp=False)
    res = simulate_settings(**base)
    tl = res.timeline
    gathers = [s for s in tl.spans(tl.mask(rank=res.timeline.ranks[1], stream="tp")) if s.layer == -1]
    assert gathers and all("all_gather" in s.name for s in gathers)  # one per received micro-batch
    blocking = simulate_settings(**base, overlap_p2p_comm=False)
    assert blocking.report["step_time_s"] > res.report["step_time_s"]


def test_folded_equals_unfolded_with_blocking_sends_and_late_reductions():
    from helpers import simulate_settings

    s = dict(model="llama3-8b", topology="h100-ib", gpus=32, tp=2, pp=4, seq=2048, gbs=32, sp=False,
             overlap_p2p_comm=False, overlap_grad_reduce=False, schedule="interleaved-1f1b", vpp=2)
    folded, unfolded = simulate_settings(**s).report, simulate_settings(**s, fold=False).report
    assert folded["step_time_s"] == pytest.approx(unfolded["step_time_s"], rel=1e-12)


@pytest.mark.quick
@pytest.mark.parametrize("fold", [True, False])
def test_the_optimizer_waits_for_the_global_gradient_norm(fold):
    """Every simulated rank joins one all-reduce of one fp32 over every GPU after its reductions,
    and its optimizer step waits for it: all optimizers start together."""
    from simtrain.workload.program import KIND

    model = tiny_model(layers=4)
    cluster = build_topology({"gpu": "h100-sxm", "nodes": 2, "node": {"gpus": 8, "nic_gbps": 400},
                              "fabric": {"kind": "fat-tree", "nodes_per_leaf": 2, "spines": 2}}, "c")
    par = ParallelSpec(tp=2, dp=4, pp=2, gbs=16, seq=1024)
    net = AnalyticNetwork(cluster, Router(cluster))
    prog, res, _ = simulate(model, par, opts=WorkloadOptions(fold=fold), network=net)
    norms = [op for op in prog.ops if op.key == ("grad_norm", 0)]
    assert len(norms) == len(prog.ranks) == prog.members[("grad_norm", 0)]
    assert all(op.comm == "all_reduce" and op.nbytes == 4 for op in norms)
    assert {prog.group_sets[op.group_set] for op in norms} == {(tuple(range(16)),)}
    opts = [op for op in prog.ops if op.kind == KIND["opt"]]
    assert all(norm.id in opt.deps for norm, opt in zip(norms, opts, strict=True))
    tl = res.timeline
    starts = {s.start_s for s in tl.spans(tl.mask(kind="opt"))}
    assert len(starts) == 1


@pytest.mark.quick
def test_without_data_parallelism_the_norm_still_waits_for_the_last_gradient():
    """With no reduction to wait for, the norm follows the rank's last compute op: every
    optimizer starts after the slowest rank's last backward."""
    from simtrain.workload.program import KIND, STREAM

    model = tiny_model(layers=4)
    cluster = build_topology({"gpu": "h100-sxm", "nodes": 1, "node": {"gpus": 8, "nic_gbps": 400},
                              "fabric": {"kind": "fat-tree", "nodes_per_leaf": 1, "spines": 1}}, "c")
    par = ParallelSpec(tp=1, dp=1, pp=2, gbs=4, seq=1024)
    net = AnalyticNetwork(cluster, Router(cluster))
    prog, res, _ = simulate(model, par, opts=WorkloadOptions(), network=net)
    norms = [op for op in prog.ops if op.key == ("grad_norm", 0)]
    for norm in norms:
        computed = [i for i in prog.order[(norm.rank, STREAM["compute"])] if prog.ops[i].kind != KIND["opt"]]
        assert computed[-1] in norm.deps
    tl = res.timeline
    last_backward = max(s.end_s for s in tl.spans(tl.mask(stream="compute")) if s.kind != "opt")
    assert all(s.start_s >= last_backward for s in tl.spans(tl.mask(kind="opt")))


@pytest.mark.quick
def test_no_optimizer_no_gradient_norm():
    prog, _, _ = simulate(tiny_model(layers=2), ParallelSpec(pp=2, gbs=2, seq=256))
    assert not any(op.key == ("grad_norm", 0) for op in prog.ops)


@pytest.mark.quick
@pytest.mark.parametrize("sync", ["grad-norm", "post-validation"])
def test_consecutive_steps_follow_the_optimizer(sync):
    """Each step ends in its optimizer step (after the global norm, unless post-validated); the
    next step's parameter gathers wait for it, and its transfers are its own."""
    from simtrain.workload.program import KIND, STREAM

    model = tiny_model(layers=4)
    cluster = build_topology({"gpu": "h100-sxm", "nodes": 2, "node": {"gpus": 8, "nic_gbps": 400},
                              "fabric": {"kind": "fat-tree", "nodes_per_leaf": 2, "spines": 2}}, "c")
    par = ParallelSpec(tp=2, dp=4, pp=2, gbs=16, seq=1024)
    opts = WorkloadOptions(steps=2, optimizer_sync=sync)
    prog, res, _ = simulate(model, par, opts=opts, network=AnalyticNetwork(cluster, Router(cluster)))
    for rank in prog.ranks:
        optimizers = [op for op in prog.ops if op.rank == rank and op.kind == KIND["opt"]]
        assert len(optimizers) == 2
        gathers = [op for op in prog.ops if op.rank == rank and op.stream == STREAM["dp"]
                   and op.comm == "all_gather" and op.id > optimizers[0].id]
        assert gathers and all(optimizers[0].id in op.deps for op in gathers)
    norms = {op.key for op in prog.ops if op.key is not None and op.key[0] == "grad_norm"}
    assert norms == ({("grad_norm", 0), ("grad_norm", 1)} if sync == "grad-norm" else set())
    sends = [op for op in prog.ops if op.comm == "p2p"]
    assert len(sends) == 2 * 2 * 4  # two steps of 4 micro-batches, an activation and a gradient each
    ends = res.timeline.step_ends()
    assert len(ends) == 2 and 0 < ends[0] < ends[1]
