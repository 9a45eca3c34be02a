"""No hangs, reproducibility across processes, properties of small random configurations, and a
search that survives being killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers import tiny_model
from simtrain.engine import simulator as engine
from simtrain.errors import SimulationError
from simtrain.topology.mesh import build_mesh
from simtrain.results.metrics import summarize
from simtrain.network.analytic import AnalyticNetwork
from simtrain.network.fixed import FixedLatency
from simtrain.workload.program import KIND, STREAM, Op, Program
from simtrain.schedules import generate
from simtrain.specs.gpu import get_gpu
from simtrain.specs.parallel import ParallelSpec
from simtrain.topology.cluster import build_topology
from simtrain.topology.routing.router import Router
from simtrain.workload.lower import lower
from simtrain.workload.options import WorkloadOptions


@pytest.mark.quick
def test_a_collective_a_member_never_reaches_is_a_deadlock():
    prog = Program()
    prog.rank_weight = {0: 1, 1: 1}
    gid = prog.group_set_id(((0, 1),))
    blocker = prog.add(Op(0, 1, STREAM["compute"], KIND["F"], "waits-forever", 0, -1, 0, duration_s=1.0))
    for rank in (0, 1):
        prog.add(Op(0, rank, STREAM["tp"], KIND["tp"], "tp.all_reduce", 0, -1, 0, nbytes=1.0,
                    comm="all_reduce", group_set=gid, key=("k",), deps=[blocker.id] if rank == 1 else []))
    blocker.deps.append(len(prog.ops) - 1)  # rank 1's compute waits for its own collective: a cycle
    with pytest.raises(SimulationError) as info:
        engine.run(prog, FixedLatency())
    msg = str(info.value)
    assert "rank 0 tp: tp.all_reduce" in msg and "other members" in msg
    assert "rank 1 compute: waits-forever" in msg


def _run_cli(args, env_extra, cwd):
    env = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, "-m", "simtrain", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=240)


def test_byte_identical_outputs_across_processes_and_hash_seeds(tmp_path):
    outs = []
    for seed in ("0", "12345"):
        out = tmp_path / f"o{seed}"
        r = _run_cli(["run", "--model", "mixtral-8x7b", "--topology", "h100-ib", "--gpus", "32", "--tp", "1", "--pp", "2",
                      "--ep", "8", "--seq", "2048", "--gbs", "64", "--routing-skew", "0.8", "--routing-seed", "7",
                      "--network", "flow", "--no-plot", "--out", str(out)], {"PYTHONHASHSEED": seed}, tmp_path)
        assert r.returncode == 0, r.stderr
        outs.append(out)
    for name in ("report.json", "trace.json"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes()


GPU = get_gpu("h100-sxm")


def _small(p, m, tp, dp, nic_gbps=400, nvlink=450, efficiency=0.6):
    model = tiny_model(layers=4, hidden=512, heads=8, vocab=4000)
    cluster = build_topology({"gpu": "h100-sxm", "nodes": 2,
                              "node": {"gpus": 8, "nvlink_GBps": nvlink, "nic_gbps": nic_gbps},
                              "fabric": {"kind": "fat-tree", "nodes_per_leaf": 2, "spines": 2}}, "prop")
    par = ParallelSpec(tp=tp, pp=p, dp=dp, gbs=m * dp, seq=512)
    gpu = GPU.with_efficiency(efficiency)
    prog = lower(model, par, gpu, generate("1f1b", p, m), build_mesh(tp, 1, dp, p), WorkloadOptions())
    res = engine.run(prog, AnalyticNetwork(cluster, Router(cluster)))
    rep = summarize(res.timeline, model=model, gpu=gpu, num_gpus=par.world, seq=par.seq, gbs=par.gbs,
                    rank_weight=prog.rank_weight, pipeline_rank_of=prog.pipeline_rank_of, static_bytes=prog.static_bytes)
    return prog, res, rep


layouts = st.sampled_from([(1, 1, 16), (2, 2, 4), (4, 2, 2), (2, 1, 8), (4, 4, 1), (1, 8, 2)])
PROP = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROP
@given(layout=layouts, m=st.integers(1, 6), faster=st.sampled_from([2.0, 4.0]))
def test_more_bandwidth_or_flops_is_never_slower(layout, m, faster):
    p, tp, dp = layout
    m = max(m, p)
    base = _small(p, m, tp, dp)[2]["step_time_s"]
    more_bw = _small(p, m, tp, dp, nic_gbps=400 * faster, nvlink=450 * faster)[2]["step_time_s"]
    more_flops = _small(p, m, tp, dp, efficiency=min(1.0, 0.6 * faster))[2]["step_time_s"]
    assert more_bw <= base * (1 + 1e-12)
    assert more_flops <= base * (1 + 1e-12)


@pytest.mark.quick
@PROP
@given(layout=layouts, m=st.integers(1, 6))
def test_step_bounds_breakdown_and_memory(layout, m):
    p, tp, dp = layout
    m = max(m, p)
    prog, res, rep = _small(p, m, tp, dp)
    tl, step = res.timeline, rep["step_time_s"]
    dur = tl["end_s"] - tl["start_s"]
    compute = tl["stream"] == STREAM["compute"]
    busiest = max(float(dur[compute & (tl["rank"] == r)].sum()) for r in prog.ranks)
    assert step >= busiest * (1 - 1e-12)
    assert step <= float(dur.sum()) * (1 + 1e-12)  # at most the serial sum of all work
    assert sum(rep["breakdown_s"].values()) == pytest.approx(step, rel=1e-9)
    for stage, peak in enumerate(rep["peak_memory_gib"]):
        rank = next(r for r in prog.ranks if prog.pipeline_rank_of[r] == stage)
        assert peak * 2**30 >= prog.static_bytes[rank] * (1 - 1e-12)


def test_killed_search_resumes_to_the_same_ranking(tmp_path):
    args = ["search", "--model", "llama3-8b", "--topology", "seed-h100", "--gpus", "8", "--seq", "8192",
            "--gbs", "64", "--top", "12", "--json"]
    full = _run_cli(args, {}, tmp_path)
    assert full.returncode == 0, full.stderr
    results = tmp_path / "r.jsonl"
    env = {**os.environ}
    proc = subprocess.Popen([sys.executable, "-m", "simtrain", *args, "--results", str(results)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    deadline = time.time() + 120
    while time.time() < deadline and (not results.exists() or not results.read_text().strip()):
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    finished_before = len(results.read_text().splitlines())
    assert 1 <= finished_before < 12  # killed midway
    resumed = _run_cli(args + ["--results", str(results), "--resume"], {}, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    a, b = json.loads(full.stdout), json.loads(resumed.stdout)
    assert [r["label"] for r in a["ranking"]] == [r["label"] for r in b["ranking"]]
    assert [r["simulated_step_time_s"] for r in a["ranking"]] == [r["simulated_step_time_s"] for r in b["ranking"]]
