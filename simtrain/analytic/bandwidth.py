"""Bandwidths of the closed-form model: per GPU, for a group of ranks by the span it covers.

The course notes' rule (the configuration search script's ``bandwidth(inner, size)``): a group
whose span (inner stride x size, in the rank order of the layout, innermost first, default
tp-cp-ep-dp-pp) fits in one node uses the node's NVLink bandwidth per GPU; otherwise the
scale-out bandwidth per GPU (NIC share, capped by PCIe). Beyond the script (no effect on a
non-blocking fabric such as seed-h100): a group spanning more than one leaf divides that by the
leaf oversubscription, more than one pod also by the core oversubscription.
"""

from __future__ import annotations

from simtrain.specs.order import dimension_spans
from simtrain.specs.parallel import ParallelSpec
from simtrain.topology.cluster import Cluster


def cluster_bandwidths(cluster: Cluster) -> tuple[float, float]:
    """(intra-node, scale-out) achievable bandwidth per GPU and direction, bytes/s.

    Intra-node: the node's NVLink (``[node] nvlink_GBps`` x ``nvlink_efficiency``); a node without
    NVSwitch uses the scale-out value. Scale-out: one GPU's share of the node's NICs, ``nics x nic
    x nic_efficiency / gpus``, capped by its PCIe link (seed-h100, efficiencies 1: 8 x 50e9 / 8 =
    50e9, PCIe 64e9). Read from ``cluster.spec``, or from the graph's edge tiers
    (``capacity_Bps``) when a cluster has no spec.
    """
    g = cluster.gpus_per_node
    if cluster.spec is not None:
        nd = cluster.spec.node
        nic_Bps = nd.nic_Bps * cluster.spec.fabric.nic_efficiency
        out = min(nd.pcie_Bps, nic_Bps * nd.nics / g) if nd.nics else 0.0
        intra = nd.nvlink_Bps * nd.nvlink_efficiency if nd.nvswitch else out
        return intra, out
    edges = cluster.graph.edges(data=True)
    nvlink = [d["capacity_Bps"] for _, _, d in edges if d.get("tier") == "nvlink"]
    pcie = [d["capacity_Bps"] for _, _, d in edges if d.get("tier") == "pcie"]
    nic = [d["capacity_Bps"] for u, _, d in edges if d.get("tier") == "leaf"
           and cluster.graph.nodes[u].get("kind") == "nic"]
    nics = sum(1 for _, k in cluster.graph.nodes(data="kind") if k == "nic") / cluster.num_nodes
    out = min(min(pcie), min(nic) * nics / g) if nic and pcie else 0.0
    return (min(nvlink) if nvlink else out), out


def group_bandwidth(cluster: Cluster, span: int) -> float:
    """Bandwidth per GPU of a group spanning ``span`` consecutive ranks (the notes' rule: within
    one node NVLink, else scale-out; oversubscription as in the module docstring)."""
    intra, out = cluster_bandwidths(cluster)
    g = cluster.gpus_per_node
    if span <= g:
        return intra
    spec = cluster.spec
    if spec is None or spec.fabric.kind == "none":
        return out
    fb = spec.fabric
    leaf_nodes = fb.nodes_per_leaf
    if span > leaf_nodes * g:
        out /= fb.oversubscription
        if fb.tiers == 3:
            rails = spec.node.nics if fb.kind == "rail-optimized" else 1
            if span > max(fb.leaves_per_pod * leaf_nodes // rails, leaf_nodes) * g:
                out /= fb.core_oversubscription
    return out


def per_node(span: int, size: int, cluster: Cluster) -> int:
    """Members per node of a group of ``size`` ranks spread evenly over ``span`` consecutive ranks."""
    gpn = cluster.gpus_per_node
    return size if span <= gpn else max(1, gpn // (span // size))


def group_spans(par: ParallelSpec) -> dict[str, int]:
    """Span in ranks of the TP, CP, PP and DP x CP groups in ``par.order`` (innermost first).

    The span of a dimension is its stride times its size; a group made of several dimensions
    spans the largest of theirs. With the default order tp-cp-ep-dp-pp these are the script's
    ``bandwidth(1, tp)``, ``bandwidth(tp, cp)``, ``bandwidth(tp*cp*dp, pp)`` and
    ``bandwidth(tp, dp*cp)``. EP is folded from DP x CP and has size 1 for dense models.
    """
    span = dimension_spans(par.order, {"tp": par.tp, "cp": par.cp, "ep": 1, "dp": par.dp, "pp": par.pp})
    return {"tp": span["tp"], "cp": span["cp"], "pp": span["pp"],
            "dpcp": max(span["dp"], span["cp"])}
