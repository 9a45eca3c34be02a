"""Groups of one shape priced once: the prices a collective's groups share with their translates.

The data-parallel groups of a large run are copies of one another on other nodes (and on other
GPUs of the same nodes): same members per node, same NICs, same leaves, same link capacities. A
ring's or a tree's cost on such a group (:func:`~simtrain.network.algorithms.hop_cost`: its
busiest link's bytes over that link's achievable bandwidth, :func:`~simtrain.network.phases.hops_time`)
is the same number on every copy when the copies' routes are the same up to a renaming of links.
:class:`GroupShapes` keys each group by what its routes are made of and prices one group per key.

**The key** of a group spanning two or more nodes (:meth:`GroupShapes.key`), its members
numbered in group order, its nodes, NICs, leaves and pods numbered by first appearance: per member,
its node's number and, where the group has two or more GPUs of that node, its local GPU index; its
NIC's number (:meth:`~simtrain.topology.routing.link_ids.LinkIds.nic_numbers`);
its six node-side links (GPU -> NIC -> leaf and back, GPU -> NVSwitch and back) numbered by first
appearance, with their capacities; its leaf's number. Per leaf: its pod's number and the capacities
of its links to and from every spine; per pod, those to and from every core. Per node: whether it
has an NVSwitch and, where the group has two or more of its GPUs, its kind
(:meth:`~simtrain.topology.routing.node_routes.NodeRoutes.kind`: its GPUs' ports with their capacities).
Numbers by first appearance make two groups' keys equal exactly when the member-by-member map
between them preserves which members share a node, a NIC, a link, a leaf or a pod; capacities are
compared as floats (``==``). A group gets no key (and is priced alone, as before) where routes are
searched on the graph (a failed link), the cluster has no fabric built from a spec, a member has no
NIC under a leaf, or the group has several channels across two or more leaves (their ECMP picks
could share a spine link, see below).

**Why equal keys give equal costs.** Let ``phi`` map the members of group ``G`` to those of ``G'``
in order. (1) The hops: :func:`~simtrain.network.channels.ring_hop_arrays` and
:func:`~simtrain.network.trees.tree_hops` read only which members share a node (in group order)
and the channel count, itself the fewest distinct NICs on a node, so ``G'``'s hops are ``phi`` of
``G``'s with the same bytes, in the same order. (2) The routes (:class:`~simtrain.topology.routing.link_ids.LinkIds`):
a hop inside a node crosses the switch learned for the node's kind (the same local switch on equal
kinds); a hop between nodes is the source's GPU -> NIC -> leaf, one middle chosen by ECMP when the
two leaves differ, the destination's leaf -> NIC -> GPU. (3) ECMP picks by ``crc32`` of the GPUs'
global numbers, so ``G`` and ``G'`` may pick other spines or cores; a computed cost is shared only
when its hops show (:meth:`GroupShapes.hop_cost`) that every hop inside a node crosses the
NVSwitch learned for the node's kind, every hop between nodes takes the fabric's equal-width
middles (the leaves' and pods' uplinks each of one capacity, as the routes' own ECMP requires), at
most one hop leaves and at most one enters each leaf for another, and at most one leaves and one
enters each pod for another: then every spine or core link a hop crosses carries that hop alone,
at the capacity the key lists for its leaf or pod, whichever middle ECMP picks. So ``phi`` extends
to a map of the links that carries each link's bytes, added hop by hop in the same order (bit for
bit), onto a link of the same capacity; the busiest link's ratio is the same float. Whether the
hops pass is itself a function of the key, so it is decided once per key. The channel count
(:func:`~simtrain.network.channels.channel_count`) and the tuner's candidates
(:func:`~simtrain.network.algorithms.candidates`: block sizes and NVSwitch nodes) are functions of
the key too, and are shared unconditionally. Bounds and NCCL's tuning shape keep their own
per-group parts (the fabric latency between the first two nodes' first GPUs).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence, cast

import numpy as np

from simtrain.network.algorithms import REGISTRY, CollectiveAlgorithm, candidates, hop_arrays
from simtrain.network.channels import channel_count, node_blocks
from simtrain.network.phases import hops_time
from simtrain.topology.routing.link_ids import member_links
from simtrain.topology.routing.router import Router

#: the algorithms whose hops read only which members share a node and the channel count
SHAPED = ("ring", "tree")
#: A group's key (module docstring): numbers, byte strings and shapes, compared as a whole.
GroupKey = tuple[object, ...]
#: A one-node collective's key (:func:`same_node_key`): (op, bytes, the node's kind, local GPUs).
NodeKey = tuple[str, float, tuple[object, ...], tuple[int, ...]]


def _numbered(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value's number by first appearance in ``values`` (row-major; -1 stays -1), and the
    distinct values in order of first appearance."""
    flat = values.ravel()
    uniq, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[order] = np.arange(len(uniq))
    labels = rank[inverse.ravel()]
    labels[flat < 0] = -1
    return labels.reshape(values.shape), uniq[order]


class GroupShapes:
    """Keys of groups on ``router``'s cluster and what is shared under them (module docstring);
    ``hits`` and ``misses`` count :meth:`hop_cost`'s shared and computed costs."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self._keys: dict[tuple[int, ...], GroupKey | None] = {}
        self._kinds: dict[tuple[object, ...], int] = {}  # node kind -> its number
        self._costs: dict[tuple[str, str, GroupKey], tuple[float, float] | None] = {}  # (op, algo, key) -> cost
        self._shared: dict[tuple[object, ...], object] = {}  # ("channels" | "candidates", ..., key) -> value
        self.hits = 0
        self.misses = 0

    def key(self, gpus: tuple[int, ...]) -> GroupKey | None:
        """The group's key (module docstring), once per group; None where it has none."""
        if gpus not in self._keys:
            self._keys[gpus] = self._key(gpus)
        return self._keys[gpus]

    def hop_cost(self, op: str, algo: str, gpus: tuple[int, ...]) -> tuple[float, float] | None:
        """:func:`~simtrain.network.algorithms.hop_cost` of ``algo`` doing ``op`` (normalised) on
        ``gpus``, computed once per key where the hops allow (module docstring)."""
        key = self.key(gpus) if algo in SHAPED else None
        cached = self._costs.get((op, algo, key), False) if key is not None else None
        if cached:
            self.hits += 1
            return cast("tuple[float, float]", cached)  # (a cost: the store holds no True)
        hops = hop_arrays(op, algo, gpus, self.router, REGISTRY)
        if hops is None:
            return None
        cost = (hops_time(*hops, self.router), 0.0)  # one phase, latency 0, as hop_cost
        if key is not None and cached is False:  # first of its key
            self.misses += 1
            self._costs[(op, algo, key)] = cost if self._shareable(hops[0], hops[1]) else None
        return cost

    def channels(self, gpus: tuple[int, ...]) -> int:
        """:func:`~simtrain.network.channels.channel_count` of the group, once per key."""
        key = ("channels", self.key(gpus))
        out = self._shared.get(key) if key[1] is not None else None
        if out is None:
            out = channel_count(node_blocks(gpus, self.router.cluster), self.router)
            if key[1] is not None:
                self._shared[key] = out
        return cast(int, out)  # what channel_count gave for the key

    def candidates(self, op: str, gpus: tuple[int, ...], nvls: bool) -> list[str]:
        """:func:`~simtrain.network.algorithms.candidates` of the group (of :data:`REGISTRY`),
        once per key."""
        key = ("candidates", op, nvls, self.key(gpus))
        out = self._shared.get(key) if key[3] is not None else None
        if out is None:
            out = candidates(op, gpus, self.router.cluster, nvls, REGISTRY)
            if key[3] is not None:
                self._shared[key] = out
        return list(cast("list[str]", out))  # what candidates gave for the key

    def _key(self, gpus: tuple[int, ...]) -> GroupKey | None:
        router = self.router
        cluster = router.cluster
        n = len(gpus)
        if not router.structural or cluster.spec is None or n < 2 or any(g.__class__ is not int for g in gpus):
            return None
        arr = np.fromiter(gpus, dtype=np.int64, count=n)
        gpn = cluster.gpus_per_node
        if arr.min() < 0 or arr.max() >= cluster.num_gpus or arr.min() // gpn == arr.max() // gpn:
            return None  # a bad GPU (priced alone, to name it), or one node
        ids = router.link_ids()
        fabric = ids.fabric_table()
        if fabric is None:
            return None
        node, nodes = _numbered(arr // gpn)
        own, leaf, nic = member_links(ids, arr)
        if len(nodes) < 2 or leaf.min() < 0:
            return None
        leaf_no, leaves = _numbered(leaf)
        nic_no = _numbered(nic)[0]
        used = np.unique(node[nic >= 0] * (n + 1) + nic_no[nic >= 0])  # (node, NIC) pairs
        if len(leaves) > 1 and int(np.bincount(used // (n + 1), minlength=len(nodes)).min()) > 1:
            return None  # several channels across leaves: their ECMP picks may meet on a spine link
        cap = router.link_ids().capacity()
        own_caps = np.where(own >= 0, cap[np.maximum(own, 0)], -1.0)
        pod_no, pods = _numbered(fabric["pod"][leaves])
        fabric_caps = [cap[fabric[t][leaves]] for t in ("up", "down")] + \
            [cap[fabric[t][pods]] for t in ("to_core", "from_core")]
        per_node, kinds = np.bincount(node), router.node_routes.kind
        multi = np.flatnonzero(per_node > 1)  # the nodes holding two or more members, with their kinds
        node_kinds = (multi.tobytes(), tuple(self._kinds.setdefault(kinds(v), len(self._kinds))
                                             for v in nodes[multi].tolist()))
        names = cluster.graph._node  # the graph's nodes (a plain dict): which have an NVSwitch
        switches = bytes(f"node{v}/nvswitch" in names for v in nodes.tolist())
        local = np.where(per_node[node] > 1, arr % gpn, -1)  # where routes inside a node read it
        return (n, node.tobytes(), local.tobytes(), nic_no.tobytes(), _numbered(own)[0].tobytes(),
                own_caps.tobytes(), leaf_no.tobytes(), pod_no.tobytes(), fabric_caps[0].shape,
                fabric_caps[2].shape, *(c.tobytes() for c in fabric_caps), node_kinds, switches)

    def _shareable(self, src: np.ndarray, dst: np.ndarray) -> bool:
        """Whether the cost of hops ``src -> dst`` holds for every group of their key: the
        conditions (3) of the module docstring."""
        router = self.router
        ids, gpn, routes = router.link_ids(), router.cluster.gpus_per_node, router.node_routes
        inside = src // gpn == dst // gpn
        local = np.unique(np.stack([src[inside] // gpn, src[inside] % gpn, dst[inside] % gpn], axis=1), axis=0)
        if any(routes.switch(routes.kind(v), i, j) != "nvswitch" for v, i, j in local.tolist()):
            return False
        fabric = cast("dict[str, Any]", ids.fabric_table())  # a group with a key has one (_key)
        la, lb = member_links(ids, src[~inside])[1], member_links(ids, dst[~inside])[1]
        pa, pb = fabric["pod"][la], fabric["pod"][lb]
        even = (la == lb) | (fabric["even_up"][la] & fabric["even_down"][lb] & ((pa == pb) | (
            fabric["even_to_core"][pa] & fabric["even_from_core"][pb])))  # LinkIds' own middles
        cross, far = la != lb, pa != pb
        return bool(even.all()) and all(len(v) == 0 or int(np.bincount(v).max()) <= 1
                                        for v in (la[cross], lb[cross], pa[far], pb[far]))


def same_node_key(router: Router, registry: Mapping[str, CollectiveAlgorithm], op: str, gpus: tuple[int, ...],
                  nbytes: float) -> NodeKey | None:
    """For a ring-family collective on two or more GPUs of one node: (op, bytes, the node's
    kind, the GPUs' local numbers), under which the price is the same on every node of that
    kind once the ring's routes are learned for it (:mod:`simtrain.topology.routing.node_routes`): the
    candidates there are the ring and NVLS (trees and hierarchical need two nodes), the ring's
    links are its learned routes' and NVLS's each GPU's link to its NVSwitch, with the
    capacities the kind lists, and their latencies come from the group's shape (one node: no
    fabric latency), the same on every node. None otherwise."""
    if op not in ("all_reduce", "all_gather", "reduce_scatter") or len(gpus) < 2 \
            or registry is not REGISTRY or not router.structural:
        return None
    cluster = router.cluster
    gpn = cluster.gpus_per_node
    if any(g.__class__ is not int for g in gpus):
        return None
    node = gpus[0] // gpn
    if not 0 <= node < cluster.num_nodes or any(g // gpn != node for g in gpus):
        return None
    return (op, nbytes, router.node_routes.kind(node), tuple(g - node * gpn for g in gpus))


def ring_learned(router: Router, kind: tuple[object, ...], local: Sequence[int]) -> bool:
    """Whether every hop of the ring over local GPUs ``local`` follows a route learned for
    nodes of ``kind``."""
    routes = router.node_routes
    return all(routes.reused(kind, a, b) for a, b in zip(local, tuple(local[1:]) + tuple(local[:1])))
