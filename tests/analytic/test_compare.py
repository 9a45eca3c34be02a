"""Analytic against simulated: the 1% agreement case, and ``compare`` naming the largest differences."""

from __future__ import annotations

import pytest

from helpers import cli
from simtrain import api, engine
from simtrain.network.analytic import AnalyticNetwork
from simtrain.topology.mesh import build_mesh
from simtrain.topology.routes import Router
from simtrain.workload.lower import lower
from simtrain.workload.options import WorkloadOptions


class NoP2P(AnalyticNetwork):
    def p2p_time(self, src, dst, nbytes):
        return 0.0


@pytest.mark.parametrize("tp, pp, m", [(8, 4, 32), (4, 2, 16), (2, 8, 16)])
def test_uniform_1f1b_agrees_with_the_closed_form(tp, pp, m):
    """Analytic network for TP, free p2p, no LM head or embedding, no DP traffic: the simulated
    1F1B step equals (m + p - 1) micro-batch times of the notes' formulas within 1%."""
    dp = 64 // (tp * pp)
    sc = api.resolve(dict(model="llama3-70b", topology="seed-h100", gpus=64, tp=tp, pp=pp, seq=8192,
                          gbs=dp * m))
    par, model, gpu = sc.parallel, sc.model, sc.gpu
    opts = WorkloadOptions(embedding=False, lm_head=False, optimizer=False, dp_comm=False)
    prog = lower(model, par, gpu, api.build_schedule(sc, opts), build_mesh(tp, 1, dp, pp), opts)
    step = engine.run(prog, NoP2P(sc.cluster, Router(sc.cluster))).timeline.end_s
    # the notes' per-micro-batch time of one stage (course notes, parallel_plan.py)
    n_embed = model.params_total - model.params_nonembedding
    f_layer = 6 * (model.params_total - n_embed) / model.layers + 6 * par.seq * model.hidden
    sec = par.seq / tp / gpu.effective_flops
    layers = model.layers // pp
    act_bytes = par.seq * model.hidden * 2
    tp_c = layers * 4 * 2 * (tp - 1) / tp * act_bytes / 450e9
    t_mb = layers * f_layer * sec + tp_c
    assert step == pytest.approx((m + pp - 1) * t_mb, rel=0.01)


def test_compare_names_largest_differences():
    code, text, err = cli("compare", "--model", "llama3-70b", "--topology", "seed-h100", "--gpus", 64,
                          "--tp", 8, "--pp", 4, "--seq", 8192, "--gbs", 32)
    assert code == 0, err
    assert "largest differences:" in text
    assert "- bubble:" in text or "- tp:" in text or "- imbalance:" in text
