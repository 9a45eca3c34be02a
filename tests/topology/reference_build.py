"""The straightforward graph builder the fast one is compared with (tests/topology/test_build.py):
one ``add_node`` and one ``add_edge`` at a time, in the builder's order."""

from __future__ import annotations


import networkx as nx
from simtrain.topology.build import link_efficiencies
from simtrain.topology.spec import TopologySpec

def reference_graph(spec: TopologySpec) -> nx.DiGraph:
    """The graph built one ``add_node`` and one ``add_edge`` at a time, in the builder's order."""
    g = nx.DiGraph(name=spec.name)
    nd, efficiency = spec.node, link_efficiencies(spec)

    def link(u: str, v: str, bandwidth: float, latency: float, tier: str) -> None:
        attrs = dict(bandwidth_Bps=float(bandwidth), capacity_Bps=float(bandwidth) * efficiency[tier],
                     latency_s=float(latency), tier=tier)
        g.add_edge(u, v, **attrs)
        g.add_edge(v, u, **attrs)

    per_nic = nd.gpus // nd.nics if nd.nics else 0
    for n in range(spec.nodes):
        gpus = [f"gpu{n * nd.gpus + i}" for i in range(nd.gpus)]
        for i, name in enumerate(gpus):
            g.add_node(name, kind="gpu", index=n * nd.gpus + i, node=n, local=i, latency_s=0.0)
        if nd.nvswitch and nd.gpus > 1:
            sw = f"node{n}/nvswitch"
            g.add_node(sw, kind="nvswitch", node=n, latency_s=0.0)
            for name in gpus:
                link(name, sw, nd.nvlink_Bps, nd.nvlink_latency_s / 2, "nvlink")
        for k in range(nd.nics):
            nic = f"node{n}/nic{k}"
            g.add_node(nic, kind="nic", node=n, index=k, latency_s=0.0)
            for name in gpus[k * per_nic:(k + 1) * per_nic]:
                link(name, nic, nd.pcie_Bps, nd.nic_latency_s, "pcie")
    fb = spec.fabric
    if fb.kind == "none":
        return g
    rail = fb.kind == "rail-optimized"
    npl, sw_lat, ln_lat = fb.nodes_per_leaf, fb.switch_latency_s, fb.link_latency_s
    leaf_up = (npl if rail else npl * nd.nics) * nd.nic_Bps / fb.oversubscription / fb.spines
    for leaf in range(spec.num_leaves):
        group, r = divmod(leaf, nd.nics) if rail else (leaf, None)
        pod = leaf // fb.leaves_per_pod if fb.tiers == 3 else 0
        g.add_node(f"leaf{leaf}", kind="leaf", index=leaf, pod=pod, latency_s=sw_lat, **({"rail": r} if rail else {}))
        for n in range(group * npl, min(spec.nodes, (group + 1) * npl)):
            for k in ([r] if rail else range(nd.nics)):
                link(f"node{n}/nic{k}", f"leaf{leaf}", nd.nic_Bps, ln_lat, "leaf")
        for s in range(fb.spines):
            spine = f"pod{pod}/spine{s}" if fb.tiers == 3 else f"spine{s}"
            if spine not in g:
                g.add_node(spine, kind="spine", index=s, pod=pod, latency_s=sw_lat)
            link(f"leaf{leaf}", spine, leaf_up, ln_lat, "spine")
    if fb.tiers == 3:
        spine_up = fb.leaves_per_pod * leaf_up / fb.core_oversubscription / (fb.cores // fb.spines)
        for c in range(fb.cores):
            g.add_node(f"core{c}", kind="core", index=c, latency_s=sw_lat)
            for pod in range(spec.num_pods):
                link(f"pod{pod}/spine{c % fb.spines}", f"core{c}", spine_up, ln_lat, "core")
    return g


def assert_same_graph(g: nx.DiGraph, ref: nx.DiGraph) -> None:
    """Same name, nodes and attributes, successors and predecessors in the same orders, edge
    attributes equal (and of the same types), one dict per directed edge."""
    assert g.graph == ref.graph
    assert list(g._node.items()) == list(ref._node.items())
    assert [type(v) for d in g._node.values() for v in d.values()] == \
        [type(v) for d in ref._node.values() for v in d.values()]
    for table, ref_table in ((g._succ, ref._succ), (g._pred, ref._pred)):
        assert list(table) == list(ref_table)
        for n, nbrs in table.items():
            assert list(nbrs.items()) == list(ref_table[n].items())
    assert g._adj is g._succ
    for u, nbrs in g._succ.items():
        for v, d in nbrs.items():
            assert g._pred[v][u] is d and d is not g._succ[v][u]
            assert all(type(x) is type(ref._succ[u][v][k]) for k, x in d.items())
