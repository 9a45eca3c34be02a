"""The analytic network prices an uncontended collective exactly as ``simtrain collective`` does,
and the flow network agrees within 2% when nothing else shares the links: properties over random
groups, sizes, collectives and topologies."""

from __future__ import annotations

from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from simtrain.api.collective import collective
from simtrain.network.analytic import AnalyticNetwork
from simtrain.topology.cluster import Cluster, load_topology
from simtrain.topology.routing.router import Router

TOPOLOGIES = ("h100-ib", "h100-ib-2to1", "h100-rail", "h100-3tier", "a100-hdr", "h200-ib", "h800-rail",
              "b200-ib", "seed-h100")
OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "p2p")
PROP = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@lru_cache(maxsize=None)
def cluster(name: str, nodes: int) -> Cluster:
    return load_topology(name, nodes=nodes)


@st.composite
def collectives(draw):
    """(cluster, op, group, bytes): a random group of 2 to 32 GPUs on 1 to 4 nodes."""
    c = cluster(draw(st.sampled_from(TOPOLOGIES)), draw(st.integers(1, 4)))
    op = draw(st.sampled_from(OPS))
    size = 2 if op == "p2p" else draw(st.integers(2, min(32, c.num_gpus)))
    gpus = tuple(draw(st.permutations(range(c.num_gpus)))[:size])
    nbytes = float(2 ** draw(st.integers(10, 32)))
    return c, op, gpus, nbytes


@PROP
@given(collectives())
def test_run_prices_a_collective_as_the_collective_command_does(case):
    c, op, gpus, nbytes = case
    run = AnalyticNetwork(c, Router(c))
    t = run.p2p_time(*gpus, nbytes) if op == "p2p" else run.collective_time(op, gpus, nbytes)
    rep = collective(op, size_bytes=nbytes, ranks=list(gpus), topology=c)
    assert rep["time_s"] == rep["uncontended_time_s"] == t


@pytest.mark.quick
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(collectives())
def test_flow_agrees_with_analytic_within_2_percent_when_uncontended(case):
    c, op, gpus, nbytes = case
    analytic = collective(op, size_bytes=nbytes, ranks=list(gpus), topology=c)
    flow = collective(op, size_bytes=nbytes, ranks=list(gpus), topology=c, network="flow")
    assert flow["algorithm"] == analytic["algorithm"]
    assert flow["time_s"] == pytest.approx(analytic["time_s"], rel=0.02)


@pytest.mark.quick
def test_forced_algorithm_applies_to_the_analytic_network():
    c = load_topology("h100-ib")
    tree = AnalyticNetwork(c, algo="tree").collective_time("all_reduce", tuple(range(16)), 2**30)
    tuned = AnalyticNetwork(c).collective_time("all_reduce", tuple(range(16)), 2**30)
    assert tree > tuned
    assert AnalyticNetwork(c, nvls=True).collective_time("all_reduce", tuple(range(8)), 2**30) < \
        AnalyticNetwork(c, nvls=False).collective_time("all_reduce", tuple(range(8)), 2**30)
