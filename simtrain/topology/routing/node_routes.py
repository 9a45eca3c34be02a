"""Routes between two GPUs of one node, learned once per kind of node.

Between two GPUs of one node the router's shortest routes cross one switch both GPUs hang off
(the node's NVSwitch, or a NIC they share): one hop in the middle, where any route through the
fabric takes at least three (:class:`~simtrain.topology.routing.router.Router`). Among those switches the
widest route wins, its width the smaller capacity of the two links; only when two are equally wide
does ECMP pick one by ``crc32`` of the GPUs' global numbers. So where the widest is unique, the
route between local GPUs ``i`` and ``j`` is the same switch on every node whose GPUs have the same
local neighbours with the same capacities: it is learned on the first such node from the router's
own search and reused, renamed, on the others (a tied or longer route is never reused). A folded
tensor-parallel collective on 131,072 GPUs asks for a quarter of a million such routes.

A node's kind is read from the router's tables once per node, and once per cluster where the
cluster is uniform (its graph as the builder made it: every node has the same GPUs, NVSwitch and
NICs with the same link capacities, its ports named by its node, so every kind equals the first).
"""

from __future__ import annotations

from typing import Any

_TIE = 1 - 1e-12  # the router's tolerance for equally wide routes (Router._route's pick)


class NodeRoutes:
    """Learned routes inside nodes of ``router``, a :class:`~simtrain.topology.routing.router.Router`
    (module docstring)."""

    def __init__(self, router: Any) -> None:
        self.router = router
        self._kinds: dict[int, tuple] = {}  # node -> its kind (local neighbours and capacities)
        self._learned: dict[tuple, str | None] = {}  # (kind, i, j) -> local switch; None: not reusable

    def route(self, src: int, dst: int, node: int) -> tuple[str, ...] | None:
        """The route from GPU ``src`` to GPU ``dst`` (both on ``node``, distinct) when learned on
        a node of the same kind; None otherwise."""
        gpn = self.router.cluster.gpus_per_node
        switch = self._learned.get((self.kind(node), src - node * gpn, dst - node * gpn))
        if switch is None:
            return None
        return (f"gpu{src}", f"node{node}/{switch}", f"gpu{dst}")

    def reused(self, kind: tuple, i: int, j: int) -> bool:
        """Whether the route from local GPU ``i`` to ``j`` is learned for nodes of ``kind``: the
        same switch, renamed, on every such node."""
        return self.switch(kind, i, j) is not None

    def switch(self, kind: tuple, i: int, j: int) -> str | None:
        """The switch (its local name) of the route from local GPU ``i`` to ``j`` learned for nodes
        of ``kind``; None where none is learned or it cannot be reused."""
        return self._learned.get((kind, i, j))

    def learn(self, src: int, dst: int, node: int, path: tuple[str, ...]) -> None:
        """Remember the router's ``path`` from ``src`` to ``dst`` on ``node`` for nodes of its kind
        when it crosses one switch of the node and no other such switch is as wide."""
        gpn = self.router.cluster.gpus_per_node
        key = (self.kind(node), src - node * gpn, dst - node * gpn)
        if key in self._learned:
            return
        prefix = f"node{node}/"
        switch = None
        if len(path) == 3 and path[1].startswith(prefix):
            edges, _, _, ports = self.router._static()[:4]
            a, b = path[0], path[2]
            widths = [min(edges[(a, p)][0], edges[(p, b)][0]) for p in set(ports[a]) & set(ports[b])]
            widest = max(widths)
            if sum(w >= widest * _TIE for w in widths) == 1:
                switch = path[1][len(prefix):]
        self._learned[key] = switch

    def kind(self, node: int) -> tuple:
        """Per local GPU, its non-GPU neighbours (named locally when on the node) with the
        capacity of the link to and from each. On a uniform cluster (every node alike,
        :class:`~simtrain.topology.cluster.Cluster`) every node has the first one's kind."""
        kind = self._kinds.get(node)
        if kind is None:
            if self.router.cluster.uniform and self._kinds:
                kind = next(iter(self._kinds.values()))
            else:
                kind = node_kind(self.router, node)
            self._kinds[node] = kind
        return kind


def node_kind(router: Any, node: int) -> tuple:
    """:meth:`NodeRoutes.kind` of ``node``, read from ``router``'s tables."""
    edges, _, _, ports = router._static()[:4]
    gpn, prefix = router.cluster.gpus_per_node, f"node{node}/"
    cut, none = len(prefix), (None,)
    out = []
    for g in range(node * gpn, (node + 1) * gpn):
        gid = f"gpu{g}"
        row = []
        for p in ports[gid]:
            name = (p[cut:], True) if p.startswith(prefix) else (p, False)
            row.append((name, edges[(gid, p)][0], edges.get((p, gid), none)[0]))
        out.append(tuple(row))
    return tuple(out)
