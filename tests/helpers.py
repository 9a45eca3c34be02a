"""Shared helpers for tests: small specs, clusters and timelines, a CLI runner, simulations of a
tiny model or of a scenario, schedule makespans."""

from __future__ import annotations

import copy
import io
import json
import math
from contextlib import redirect_stderr, redirect_stdout

from hypothesis import strategies as st

from simtrain import api
from simtrain.engine import simulator as engine
from simtrain.cli.main import main
from simtrain.results.metrics import summarize
from simtrain.network.chains import run_chains
from simtrain.network.fixed import FixedLatency
from simtrain.network.solver import FlowModel
from simtrain.schedules import generate, replay, scaled_costs
from simtrain.schedules.interleaved import valid_groups
from simtrain.schedules.ir import Schedule
from simtrain.specs.gpu import get_gpu
from simtrain.specs.model import ModelSpec
from simtrain.engine.timeline import TimelineBuilder
from simtrain.topology.cluster import Cluster, build_topology
from simtrain.topology.mesh import build_mesh
from simtrain.units import MS
from simtrain.workload.lower import lower
from simtrain.workload.options import WorkloadOptions
from simtrain.workload.program import KINDS, STREAMS


def tiny_model(layers: int = 4, hidden: int = 1024, heads: int = 8, vocab: int = 32000) -> ModelSpec:
    return ModelSpec(name="tiny", hidden=hidden, layers=layers, heads=heads, kv_heads=heads,
                     ffn=4 * hidden, vocab=vocab, gated_mlp=False)


# ---- the command line ----------------------------------------------------------------------------

def cli(*argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def cli_json(*argv: str) -> dict:
    code, out, err = cli(*argv, "--json")
    assert code == 0, err
    return json.loads(out)


def assert_user_error(*argv: str, contains: str | tuple[str, ...] = ()) -> str:
    """The CLI fails with exit status 2 and exactly one line on stderr containing ``contains``."""
    code, out, err = cli(*argv)
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for text in (contains,) if isinstance(contains, str) else contains:
        assert text in lines[0], lines[0]
    return lines[0]


def drawn_xlims(monkeypatch) -> list:
    """The x limits of every Gantt figure drawn from now on (the list fills as they are drawn)."""
    from simtrain.outputs import gantt

    limits, figure = [], gantt.gantt_figure

    def capture(*args, **kwargs):
        fig = figure(*args, **kwargs)
        limits.append(fig.axes[0].get_xlim())
        return fig

    monkeypatch.setattr(gantt, "gantt_figure", capture)
    return limits


# ---- simulations ---------------------------------------------------------------------------------

# The seed's 70B scenario (course notes): 64 GPUs of the seed-h100 cluster, 8K tokens.
SEED_70B = dict(model="llama3-70b", topology="seed-h100", gpus=64, seq=8192, recompute="auto")


def simulate_settings(**settings):
    """Resolve and simulate a scenario given as settings."""
    return api.simulate(api.resolve(settings))


GPU = get_gpu("h100-sxm")
BARE = WorkloadOptions(embedding=False, lm_head=False, optimizer=False, dp_comm=False)  # layers only


def simulate(model, par, schedule_name="1f1b", opts=BARE, network=None, gpus_per_node=8):
    """Lower ``model`` under ``par`` and ``schedule_name`` on :data:`GPU`, run it on ``network`` (a
    fixed-latency one by default) and summarize: (program, run result, report)."""
    mesh = build_mesh(par.tp, par.cp, par.dp, par.pp, gpus_per_node=gpus_per_node)
    sched = generate(schedule_name, par.pp, par.num_microbatches)
    prog = lower(model, par, GPU, sched, mesh, opts)
    res = engine.run(prog, network or FixedLatency())
    rep = summarize(res.timeline, model=model, gpu=GPU, num_gpus=par.world, seq=par.seq, gbs=par.gbs,
                    rank_weight=prog.rank_weight, pipeline_rank_of=prog.pipeline_rank_of,
                    static_bytes=prog.static_bytes)
    return prog, res, rep


def two_node_cluster(gpus_per_node=1):
    data = {"gpu": "h100-sxm", "nodes": 2,
            "node": {"gpus": gpus_per_node, "nic_gbps": 400, "pcie_GBps": 64},
            "fabric": {"kind": "fat-tree", "nodes_per_leaf": 2, "spines": 1}}
    return build_topology(data, "two-node")


# ---- clusters ------------------------------------------------------------------------------------

NIC_BPS = 50e9  # 400 Gb/s
NVLINK_BPS = 450e9

# A DGX-H100-like node (8 GPUs, 8 x 400 Gb/s = 50 GB/s NICs) and leaves of 4 nodes, so a leaf has 32
# downlinks of 50 GB/s = 1.6 TB/s: hand-checkable expectations.
TOPOLOGY = {
    "name": "t",
    "gpu": "h100-sxm",
    "nodes": 8,
    "node": {"gpus": 8, "nvlink_GBps": 450, "nic_gbps": 400, "pcie_GBps": 64},
    "fabric": {"kind": "fat-tree", "tiers": 2, "nodes_per_leaf": 4, "spines": 4,
               "oversubscription": 1.0},
}


def make_cluster(nodes: int | None = None, **fabric) -> Cluster:
    """:data:`TOPOLOGY` with ``fabric`` keys overridden."""
    data = copy.deepcopy(TOPOLOGY)
    data["fabric"].update(fabric)
    return build_topology(data, "test.toml", nodes=nodes)


def node_kinds(cluster: Cluster, path) -> list[str]:
    return [cluster.graph.nodes[n]["kind"] for n in path]


GB = 1e9


def nvlink_node(bw_GBps: float = 100, latency_us: float = 1.0, gpus: int = 8):
    """One node of ``gpus`` GPUs on an NVSwitch, nothing else."""
    return build_topology({"gpu": "h100-sxm", "nodes": 1,
                           "node": {"gpus": gpus, "nvlink_GBps": bw_GBps,
                                    "nvlink_latency_us": latency_us}}, "node")


def fat_tree(oversubscription: float, nodes_per_leaf: int = 1, spines: int = 2):
    """8 nodes x 8 H100, one 50 GB/s NIC per GPU; one node per leaf so every ring hop between
    nodes crosses a spine."""
    return build_topology({
        "gpu": "h100-sxm", "nodes": 8,
        "node": {"gpus": 8, "nvlink_GBps": 450, "nics": 8, "nic_gbps": 400, "pcie_GBps": 64},
        "fabric": {"kind": "fat-tree", "tiers": 2, "nodes_per_leaf": nodes_per_leaf,
                   "spines": spines, "oversubscription": oversubscription}}, "ft")


def flow_time(cluster, groups_phases, check=True):
    """The end of the last of ``groups_phases`` (chains started at 0) in one flow model, and the model."""
    model = FlowModel(cluster)
    return max(run_chains(cluster, [(0.0, p) for p in groups_phases], model, check)), model


# ---- timelines -----------------------------------------------------------------------------------

def add_span(b: TimelineBuilder, rank, stream, kind, name, start, end, *, stage=0, layer=-1, mb=-1,
             arrow=-1, flops=0.0, nbytes=0.0):
    b.add(rank, STREAMS.index(stream), KINDS.index(kind), b.name_id(name), stage, layer, mb,
          start, end, flops=flops, nbytes=nbytes, arrow=arrow)


def awkward_timeline():
    """Spans whose JSON is easy to get wrong by hand: non-ASCII and quoted names, -0.0 and huge or
    tiny floats, no micro-batch, two steps (a step mark), a flow."""
    b = TimelineBuilder()
    add_span(b, 0, "compute", "F", 'attn "q" \u00e9\u4e2d', 0.0, 1e-7, mb=3, layer=2, flops=-0.0, nbytes=1e22)
    add_span(b, 0, "compute", "opt", "optimizer", 1e-7, 2.5e-7, flops=1.5e-300)
    add_span(b, 0, "pp_send", "pp", "send", 2.5e-7, 3e-7, mb=0, arrow=4, nbytes=123456789012345678.0)
    add_span(b, 1, "pp_recv", "pp", "recv", 2.5e-7, 3e-7, mb=0, arrow=4)
    add_span(b, 0, "compute", "opt", "optimizer", 3e-7, 1.0 / 3.0)
    add_span(b, 1, "compute", "opt", "optimizer", 3e-7, 0.5)
    add_span(b, 1, "compute", "opt", "optimizer", 0.6, 0.7)
    return b.build()


def two_rank_timeline():
    """Two pipeline stages: F/B/I/W on compute, a TP collective, and two flows (F out, B back)."""
    b = TimelineBuilder()
    ms = MS
    for mb in range(2):
        add_span(b, 0, "compute", "F", "attn.F", mb * 2 * ms, (mb * 2 + 1.5) * ms, mb=mb, layer=0,
                 flops=1e12)
        add_span(b, 0, "tp", "tp", "attn.allreduce", (mb * 2 + 1.5) * ms, (mb * 2 + 1.8) * ms, mb=mb,
                 nbytes=4e6)
        add_span(b, 0, "pp_send", "pp", "send.act", (mb * 2 + 1.8) * ms, (mb * 2 + 2.2) * ms, mb=mb,
                 arrow=mb, nbytes=8e6)
        add_span(b, 1, "pp_recv", "pp", "recv.act", (mb * 2 + 1.8) * ms, (mb * 2 + 2.2) * ms, mb=mb,
                 stage=1, arrow=mb, nbytes=8e6)
        add_span(b, 1, "compute", "F", "attn.F", (mb * 2 + 2.2) * ms, (mb * 2 + 3.7) * ms, mb=mb,
                 stage=1, layer=1)
    add_span(b, 1, "compute", "I", "attn.I", 6.0 * ms, 8.0 * ms, mb=0, stage=1, layer=1)
    add_span(b, 1, "pp_send", "pp", "send.grad", 8.0 * ms, 8.4 * ms, mb=0, stage=1, arrow=7)
    add_span(b, 0, "pp_recv", "pp", "recv.grad", 8.0 * ms, 8.4 * ms, mb=0, arrow=7)
    add_span(b, 1, "compute", "W", "attn.W", 8.0 * ms, 9.5 * ms, mb=0, stage=1, layer=1)
    add_span(b, 0, "compute", "B", "attn.B", 8.4 * ms, 11.0 * ms, mb=0, layer=0)
    return b.build()


# ---- schedules -----------------------------------------------------------------------------------

BUILTIN_SCHEDULES = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-v", "dualpipe", "dualpipev",
                     "zb-auto"]
UNIT_COSTS = (1.0, 1.0, 1.0)


def makespan(sched: Schedule, F=1.0, I=1.0, W=1.0, comm=0.0) -> float:  # noqa: E741,N803
    """Makespan with F, I, W per plain stage (chunk costs scaled: 1/v interleaved, 1/2 V-shape)."""
    return replay(sched, scaled_costs(sched, F, I, W), comm).makespan


@st.composite
def built_in(draw, name: str):
    """(schedule, pp, m, vpp) for ``name`` over its supported range: p in 1..16, m up to 64."""
    if name == "dualpipe":
        p = draw(st.sampled_from(range(2, 17, 2)))
        m = draw(st.sampled_from(range(2 * p, 65, 2)))
        return generate(name, p, m), p, m, 1
    p = draw(st.integers(1, 16))
    if name == "dualpipev":
        m = draw(st.integers(2 * p, 64))
        return generate(name, p, m), p, m, 1
    if name == "interleaved-1f1b":
        v = draw(st.integers(2, 4))
        m = draw(st.integers(p, 64))
        g = draw(st.sampled_from(valid_groups(p, m)))
        return generate(name, p, m, vpp=v, group=g), p, m, v
    m = draw(st.integers(1, 64))
    return generate(name, p, m), p, m, 1


# The notes' script uses the published parameter counts N = 70.6e9 and 8.03e9. Our ModelSpec
# counts 70,553,706,496 for Llama 3 70B (8,030,261,248 for 8B): with it two printed MFUs of the
# first search move by 0.1 point (53.7 -> 53.6, 52.2 -> 52.1; the raw values are 53.652% vs
# 53.649% and 52.153% vs 52.149%), everything else still reproduces. The oracle tests therefore
# pass the script's N through ``n_params``; test_modelspec_n checks the rest with our own count.
N_70B, N_8B = 70.6e9, 8.03e9


def assert_close(a, b, path: str, skip=frozenset(), ran_only=frozenset()) -> None:
    """Two reports (nested dicts, lists, numbers) equal within 1e-9 relative, except the keys in
    ``skip`` and the dotted paths ending in one of ``ran_only``."""
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            if k not in skip and not any(f"{path}.{k}".endswith(x) for x in ran_only):
                assert_close(a[k], b[k], f"{path}.{k}", skip, ran_only)
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, f"{path}[{i}]", skip, ran_only)
    elif isinstance(a, float) and not isinstance(b, str):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), f"{path}: {a} != {b}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def path_pools(paths: list) -> tuple:
    """The pools of links :class:`~simtrain.network.maxmin.MaxMinMemo` reads for ``paths`` (path
    ``p`` is the array ``paths[p]``), as :class:`~simtrain.network.flowtable.PathTable` keeps them:
    every path's links end to end, and where each one's start (one more than the paths)."""
    import numpy as np

    pao = np.zeros(len(paths) + 1, dtype=np.int64)
    np.cumsum([p.size for p in paths], out=pao[1:])
    pa = np.concatenate(paths).astype(np.int64) if paths else np.zeros(0, dtype=np.int64)
    return pa, pao
