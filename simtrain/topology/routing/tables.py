"""The router's tables of a cluster graph, and its two NIC rules.

Both the router (:class:`~simtrain.topology.routing.router.Router`) and the links of many routes at once
(:class:`~simtrain.topology.routing.link_ids.LinkIds`) read them: which NIC a GPU's routes leave by, and
which NIC names its channel (:meth:`Router.nic_of <simtrain.topology.routing.router.Router.nic_of>`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

from simtrain.topology.build import plain_adjacency

_COST = itemgetter("capacity_Bps", "latency_s")


class EdgeCosts(Mapping):
    """Each directed edge ``(u, v)`` of a graph -> its ``(capacity_Bps, latency_s)``, read from the
    graph's own adjacency when asked rather than copied (a million edges on 131,072 GPUs, of
    which a run reads a few thousand one by one); iterated in the adjacency's order, each node's
    edges in the graph's order. :meth:`column` gives one attribute of every edge in that order."""

    __slots__ = ("_succ", "_size")

    def __init__(self, succ: dict[str, dict[str, dict[str, Any]]]) -> None:
        self._succ = succ  # plain dicts, read only
        self._size = sum(map(len, succ.values()))

    def __getitem__(self, edge: tuple[str, str]) -> tuple[float, float]:
        try:
            u, v = edge
        except (TypeError, ValueError):  # not a pair: absent, as from a dict
            raise KeyError(edge) from None
        return _COST(self._succ[u][v])

    def __contains__(self, edge: object) -> bool:
        if not isinstance(edge, tuple) or len(edge) != 2:
            return False
        out = self._succ.get(edge[0])
        return out is not None and edge[1] in out

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return chain.from_iterable(zip(repeat(u), out) for u, out in self._succ.items())

    def __len__(self) -> int:
        return self._size

    def out_nodes(self) -> Iterator[Iterable[str]]:
        """Per node, in iteration order, the second nodes of its edges (in order)."""
        return iter(self._succ.values())

    def column(self, name: str) -> Iterator[float]:
        """Attribute ``name`` (``capacity_Bps`` or ``latency_s``) of every edge, in iteration order."""
        return map(itemgetter(name), chain.from_iterable(out.values() for out in self._succ.values()))


def static_tables(g: Any) -> tuple[EdgeCosts, dict, dict, dict, dict]:
    """The router's tables of graph ``g``: each edge's (capacity, latency) (:class:`EdgeCosts`),
    each node's latency, each switch's and each GPU's non-GPU neighbours (sorted), and the switch
    a port is routed from. The per-node and per-neighbour loops run inside ``map`` and ``filter``
    (a million edges on 131,072 GPUs)."""
    attrs = g._node  # networkx's own node dict (what ``g.nodes`` views), read as plain dicts
    succ = plain_adjacency(g)  # plain dicts, not views
    edges = EdgeCosts(succ)
    node_lat = {n: d.get("latency_s", 0.0) for n, d in attrs.items()}
    gpus = [n for n, d in attrs.items() if d.get("kind") == "gpu"]  # each in the graph's order
    switches = [n for n, d in attrs.items() if d.get("kind") != "gpu"]
    switch = set(switches).__contains__
    adj = {n: tuple(sorted(filter(switch, succ[n]))) for n in switches}
    ports = {n: tuple(sorted(filter(switch, succ[n]))) for n in gpus}
    # a port with a single non-GPU neighbour (a NIC under its leaf) is routed from there
    anchor = {n: (nb[0], (n,)) if len(nb) == 1 else (n, ()) for n, nb in adj.items()}
    return edges, node_lat, adj, ports, anchor


def nic_port(gpu: str, ports: dict, anchor: dict) -> tuple[str, str] | None:
    """GPU node ``gpu``'s NIC and the switch it hangs off: its first port (in name order) routed
    from a switch, from :func:`static_tables`' ``ports`` and ``anchor``; None without one."""
    for port in ports[gpu]:
        switch, hop = anchor[port]
        if hop:
            return port, switch
    return None


def first_nic(gpu: str, adjacency: dict, attrs: dict) -> str | None:
    """The first NIC among GPU node ``gpu``'s neighbours, in the graph's adjacency order
    (``adjacency``: :func:`~simtrain.topology.build.plain_adjacency`; ``attrs``: the nodes'
    attributes); None without one."""
    return next((n for n in adjacency[gpu] if attrs[n]["kind"] == "nic"), None)
