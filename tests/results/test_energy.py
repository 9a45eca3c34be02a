"""Energy, cost and time to train: a hand-computed two-rank timeline, the ratios that follow from
it, folded and unfolded runs, the cluster's fixed power, overrides and bad values."""

from __future__ import annotations

import math

import pytest

from helpers import GPU, assert_user_error, cli_json, make_cluster, tiny_model, two_rank_timeline
from simtrain import api
from simtrain.results.energy import ENERGY_KEYS, PowerDraw, RankSeconds, energy_metrics, power_draw
from simtrain.errors import SpecError
from simtrain.results.metrics import run_report
from simtrain.specs.parallel import ParallelSpec
from simtrain.topology.cluster import build_topology
from simtrain.workload.program import Program

MS = 1e-3
#: Round powers, so the hand sums below are exact: busy, communication only, idle, the rest.
DRAW = PowerDraw(gpu_busy_w=700.0, gpu_comm_w=300.0, gpu_idle_w=100.0, rest_w=1000.0, pue=1.5, num_gpus=2)


def _two_rank_report(draw: PowerDraw):
    """The report of :func:`helpers.two_rank_timeline`, two pipeline ranks of weight 1."""
    program = Program(rank_weight={0: 1, 1: 1}, pipeline_rank_of={0: 0, 1: 1}, static_bytes={0: 0.0, 1: 0.0},
                      layers_per_chunk=[1, 1])
    par = ParallelSpec(pp=2, gbs=2, seq=1024)
    return run_report(two_rank_timeline(), program, model=tiny_model(), gpu=GPU, par=par, num_events=0,
                      links={}, config={}, power=draw)


@pytest.mark.quick
def test_energy_of_a_two_rank_timeline_is_the_formula():
    # rank 0 computes F 0-1.5 and 2-3.5 ms and B 8.4-11 ms: 5.6 ms; only communicates 1.5-2.0
    # (its send 1.8-2.2 runs under the second F from 2.0), 3.5-4.2 and 8.0-8.4 ms: 1.6 ms; idles
    # the rest of the 11 ms step: 3.8 ms.
    # rank 1 computes F 2.2-3.7 and 4.2-5.7, I 6-8, W 8-9.5 ms: 6.5 ms; receives 1.8-2.2 and
    # 3.8-4.2 ms: 0.8 ms (its send 8.0-8.4 ms runs under W); idles 3.7 ms.
    rank0 = 5.6 * MS * 700 + 1.6 * MS * 300 + 3.8 * MS * 100  # 4.78 J
    rank1 = 6.5 * MS * 700 + 0.8 * MS * 300 + 3.7 * MS * 100  # 5.16 J
    rep = _two_rank_report(DRAW)
    assert rep["step_time_s"] == pytest.approx(11 * MS)
    assert rep["gpu_energy_per_step_j"] == pytest.approx(rank0 + rank1) == pytest.approx(9.94)
    assert rep["energy_per_step_j"] == pytest.approx(1.5 * (9.94 + 1000 * 11 * MS)) == pytest.approx(31.41)
    assert rep["mean_power_w"] == pytest.approx(31.41 / (11 * MS))
    assert rep["tokens_per_kwh"] == pytest.approx(2048 / (31.41 / 3.6e6))


@pytest.mark.quick
def test_tokens_per_kwh_and_per_usd_follow():
    draw = PowerDraw(700.0, 300.0, 100.0, rest_w=0.0, num_gpus=4, gpu_hour_usd=2.0, electricity_usd_per_kwh=0.1,
                     train_tokens=10_001)
    ranks = [RankSeconds(busy_s=0.5, comm_s=0.25, idle_s=0.25, weight=4)]
    out = energy_metrics(ranks, step_s=1.0, tokens=1000, draw=draw)
    energy_j = 4 * (0.5 * 700 + 0.25 * 300 + 0.25 * 100)  # 1800 J = 0.0005 kWh
    assert out["energy_per_step_j"] == pytest.approx(energy_j)
    assert out["tokens_per_kwh"] == pytest.approx(1000 / 0.0005)
    cost = 4 * (1.0 / 3600) * 2.0 + 0.0005 * 0.1
    assert out["cost_per_step_usd"] == pytest.approx(cost)
    assert out["tokens_per_usd"] == pytest.approx(1000 / cost)
    assert out["train_steps"] == 11  # ceil(10,001 / 1,000)
    assert out["time_to_train_s"] == pytest.approx(11.0)
    assert out["energy_to_train_kwh"] == pytest.approx(11 * 0.0005)
    assert out["cost_to_train_usd"] == pytest.approx(11 * cost)


@pytest.mark.quick
def test_keys_without_their_inputs_are_none():
    out = energy_metrics([RankSeconds(1.0, 0.0, 0.0)], step_s=1.0, tokens=10,
                         draw=PowerDraw(None, None, None, 500.0, num_gpus=1))
    assert set(out) == set(ENERGY_KEYS) and all(v is None for v in out.values())


@pytest.mark.quick
def test_power_draw_counts_hosts_nics_switches_and_unused_gpus():
    cluster = make_cluster(nodes=8)  # 8 nodes of 8 GPUs and 8 NICs, 2 leaves of 4 nodes, 4 spines
    draw = power_draw(cluster, GPU, 60)
    assert draw.rest_w == pytest.approx(8 * 550 * 8 + 64 * 25 + 6 * 747 + 4 * 140)
    assert draw.gpu_busy_w == 700 and draw.gpu_idle_w == 140
    assert draw.gpu_comm_w == pytest.approx(140 + 560 * 20 / 132)
    assert draw.gpu_hour_usd is None and draw.pue == 1.0


SMALL = dict(model="llama3-8b", topology="h100-ib", gpus=16, tp=2, pp=2, seq=2048, gbs=16)


def test_a_folded_and_an_unfolded_run_give_the_same_energy():
    folded = api.simulate(api.resolve({**SMALL, "price_per_gpu_hour_usd": 2.0})).report
    full = api.simulate(api.resolve({**SMALL, "price_per_gpu_hour_usd": 2.0, "fold": False})).report
    assert folded["simulated_ranks"] < full["simulated_ranks"]
    for key in ("energy_per_step_j", "gpu_energy_per_step_j", "cost_per_step_usd"):
        assert folded[key] == pytest.approx(full[key], rel=1e-9)


def _topology(**tables):
    data = {"gpu": "h100-sxm", "nodes": 2, "node": {"gpus": 8, "nic_gbps": 400},
            "fabric": {"kind": "fat-tree", "nodes_per_leaf": 2, "spines": 2}, **tables}
    return build_topology(data, "c.toml")


@pytest.mark.quick
def test_the_topology_file_and_the_flag_set_power_and_price(tmp_path):
    cluster = _topology(power={"host_w": 1000, "nic_w": 10, "switch_w": 100, "pue": 1.2},
                        cost={"purchase_usd": 350_640, "depreciation_years": 5, "electricity_usd_per_kwh": 0.1})
    draw = power_draw(cluster, GPU, 16, train_tokens=7)
    assert draw.rest_w == pytest.approx(2 * 1000 + 16 * 10 + 3 * 100)  # one leaf, two spines
    assert draw.pue == 1.2 and draw.electricity_usd_per_kwh == 0.1 and draw.train_tokens == 7
    assert draw.gpu_hour_usd == pytest.approx(350_640 / (8 * 5 * 8766))  # 1.0
    assert power_draw(cluster, GPU, 16, price_per_gpu_hour_usd=3.0).gpu_hour_usd == 3.0  # the flag wins

    path = tmp_path / "priced.toml"
    path.write_text('gpu = "h100-sxm"\nnodes = 2\n[node]\ngpus = 8\nnic_gbps = 400\n'
                    '[fabric]\nkind = "fat-tree"\nnodes_per_leaf = 2\nspines = 2\n'
                    '[cost]\nprice_per_gpu_hour_usd = 2.5\n')
    args = ["run", "--model", "llama3-8b", "--topology", path, "--gpus", 16, "--tp", 2, "--pp", 2, "--seq", 2048,
            "--gbs", 16, "--no-plot", "--out", tmp_path / "out"]
    table = cli_json(*args)
    flag = cli_json(*args, "--price-per-gpu-hour", 5, "--train-tokens", 10**9)
    assert table["cost_per_step_usd"] == pytest.approx(16 * table["step_time_s"] / 3600 * 2.5)
    assert flag["cost_per_step_usd"] == pytest.approx(2 * table["cost_per_step_usd"])
    assert flag["train_steps"] == math.ceil(10**9 / (16 * 2048))
    assert flag["cost_to_train_usd"] == pytest.approx(flag["train_steps"] * flag["cost_per_step_usd"])


@pytest.mark.quick
@pytest.mark.parametrize("tables, words", [
    ({"power": {"nic_w": -1}}, "[power]: nic_w = -1.0: must be >= 0.0"),
    ({"power": {"pue": 0.9}}, "[power]: pue = 0.9: must be >= 1.0"),
    ({"power": {"host_watts": 1}}, "[power]: unknown key 'host_watts'; did you mean 'host_w'?"),
    ({"cost": {"price_per_gpu_hour_usd": 0}}, "[cost]: price_per_gpu_hour_usd = 0.0: must be > 0"),
    ({"cost": {"price_per_gpu_hour_usd": float("nan")}}, "price_per_gpu_hour_usd = nan: not a number"),
    ({"cost": {"purchase_usd": 1e5}}, "[cost]: purchase_usd = 100000.0 needs depreciation_years as well"),
    ({"gpu": {"base": "h100-sxm", "tdp_w": -5}}, "tdp_w = -5.0: must be > 0"),
    ({"gpu": {"base": "h100-sxm", "idle_w": 900}}, "idle_w = 900.0: must be in [0, tdp_w = 700.0]"),
])
def test_bad_power_and_price_are_one_line_errors(tables, words):
    with pytest.raises(SpecError) as err:
        _topology(**tables)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.quick
@pytest.mark.parametrize("value", ["0", "nan", "-2"])
def test_a_bad_price_flag_is_a_one_line_error(value):
    assert_user_error("run", "--price-per-gpu-hour", value, contains="must be a finite number > 0")
    words = "not a number" if value == "nan" else "must be a finite number > 0"
    with pytest.raises(SpecError, match=f"price_per_gpu_hour_usd = .*{words}"):
        api.resolve({"price_per_gpu_hour_usd": float(value)})


@pytest.mark.quick
def test_a_gpu_of_unknown_power_gives_no_energy_but_its_cost():
    cluster = _topology(gpu={"base": "h100-sxm", "name": "x"})
    assert cluster.gpu.tdp_w == 700  # the base's power
    custom = _topology(gpu={"name": "x", "peak_bf16_tflops": 100, "hbm_gib": 80, "hbm_bandwidth_GBps": 2000,
                            "nvlink_GBps": 450})
    draw = power_draw(custom, custom.gpu, 16, price_per_gpu_hour_usd=1.0)
    out = energy_metrics([RankSeconds(1.0, 0.0, 0.0, weight=16)], step_s=1.0, tokens=100, draw=draw)
    assert out["energy_per_step_j"] is None and out["cost_per_step_usd"] == pytest.approx(16 / 3600)
    tdp_only = _topology(gpu={"base": "h100-sxm", "tdp_w": 500})
    assert tdp_only.gpu.idle_power_w == pytest.approx(100.0)  # IDLE_FRACTION of the new board power


@pytest.mark.quick
def test_docstring_examples():
    import doctest

    import simtrain.results.energy

    assert doctest.testmod(simtrain.results.energy).failed == 0
