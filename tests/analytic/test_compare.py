"""Analytic against simulated: the 1% agreement case, and ``compare`` naming the largest differences."""

from __future__ import annotations

import pytest

from helpers import cli
from simtrain import api
from simtrain.engine import simulator as engine
from simtrain.costs import KernelTimer, Shape, attention_cost, mlp_cost
from simtrain.network.analytic import AnalyticNetwork
from simtrain.network.interface import op_parts
from simtrain.topology.mesh import build_mesh
from simtrain.topology.routing.router import Router
from simtrain.workload.lower import lower
from simtrain.workload.options import WorkloadOptions
from simtrain.workload.program import STREAM


class NoP2P(AnalyticNetwork):
    def p2p_time(self, src, dst, nbytes):
        return 0.0


@pytest.mark.parametrize("tp, pp, m", [(8, 4, 32), (4, 2, 16), (2, 8, 16)])
def test_uniform_1f1b_agrees_with_the_closed_form(tp, pp, m):
    """Analytic network for TP, free p2p, no LM head or embedding, no DP traffic: the simulated
    1F1B step is (m + p - 1) micro-batch times of the notes' TP formula, plus NCCL's latency of
    each TP collective (which the notes leave out), plus the layers' compute, less the backward
    collectives hidden behind the GEMMs. The
    compute is the kernel model's: the notes' FLOPs at the flat efficiency, plus the fused
    attention backward's extra products and the memory-bound kernels the notes leave out."""
    dp = 64 // (tp * pp)
    sc = api.resolve(dict(model="llama3-70b", topology="seed-h100", gpus=64, tp=tp, pp=pp, seq=8192,
                          gbs=dp * m))
    par, model, gpu = sc.parallel, sc.model, sc.gpu
    opts = WorkloadOptions(embedding=False, lm_head=False, optimizer=False, dp_comm=False)
    prog = lower(model, par, gpu, api.build_schedule(sc, opts), build_mesh(tp, 1, dp, pp), opts)
    net = NoP2P(sc.cluster, Router(sc.cluster))
    step = engine.run(prog, net).timeline.end_s
    # the notes' per-micro-batch time of one stage (course notes, parallel_plan.py)
    n_embed = model.params_total - model.params_nonembedding
    f_layer = 6 * (model.params_total - n_embed) / model.layers + 6 * par.seq * model.hidden
    sec = par.seq / tp / gpu.effective_flops
    timer, sh = KernelTimer(gpu), Shape.of(par)
    layer_s = sum(timer.time(cost(model, sh, kind)) for kind in "FB" for cost in (attention_cost, mlp_cost))
    assert f_layer * sec < layer_s < 1.15 * f_layer * sec  # the notes' FLOPs are most of the compute
    layers = model.layers // pp
    act_bytes = par.seq * model.hidden * 2
    tp_c = layers * 4 * 2 * (tp - 1) / tp * act_bytes / 450e9
    tp_ops = [(part, prog.group_sets[op.group_set][0], size) for op in prog.ops
              if op.rank == 0 and op.stream == STREAM["tp"] for part, size in [op_parts(op)]]
    latency = sum(net.planner.price(c, g, size).latency_s for parts, g, size in tp_ops for c in parts) / m
    t_mb = layers * layer_s + tp_c + latency
    # the backward's collectives run beside its GEMMs (Megatron-LM's overlap, with two re-gathers
    # per layer): the step lies between every backward collective hidden and every one exposed
    regather = layers * 2 * (tp - 1) / tp * act_bytes / 450e9
    assert (m + pp - 1) * (layers * layer_s + tp_c / 2) < step < (m + pp - 1) * (t_mb + regather)
    assert step < 0.99 * (m + pp - 1) * t_mb


@pytest.mark.quick
def test_compare_names_largest_differences():
    code, text, err = cli("compare", "--model", "llama3-70b", "--topology", "seed-h100", "--gpus", 64,
                          "--tp", 8, "--pp", 4, "--seq", 8192, "--gbs", 32)
    assert code == 0, err
    assert "largest differences:" in text
    assert "- bubble:" in text or "- tp:" in text or "- imbalance:" in text


# The MoE acceptance layouts. Mixtral: EP is folded from the DP x CP ranks of one pipeline
# position, so etp*ep*pp must divide the GPUs; the default TP 8 (expert TP 8) would need
# 8*8*4 = 256, TP 1 needs 32. DeepSeek-V3: 61 layers, so PP 1 (the closed form needs pp to divide
# the layers); EP 256 with expert TP 1 keeps one expert of each MoE layer per GPU, in memory.
MOE_COMMANDS = {
    "mixtral-8x7b": ("--gpus", 64, "--tp", 1, "--pp", 4, "--ep", 8),
    "deepseek-v3": ("--gpus", 256, "--tp", 8, "--etp", 1, "--pp", 1, "--ep", 256),
}


@pytest.mark.parametrize("model", sorted(MOE_COMMANDS))
def test_compare_moe_models(model):
    argv = ("--model", model, "--topology", "h100-ib", *MOE_COMMANDS[model], "--seq", 4096, "--gbs", 64)
    code, text, err = cli("compare", *argv)
    assert code == 0, err
    assert "analytic" in text and "simulated" in text and "largest differences:" in text
    ep_row = next(line for line in text.splitlines() if line.startswith("ep "))
    assert "0.0 us" not in ep_row  # both sides charge the all-to-all


@pytest.mark.quick
def test_deliberate_differences_are_named_in_their_category():
    """The CP ring volume: the closed form keeps the course notes' whole K and V (a factor TP above
    the simulation's per-GPU share); compare's explanation of the cp category names it, either way."""
    from simtrain.analytic.compare import DELIBERATE_DIFFERENCES, largest_differences
    from simtrain.results.metrics import BREAKDOWN

    (cp,) = [d for d in DELIBERATE_DIFFERENCES if d.category == "cp"]
    assert "parallel_plan.py" in cp.source and "1/TP" in cp.simulation
    base = dict.fromkeys(BREAKDOWN, 0.0)
    analytic = {"step_time_s": 10.0, "breakdown_s": base | {"compute": 9.0, "cp": 1.0}}
    for sim_cp in (0.2, 2.0):
        simulated = {"step_time_s": 9.0 + sim_cp, "breakdown_s": base | {"compute": 9.0, "cp": sim_cp}}
        (row,) = largest_differences(analytic, simulated)
        assert row["deliberate"] == ["CP ring volume"]
        assert row["cause"].endswith(cp.sentence()) and "deliberate difference (CP ring volume)" in row["cause"]
    # beyond the top categories, a deliberate difference is still named
    many = {"step_time_s": 16.0, "breakdown_s": base | {"compute": 12.0, "tp": 2.0, "pp": 1.0, "dp": 0.6,
                                                        "cp": 0.4}}
    rows = largest_differences({"step_time_s": 12.0, "breakdown_s": base | {"compute": 12.0}}, many)
    assert [r["category"] for r in rows] == ["tp", "pp", "dp", "cp"]
    assert [r["deliberate"] for r in rows] == [[], [], [], ["CP ring volume"]]


@pytest.mark.quick
def test_compare_names_the_cp_ring_volume():
    # CP across two nodes: the closed form's ring, TP times the simulation's, is far from hidden
    code, text, err = cli("compare", "--model", "llama3-8b", "--topology", "seed-h100", "--gpus", 16,
                          "--tp", 8, "--cp", 2, "--pp", 1, "--seq", 8192, "--gbs", 16)
    assert code == 0, err
    assert "deliberate difference (CP ring volume)" in text
