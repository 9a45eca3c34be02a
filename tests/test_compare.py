"""Analytic against simulated: the 1% agreement case, `simtrain analytic`, `compare`, `search`."""

from __future__ import annotations


import pytest

from helpers import assert_user_error, cli, cli_json
from simtrain import api, engine
from simtrain.topology.mesh import build_mesh
from simtrain.metrics import BREAKDOWN
from simtrain.network.analytic import AnalyticNetwork
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


SEED_BEST = [("4", "2", "2"), ("4", "2", "4"), ("4", "2", "8")]


@pytest.mark.parametrize("tp, cp, pp", SEED_BEST)
def test_compare_seed_best_configurations(tp, cp, pp, tmp_path):
    argv = ("--model", "llama3-70b", "--topology", "seed-h100", "--gpus", 64, "--tp", tp, "--cp", cp,
            "--pp", pp, "--seq", 8192, "--gbs", 512)
    out = cli_json("compare", *argv)
    a, s = out["analytic"], out["simulated"]
    for side in (a, s):
        assert 0.4 < side["mfu"] < 0.6
        assert set(side["breakdown_s"]) == set(BREAKDOWN)
        assert sum(side["breakdown_s"].values()) == pytest.approx(side["step_time_s"], rel=1e-9)
    assert s["mfu"] == pytest.approx(a["mfu"], abs=0.02)
    code, text, err = cli("compare", *argv)
    assert code == 0, err
    assert "analytic" in text and "simulated" in text and "MFU" in text


def test_compare_names_largest_differences():
    code, text, err = cli("compare", "--model", "llama3-70b", "--topology", "seed-h100", "--gpus", 64,
                          "--tp", 8, "--pp", 4, "--seq", 8192, "--gbs", 32)
    assert code == 0, err
    assert "largest differences:" in text
    assert "- bubble:" in text or "- tp:" in text or "- imbalance:" in text


def test_analytic_command_reproduces_the_notes():
    rep = cli_json("analytic", "--model", "llama3-70b", "--topology", "seed-h100", "--gpus", 64,
                   "--tp", 8, "--cp", 4, "--pp", 2, "--seq", 131072, "--gbs", 32)
    assert rep["recompute_layers"] == [24, 24]
    assert round(rep["mfu"] * 100, 1) == 44.4
    for key in ("step_time_s", "mfu", "hfu", "bubble_ratio", "breakdown_s", "exposed_comm_s",
                "peak_memory_gib", "fits_in_memory", "config"):
        assert key in rep


def test_search_lists_both_rankings(tmp_path):
    code, text, err = cli("search", "--model", "llama3-8b", "--topology", "seed-h100", "--gpus", 8,
                          "--seq", 8192, "--gbs", 64, "--top", 4, "--jobs", 1)
    assert code == 0, err
    assert "16 fit the closed-form ledger" in text
    assert "sim rank" in text and "analytic rank" in text and "Spearman" in text
    out = cli_json("search", "--model", "llama3-8b", "--topology", "seed-h100", "--gpus", 8,
                   "--seq", 8192, "--gbs", 64, "--top", 4)
    assert out["candidates_fit"] == 16 and out["candidates_simulated"] == 4
    assert sorted(r["analytic_rank"] for r in out["ranking"]) == [1, 2, 3, 4]
    assert sorted(r["simulated_rank"] for r in out["ranking"]) == [1, 2, 3, 4]
    assert -1 <= out["spearman"] <= 1


def test_search_resume_gives_the_same_ranking(tmp_path):
    results = tmp_path / "r.jsonl"
    argv = ("search", "--model", "llama3-8b", "--topology", "seed-h100", "--gpus", 8, "--seq", 8192,
            "--gbs", 64, "--top", 4, "--results", results)
    full = cli_json(*argv)
    lines = results.read_text().splitlines()
    assert len(lines) == 4
    results.write_text("\n".join(lines[:2]) + "\n" + lines[2][: len(lines[2]) // 2])  # killed mid-write
    resumed = cli_json(*argv, "--resume")
    assert [r["label"] for r in resumed["ranking"]] == [r["label"] for r in full["ranking"]]
    assert len(results.read_text().splitlines()) >= 4


def test_analysis_errors():
    assert_user_error("search", "--model", "llama3-405b", "--topology", "seed-h100", "--gpus", 8,
                      "--seq", 131072, "--gbs", 8, contains=("no configuration fits",))
    assert_user_error("search", "--model", "llama3-8b", "--topology", "seed-h100", "--gpus", 8,
                      "--seq", 8192, "--gbs", 64, "--resume", contains=("--resume needs --results",))
    assert_user_error("analytic", "--model", "llama3-70b", "--topology", "seed-h100", "--gpus", 64,
                      "--tp", 8, "--pp", 4, "--gbs", 32, "--schedule", "zb-auto",
                      contains=("closed-form model has bubble formulas",))
    assert_user_error("analytic", "--model", "llama3-70b", "--topology", "seed-h100", "--gpus", 8,
                      "--tp", 8, "--seq", 131072, "--gbs", 8, "--recompute", "none",
                      contains=("fits",))
    assert_user_error("search", "--model", "llama3-8b", "--topology", "seed-h100", "--gpus", 8,
                      "--seq", 8192, "--gbs", 64, "--schedules", "1f1b,zb-hx", contains=("zb-hx",))


def test_analytic_without_flags_estimates_the_default_scenario():
    from simtrain.settings import DEFAULT_SCENARIO

    rep = cli_json("analytic")
    assert {k: rep["config"][k] for k in ("model", "tp", "pp", "gbs")} == \
        {k: DEFAULT_SCENARIO[k] for k in ("model", "tp", "pp", "gbs")}
    assert rep["config"]["recompute"] == "auto" and rep["recompute_layers"] == [0] * 4
