"""Degraded and failed links: the graph changes, the original cluster does not, names are checked."""

import pytest

from simtrain.errors import SpecError
from simtrain.topology.cluster import load_topology
from simtrain.topology.faults import perturb_links
from simtrain.topology.routing.router import Router

pytestmark = pytest.mark.quick


def test_a_degraded_link_keeps_its_fraction_both_ways():
    cluster = load_topology("h100-ib", nodes=8)
    slow = perturb_links(cluster, (("leaf0", "spine3", 0.25),), ())
    for u, v in (("leaf0", "spine3"), ("spine3", "leaf0")):
        assert slow.capacity_Bps[(u, v)] == pytest.approx(0.25 * cluster.capacity_Bps[(u, v)])
        assert slow.graph.edges[u, v]["bandwidth_Bps"] == pytest.approx(0.25 * cluster.graph.edges[u, v]["bandwidth_Bps"])
    assert slow.capacity_Bps[("leaf0", "spine2")] == cluster.capacity_Bps[("leaf0", "spine2")]
    assert perturb_links(cluster, (), ()) is cluster


def test_a_failed_link_is_gone_and_routes_avoid_it():
    cluster = load_topology("h100-ib", nodes=8)
    failed = tuple(("leaf0", f"spine{s}") for s in range(1, 8))
    cut = perturb_links(cluster, (), failed)
    assert not cut.graph.has_edge("leaf0", "spine3") and not cut.graph.has_edge("spine3", "leaf0")
    assert cluster.graph.has_edge("leaf0", "spine3")  # the original is untouched
    router = Router(cut, structural=False)
    for src, dst in ((0, 32), (1, 40), (45, 2)):
        route = router.route(src, dst)
        assert "spine0" in route, route  # the only spine leaf0 still reaches


def test_unknown_links_are_one_line_errors():
    cluster = load_topology("h100-ib", nodes=8)
    with pytest.raises(SpecError, match=r"--fail-link leaf0-spine99: topology h100-ib has no switch, NIC or "
                                        r"GPU named 'spine99' \(it has .*spine: spine0 .. spine7"):
        perturb_links(cluster, (), (("leaf0", "spine99"),))
    with pytest.raises(SpecError, match="--degrade-link leaf0-leaf1: topology h100-ib has no link between "
                                        "leaf0 and leaf1"):
        perturb_links(cluster, (("leaf0", "leaf1", 0.5),), ())
