"""The router's tables and the NIC rules read from them: on a preset, each GPU's routes leave by
its own NIC under its leaf, its channel is named by the same NIC; a node without NICs gives none;
a NIC shared by four GPUs serves each of them."""

from __future__ import annotations

import pytest

from simtrain.topology.build import plain_adjacency
from simtrain.topology.cluster import build_topology, load_topology
from simtrain.topology.routing.tables import first_nic, nic_port, static_tables

pytestmark = pytest.mark.quick


def test_every_gpu_leaves_by_its_own_nic_under_its_leaf():
    cluster = load_topology("h100-rail", nodes=40)  # 32 nodes per rail group: leaf 8 (n // 32) + r
    g = cluster.graph
    edges, node_lat, adj, ports, anchor = static_tables(g)
    assert len(edges) == g.number_of_edges() and len(node_lat) == g.number_of_nodes()
    for gpu in (0, 13, 63, 262, 319):
        node, local = divmod(gpu, 8)
        leaf = f"leaf{(node // 32) * 8 + local}"
        assert nic_port(f"gpu{gpu}", ports, anchor) == (f"node{node}/nic{local}", leaf)
        assert first_nic(f"gpu{gpu}", plain_adjacency(g), g._node) == f"node{node}/nic{local}"
        assert ports[f"gpu{gpu}"] == (f"node{node}/nic{local}", f"node{node}/nvswitch")  # sorted names
        assert anchor[f"node{node}/nic{local}"] == (leaf, (f"node{node}/nic{local}",))


def test_shared_and_missing_nics():
    """8 GPUs on 2 NICs: four GPUs per NIC, under the node's leaf. A node without NICs (one
    NVSwitch node, no fabric): no GPU has one."""
    cluster = build_topology({
        "gpu": "h100-sxm", "nodes": 2,
        "node": {"gpus": 8, "nvlink_GBps": 450, "nics": 2, "nic_gbps": 400, "pcie_GBps": 64},
        "fabric": {"kind": "fat-tree", "tiers": 2, "nodes_per_leaf": 1, "spines": 2}}, "two-nic")
    g = cluster.graph
    _, _, _, ports, anchor = static_tables(g)
    for gpu, nic, leaf in ((0, "node0/nic0", "leaf0"), (3, "node0/nic0", "leaf0"), (4, "node0/nic1", "leaf0"),
                           (15, "node1/nic1", "leaf1")):
        assert nic_port(f"gpu{gpu}", ports, anchor) == (nic, leaf)
        assert first_nic(f"gpu{gpu}", plain_adjacency(g), g._node) == nic
    alone = build_topology({"gpu": "h100-sxm", "nodes": 1,
                            "node": {"gpus": 8, "nvlink_GBps": 450, "nics": 0}}, "no-nic")
    g = alone.graph
    _, _, _, ports, anchor = static_tables(g)
    for gpu in range(8):
        assert nic_port(f"gpu{gpu}", ports, anchor) is None
        assert first_nic(f"gpu{gpu}", plain_adjacency(g), g._node) is None


def test_edge_costs_read_the_graph_as_a_copied_table_would():
    """Every directed edge, in the adjacency's order (each node's edges in the graph's order),
    with its (capacity, latency); absent edges and other keys are not in it."""
    g = load_topology("h100-ib", nodes=4).graph
    edges = static_tables(g)[0]
    copied = {(u, v): (d["capacity_Bps"], d["latency_s"]) for u, out in plain_adjacency(g).items()
              for v, d in out.items()}
    assert list(edges) == list(copied) and len(edges) == len(copied) == g.number_of_edges()
    assert dict(edges.items()) == copied
    assert list(edges.column("capacity_Bps")) == [c for c, _ in copied.values()]
    assert list(edges.column("latency_s")) == [lat for _, lat in copied.values()]
    u, v = next(iter(copied))
    assert (u, v) in edges and edges[(u, v)] == copied[(u, v)] and edges.get((u, v)) == copied[(u, v)]
    for absent in ((v, "nowhere"), ("nowhere", v), (u, u), "gpu0", (u,), (u, v, 0)):
        assert absent not in edges and edges.get(absent) is None
    with pytest.raises(KeyError):
        edges[("nowhere", v)]
