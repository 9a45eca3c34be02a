"""The engine: hand-computed steps, closed-form bubbles, collectives that wait for every member,
deadlocks, the event budget, the network known only by its protocol."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from helpers import BARE, GPU, simulate, tiny_model, two_node_cluster
from simtrain import costs, engine
from simtrain.costs import KernelTimer, Shape
from simtrain.errors import SimulationError
from simtrain.network.analytic import AnalyticNetwork
from simtrain.network.fixed import FixedLatency
from simtrain.network.protocol import Step
from simtrain.schedules import generate
from simtrain.specs.parallel import ParallelSpec
from simtrain.topology.cluster import build_topology
from simtrain.topology.mesh import build_mesh
from simtrain.topology.routes import Router
from simtrain.workload.lower import lower
from simtrain.workload.options import WorkloadOptions
from simtrain.workload.program import KIND, STREAM, Op, Program


def layer_times(model, par):
    """Hand composition: forward and full backward time of one layer on one rank."""
    sh = Shape.of(par)
    t = KernelTimer(GPU).time
    f = t(costs.attention_cost(model, sh, "F")) + t(costs.mlp_cost(model, sh, "F"))
    b = t(costs.attention_cost(model, sh, "B")) + t(costs.mlp_cost(model, sh, "B"))
    return f, b


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_two_stages_two_microbatches(schedule):
    model = tiny_model(layers=2)
    par = ParallelSpec(pp=2, gbs=2, seq=1024)
    _, res, rep = simulate(model, par, schedule)
    f, b = layer_times(model, par)  # one layer per stage
    # F0 F1 on stage 0, stage 1 starts F0 at f; backwards chain back: 3f + 3b in total
    assert rep["step_time_s"] == pytest.approx(3 * f + 3 * b, rel=1e-9)
    assert rep["bubble_ratio"] == pytest.approx(1 / 3, rel=1e-9)
    tl = res.timeline
    stage1_first = min(s.start_s for s in tl.spans(tl.mask(rank=1, stream="compute")))
    assert stage1_first == pytest.approx(f, rel=1e-9)


def test_pure_dp_allreduce_fully_exposed():
    model = tiny_model(layers=2)
    cluster = two_node_cluster()
    router = Router(cluster)
    net = AnalyticNetwork(cluster, router)
    par = ParallelSpec(dp=2, gbs=2, seq=1024, zero=0)
    opts = WorkloadOptions(embedding=False, lm_head=False, optimizer=False,
                           dp_bucket_params=10**12)  # one bucket: launched after the last W
    prog, res, rep = simulate(model, par, opts=opts, network=net, gpus_per_node=1)
    tl = res.timeline
    busy = sum(s.duration_s for s in tl.spans(tl.mask(rank=0, stream="compute")))
    nbytes = 2 * 4 * model.layer_params(0)  # fp32 gradients of both layers
    expected = net.collective_time("all_reduce", (0, 1), nbytes)  # the network's price, all exposed
    assert rep["step_time_s"] - busy == pytest.approx(expected, rel=1e-9)
    assert rep["exposed_comm_s"]["dp"] == pytest.approx(expected, rel=1e-9)
    assert rep["breakdown_s"]["dp"] == pytest.approx(expected, rel=1e-9)


def test_pure_tp_one_node():
    model = tiny_model(layers=2)
    data = {"gpu": "h100-sxm", "nodes": 1, "node": {"gpus": 8, "nvlink_GBps": 450}}
    cluster = build_topology(data, "one-node")
    router = Router(cluster)
    net = AnalyticNetwork(cluster, router)
    par = ParallelSpec(tp=8, gbs=1, seq=1024)
    _, res, rep = simulate(model, par, opts=BARE, network=net)
    f, b = layer_times(model, par)
    nbytes = 2 * 1024 * 1024  # tokens x hidden, bf16
    one = net.collective_time("all_gather", tuple(range(8)), nbytes)  # the network's price
    assert net.collective_time("reduce_scatter", tuple(range(8)), nbytes) == one
    expected = 2 * (f + b) + 2 * 8 * one  # 4 collectives per layer forward, 4 backward
    assert rep["step_time_s"] == pytest.approx(expected, rel=1e-9)
    assert rep["breakdown_s"]["tp"] == pytest.approx(16 * one, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 8), m=st.integers(1, 32), schedule=st.sampled_from(["gpipe", "1f1b"]))
def test_bubble_closed_form(p, m, schedule):
    model = tiny_model(layers=p, hidden=256, heads=4, vocab=1000)
    par = ParallelSpec(pp=p, gbs=m, seq=256)
    _, _, rep = simulate(model, par, schedule)
    assert rep["bubble_ratio"] == pytest.approx((p - 1) / (m + p - 1), rel=1e-9, abs=1e-12)


def _op(prog, rank, stream, name, deps=(), duration=1.0, **kw):
    return prog.add(Op(0, rank, STREAM[stream], KIND["F"], name, 0, -1, -1, duration_s=duration,
                       deps=list(deps), **kw))


class PricedTwoSeconds(FixedLatency):
    """Prices every collective at 2 s up front."""

    def collective_time(self, op, gpus, nbytes):
        return 2.0


class TokenAfter:
    """Prices nothing up front: every transfer is one token that finishes ``delay_s`` after it
    starts, reported through ``next_event_s`` and ``advance`` as the flow network does."""

    def __init__(self, delay_s):
        self.delay_s = delay_s

    def prepare(self, program, clock):
        self.clock, self.due, self.started = clock, [], 0

    def fixed_duration(self, op):
        return None

    def transfer(self, op):
        self.started += 1
        self.due.append((self.clock() + self.delay_s, self.started))
        yield Step(token=self.started)

    def next_event_s(self):
        return min(self.due)[0] if self.due else None

    def advance(self, now_s):
        done = sorted(d for d in self.due if d[0] <= now_s)
        self.due = [d for d in self.due if d[0] > now_s]
        return [token for _, token in done]

    def check(self):
        assert not self.due and self.started == 2

    def link_report(self, step_s):
        return {}, {}


@pytest.mark.parametrize("network, send", [(PricedTwoSeconds(), (1.0, 1.0)), (TokenAfter(2.0), (1.0, 3.0))],
                         ids=["priced", "tokens"])
def test_engine_collective_waits_for_all_members(network, send):
    """The last member starts the collective; a p2p send needs no partner (priced: free)."""
    prog = Program()
    prog.rank_weight = {0: 1, 1: 1, 2: 1}
    a = _op(prog, 0, "compute", "a", duration=1.0)
    b = _op(prog, 1, "compute", "b", duration=3.0)
    prog.group_sets = [((0, 1),), ((0, 2),)]
    for rank, dep in ((0, a.id), (1, b.id)):
        prog.add(Op(0, rank, STREAM["tp"], KIND["tp"], "ar", 0, -1, -1, nbytes=1.0, comm="all_reduce",
                    group_set=0, key=("k",), deps=[dep]))
    prog.add(Op(0, 0, STREAM["pp_send"], KIND["pp"], "send", 0, -1, 0, nbytes=1.0, comm="p2p", group_set=1,
                peer=2, deps=[a.id]))
    tl = engine.run(prog, network).timeline
    ar = tl.spans(tl.mask(stream="tp"))
    assert [(s.start_s, s.end_s) for s in ar] == [(3.0, 5.0), (3.0, 5.0)]
    assert [(s.start_s, s.end_s) for s in tl.spans(tl.mask(stream="pp_send"))] == [send]


def test_engine_deadlock_reports_blocked_ops():
    prog = Program()
    prog.rank_weight = {0: 1, 1: 1}
    a = _op(prog, 0, "compute", "a", deps=[1])
    _op(prog, 1, "compute", "b", deps=[a.id])
    with pytest.raises(SimulationError, match="deadlock.*rank 0 compute: a.*rank 1 compute: b"):
        engine.run(prog, FixedLatency())


def test_engine_event_budget():
    model = tiny_model(layers=2)
    par = ParallelSpec(pp=2, gbs=8, seq=256)
    mesh = build_mesh(1, 1, 1, 2)
    prog = lower(model, par, GPU, generate("1f1b", 2, 8), mesh, BARE)
    with pytest.raises(SimulationError, match="max_events=10"):
        engine.run(prog, FixedLatency(), max_events=10)


def test_engine_knows_the_network_only_by_its_protocol():
    """The engine imports nothing of the network package but the protocol, so it cannot ask
    which network it drives."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(engine.__file__).read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert {m for m in imported if m.startswith("simtrain.network")} == {"simtrain.network.protocol"}
