"""The flow network inside the engine: agreement with analytic when uncontended, contention between PP
sends and DP reductions on a shared NIC, oversubscription, the private-links shortcut, link
utilisation of every rank a folded run stands for."""

from __future__ import annotations

import json

import pytest

from helpers import cli_json
from simtrain.engine import simulator as engine
from simtrain.network.analytic import AnalyticNetwork
from simtrain.network.flow import FlowNetwork
from simtrain.topology.cluster import build_topology
from simtrain.topology.routing.router import Router
from simtrain.workload.program import KIND, STREAM, Op, Program


def cluster(nodes=2, gpus=8, nodes_per_leaf=2, oversubscription=1.0):
    return build_topology({"gpu": "h100-sxm", "nodes": nodes,
                           "node": {"gpus": gpus, "nic_gbps": 400, "pcie_GBps": 64},
                           "fabric": {"kind": "fat-tree", "nodes_per_leaf": nodes_per_leaf, "spines": 2,
                                      "oversubscription": oversubscription}}, "test")


def one_op_program(comm, groups, nbytes, peer=-1):
    prog = Program()
    prog.rank_weight = {0: 1} if comm != "p2p" else {0: 1, peer: 1}
    gid = prog.group_set_id(groups)
    prog.add(Op(0, 0, STREAM["dp" if comm != "p2p" else "pp_send"], KIND["dp" if comm != "p2p" else "pp"],
                comm, 0, -1, -1, nbytes=nbytes, comm=comm, group_set=gid, key=None if comm == "p2p" else ("k",),
                peer=peer))
    return prog


@pytest.mark.quick
@pytest.mark.parametrize("comm, groups", [
    ("all_reduce", (tuple(range(8)),)),  # one node: NVLink ring
    ("all_reduce", ((0, 8),)),  # across two nodes
    ("all_gather", (tuple(range(8)),)),
    ("p2p", ((0, 8),)),
])
def test_fidelities_agree_without_contention(comm, groups):
    c = cluster()
    router = Router(c)
    nbytes = 256e6
    peer = 8 if comm == "p2p" else -1
    t_a = engine.run(one_op_program(comm, groups, nbytes, peer), AnalyticNetwork(c, router)).timeline.end_s
    t_f = engine.run(one_op_program(comm, groups, nbytes, peer),
                     FlowNetwork(c, router, algo="ring" if comm != "p2p" else None)).timeline.end_s
    assert t_f == pytest.approx(t_a, rel=0.01)


def test_default_scenario_agrees_across_fidelities(tmp_path):
    a = cli_json("run", "--no-plot", "--out", tmp_path / "a")
    f = cli_json("run", "--network", "flow", "--no-plot", "--out", tmp_path / "f")
    assert f["step_time_s"] == pytest.approx(a["step_time_s"], rel=0.01)
    assert a["links"] == {}
    top = f["links"]["top"]
    assert top and all(0 <= row["utilisation"] <= 1 + 1e-9 for row in top)
    assert all(row["peak_utilisation"] <= 1 + 1e-9 for row in top)
    trace = json.loads((tmp_path / "f" / "trace.json").read_text())
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "C"}
    assert "memory" in names and any(n.startswith("link ") for n in names)


@pytest.mark.quick
def test_pp_and_dp_share_a_nic():
    """A PP send and a DP all-reduce leaving through the same NIC take longer together than
    alone in flow mode; the analytic model does not see it."""
    c = cluster(nodes=2, gpus=1, nodes_per_leaf=2)
    router = Router(c)
    nbytes = 100e6

    def program(with_dp: bool, with_pp: bool):
        prog = Program()
        prog.rank_weight = {0: 1, 1: 1}
        if with_pp:
            gid = prog.group_set_id(((0, 1),))
            prog.add(Op(0, 0, STREAM["pp_send"], KIND["pp"], "pp.send", 0, -1, 0, nbytes=nbytes,
                        comm="p2p", group_set=gid, peer=1))
        if with_dp:
            gid = prog.group_set_id(((0, 1),))
            for rank in (0, 1):
                prog.add(Op(0, rank, STREAM["dp"], KIND["dp"], "dp.all_reduce", 0, -1, -1, nbytes=nbytes,
                            comm="all_reduce", group_set=gid, key=("dp",)))
        return prog

    flow = FlowNetwork(c, router, algo="ring")
    alone_pp = engine.run(program(False, True), flow).timeline
    together = engine.run(program(True, True), FlowNetwork(c, router, algo="ring")).timeline
    pp_alone = alone_pp.spans(alone_pp.mask(stream="pp_send"))[0].duration_s
    pp_shared = together.spans(together.mask(stream="pp_send"))[0].duration_s
    assert pp_shared > 1.5 * pp_alone  # the NIC is shared: the send slows down
    analytic = engine.run(program(True, True), AnalyticNetwork(c, router)).timeline
    assert analytic.spans(analytic.mask(stream="pp_send"))[0].duration_s == pytest.approx(pp_alone, rel=0.01)


@pytest.mark.quick
def test_oversubscription_slows_concurrent_dp_in_flow_mode_only(tmp_path):
    """8 nodes, one per leaf: the DP groups' ring hops cross the spine links."""
    out = {}
    for over in (1.0, 2.0):
        c = cluster(nodes=8, gpus=8, nodes_per_leaf=1, oversubscription=over)
        groups = tuple(tuple(n * 8 + g for n in range(8)) for g in range(8))
        router = Router(c)
        for name, net in (("analytic", AnalyticNetwork(c, router)), ("flow", FlowNetwork(c, router, algo="ring"))):
            out[(name, over)] = engine.run(one_op_program("all_reduce", groups, 256 * 2**20), net).timeline.end_s
    assert out[("flow", 2.0)] / out[("flow", 1.0)] == pytest.approx(2.0, rel=0.1)
    assert out[("analytic", 2.0)] == pytest.approx(out[("analytic", 1.0)], rel=1e-9)


@pytest.mark.parametrize("settings", [
    dict(),
    dict(model="llama3-8b", topology="h100-ib", gpus=32, tp=4, cp=2, pp=2, seq=16384, gbs=8),
    dict(model="mixtral-8x7b", topology="h100-ib", gpus=32, tp=2, pp=2, ep=4, seq=2048, gbs=16),
    dict(model="llama3-8b", topology="h100-ib-2to1", gpus=64, tp=2, pp=4, seq=4096, gbs=32, zero=3),
])
def test_private_links_shortcut_changes_nothing(settings, monkeypatch):
    """Transfers on links no other traffic uses are timed without the flow model: the step and
    the link statistics are what the flow model gives when it runs them."""
    from simtrain import api

    sc = api.resolve({**settings, "network": "flow"})
    fast = api.simulate(sc).report
    monkeypatch.setattr(FlowNetwork, "_private_sets", lambda self: set())
    slow = api.simulate(sc).report
    assert fast["step_time_s"] == pytest.approx(slow["step_time_s"], rel=1e-12)
    assert fast["links"]["utilisation_by_link"] == pytest.approx(slow["links"]["utilisation_by_link"], rel=1e-9)
    assert fast["breakdown_s"] == pytest.approx(slow["breakdown_s"], rel=1e-9, abs=1e-12)


@pytest.mark.quick
def test_link_utilisation_covers_the_groups_a_folded_op_stands_for():
    """Two TP groups in two nodes: only the first runs as flows (the second shares no link), yet
    the report's utilisation lists the second's NVLink links too, loaded alike."""
    c = cluster()
    net = FlowNetwork(c, Router(c), algo="ring")
    groups = (tuple(range(8)), tuple(range(8, 16)))
    engine.run(one_op_program("all_reduce", groups, 256e6), net)
    links, _ = net.link_report(1.0)
    util = links["utilisation_by_link"]
    assert util["gpu1->node0/nvswitch"] > 0
    assert util["gpu9->node1/nvswitch"] == pytest.approx(util["gpu1->node0/nvswitch"], rel=1e-12)
    assert not any(row["link"].startswith("gpu9") for row in links["top"])  # not simulated
    assert links["links_used"] == len(util)


def test_a_folded_flow_run_reports_the_links_of_every_rank():
    """The default scenario simulates one representative per pipeline stage, yet its report's
    utilisation names the NVLink links of all 64 GPUs (what the topology drawing colours)."""
    from simtrain import api

    report = api.simulate(api.resolve({"network": "flow"})).report
    assert report["simulated_ranks"] < 64
    util = report["links"]["utilisation_by_link"]
    assert all(f"gpu{g}->node{g // 8}/nvswitch" in util for g in range(64))
