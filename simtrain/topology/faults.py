"""Degraded and failed links: a cluster whose graph departs from its uniform description.

A degraded link keeps ``factor`` of its line rate and achievable bandwidth in both directions (a
port that trained down, a flapping cable); a failed link is removed in both directions, and routes
are searched on what remains (:class:`~simtrain.topology.routing.router.Router` with ``structural=False``,
since the fabric's arithmetic routes assume every link is there). Links are named by their ends as
the graph names them (:mod:`simtrain.topology.cluster`).
"""

from __future__ import annotations

from dataclasses import replace

from simtrain.errors import SpecError
from simtrain.topology.cluster import Cluster


def _check_link(cluster: Cluster, flag: str, a: str, b: str) -> None:
    g = cluster.graph
    if g.has_edge(a, b):
        return
    for end in (a, b):
        if end not in g:
            by_kind: dict[str, list[str]] = {}
            for n, kind in g.nodes(data="kind"):
                by_kind.setdefault(kind, []).append(n)
            shown = "; ".join(f"{k}: {ns[0]}" + (f" .. {ns[-1]}" if len(ns) > 1 else "") for k, ns in by_kind.items())
            raise SpecError(f"{flag} {a}-{b}: topology {cluster.name} has no switch, NIC or GPU named {end!r} "
                            f"(it has {shown})")
    ends = sorted(g.successors(a))
    raise SpecError(f"{flag} {a}-{b}: topology {cluster.name} has no link between {a} and {b} "
                    f"({a} links to {', '.join(ends[:8])}{', ...' if len(ends) > 8 else ''})")


def check_links(cluster: Cluster, degraded: tuple[tuple[str, str, float], ...],
                failed: tuple[tuple[str, str], ...]) -> None:
    """A one-line error for the first degraded or failed link ``cluster`` does not have."""
    for a, b, _ in degraded:
        _check_link(cluster, "--degrade-link", a, b)
    for a, b in failed:
        _check_link(cluster, "--fail-link", a, b)


def perturb_links(cluster: Cluster, degraded: tuple[tuple[str, str, float], ...],
                  failed: tuple[tuple[str, str], ...]) -> Cluster:
    """``cluster`` with the ``degraded`` links (ends, bandwidth factor) slowed and the ``failed``
    links (ends) removed; itself when both are empty. An unknown link is a one-line error naming
    it."""
    if not degraded and not failed:
        return cluster
    check_links(cluster, degraded, failed)
    g = cluster.graph.copy()
    for a, b, factor in degraded:
        for u, v in ((a, b), (b, a)):
            g.edges[u, v]["bandwidth_Bps"] *= factor
            g.edges[u, v]["capacity_Bps"] *= factor
    for a, b in failed:
        g.remove_edge(a, b)
        g.remove_edge(b, a)
    return replace(cluster, graph=g, uniform=False)
