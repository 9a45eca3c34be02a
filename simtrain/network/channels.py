"""NCCL's channels: how a collective spreads over a node's NICs, rail by rail.

NCCL runs a ring or tree collective as ``C`` channels, each a ring (tree) of its own carrying
``1/C`` of the bytes (``src/graph/search.cc``, ``connect.cc``): across nodes, one channel per NIC
the group's GPUs use, so every NIC carries its share, and each channel enters and leaves a node
through a NIC of the same rail, so a rail-optimized fabric keeps it on one leaf (NVIDIA, "Doubling
all2all Performance with NCCL 2.12", 2022, on rails and PXN). Inside one node all channels share
each GPU's NVLink port, so their traffic is the ring's own.

The channel count of a group is the smallest number of distinct NICs its GPUs use on any of its
nodes (:func:`channel_count`). Channel ``c`` visits each node's members in their order, rotated to
start at position ``floor(c k / C) - i`` on the group's ``i``-th node (``k`` members): it leaves
node ``i`` from the member just before its entry, which has the same position, hence the same
NIC rail, as its entry on node ``i+1``. Every NIC of every node is entered by one channel and left
by one; only the hop closing the ring (last node to first) may change rails.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from simtrain.topology.cluster import Cluster
from simtrain.topology.routing.router import Router

Hop = tuple[int, int, float]  # (source GPU, destination GPU, share of the per-rank volume)
HopArrays = tuple[np.ndarray, np.ndarray, np.ndarray]  # sources, destinations, shares (or bytes) of hops


def node_blocks(gpus: Sequence[int], cluster: Cluster) -> list[list[int]]:
    """The group's GPUs by node, nodes in order of first appearance, GPUs in group order."""
    if len(gpus) >= _MANY and all(g.__class__ is int for g in gpus):
        arr = np.array(gpus, dtype=np.int64)
        if arr.min() >= 0 and arr.max() < cluster.num_gpus:
            return _sorted_blocks(arr, cluster.gpus_per_node)
    blocks: dict[int, list[int]] = {}
    for g in gpus:
        blocks.setdefault(cluster.node_of(g), []).append(g)
    return list(blocks.values())


_MANY = 256  # members from which a group is split by node with arrays


def _sorted_blocks(arr: np.ndarray, gpus_per_node: int) -> list[list[int]]:
    """:func:`node_blocks` of GPUs ``arr`` (all valid) with arrays: a stable sort by node keeps
    group order inside each node; nodes are then put in order of their first member."""
    nodes = arr // gpus_per_node
    order = np.argsort(nodes, kind="stable")
    cuts = (np.flatnonzero(np.diff(nodes[order])) + 1).tolist()
    members = arr[order].tolist()
    starts = [0] + cuts
    blocks = [members[a:b] for a, b in zip(starts, cuts + [len(members)])]
    first = order[starts]  # each node's first member's position in the group
    return blocks if bool(np.all(np.diff(first) > 0)) else [blocks[i] for i in np.argsort(first).tolist()]


def channel_count(blocks: list[list[int]], router: Router) -> int:
    """Channels across nodes: the fewest distinct NICs the group's GPUs use on one of its nodes
    (1 inside a node, or where a node has no NIC)."""
    if len(blocks) < 2:
        return 1
    sizes = [len(b) for b in blocks]
    gpus = np.fromiter((g for b in blocks for g in b), dtype=np.int64, count=sum(sizes))
    nics = router.link_ids().nic_numbers(gpus)  # distinct per NIC of the cluster, -1 for none
    block = np.repeat(np.arange(len(blocks)), sizes)
    pairs = np.unique(np.stack([block, nics], axis=1)[nics >= 0], axis=0)  # (node, NIC) used
    return max(1, int(np.bincount(pairs[:, 0], minlength=len(blocks)).min()))


def channel_order(block: list[int], channel: int, channels: int, node_index: int) -> list[int]:
    """The members of one node in the order channel ``channel`` visits them (module docstring)."""
    k = len(block)
    start = (channel * k // channels - node_index) % k
    return block[start:] + block[:start]


def ring_hops(gpus: Sequence[int], router: Router) -> list[Hop]:
    """The hops of a ring collective on ``gpus`` over all its channels: inside one node the ring
    ``g[i] -> g[i+1]`` (share 1 each); across nodes each channel's ring (module docstring), every
    hop with share ``1/C``, hops shared by several channels merged (:func:`ring_hop_arrays`)."""
    return hop_list(ring_hop_arrays(gpus, router))


def hop_list(hops: HopArrays) -> list[Hop]:
    """Hops given as arrays, as a list of (source, destination, share)."""
    return list(zip(hops[0].tolist(), hops[1].tolist(), hops[2].tolist()))


def ring_hop_arrays(gpus: Sequence[int], router: Router) -> HopArrays:
    """:func:`ring_hops` as arrays of sources, destinations and shares, built without a Python
    object per hop (a ring over 65,536 GPUs on 8 channels has half a million): the hops of every
    channel in order, then those with the same source and destination merged into the first, its
    share the sum of theirs (added in hop order)."""
    n = len(gpus)
    ring = np.asarray(gpus, dtype=np.int64)
    blocks = node_blocks(gpus, router.cluster)
    if len(blocks) == 1:
        return ring, np.roll(ring, -1), np.ones(n)
    channels = channel_count(blocks, router)
    rings = np.stack([channel_ring(blocks, c, channels) for c in range(channels)])
    src, dst = rings.ravel(), np.roll(rings, -1, axis=1).ravel()
    key = src * (int(rings.max()) + 1) + dst
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    shares = np.bincount(inverse.ravel(), weights=np.full(len(key), 1 / channels))  # adds in hop order
    order = np.argsort(first)
    return src[first[order]], dst[first[order]], shares[order]


def channel_ring(blocks: list[list[int]], channel: int, channels: int) -> np.ndarray:
    """The GPUs in the order channel ``channel`` visits them: each node's :func:`channel_order`,
    nodes in order."""
    k = len(blocks[0])
    if any(len(b) != k for b in blocks):
        return np.array([g for i, block in enumerate(blocks) for g in channel_order(block, channel, channels, i)],
                        dtype=np.int64)
    start = (channel * k // channels - np.arange(len(blocks))) % k
    return np.take_along_axis(np.array(blocks, dtype=np.int64), (start[:, None] + np.arange(k)) % k, axis=1).ravel()


def heads(block: list[int], channels: int) -> list[int]:
    """The member of one node that carries each channel across nodes (its NIC is the channel's):
    position ``floor(c k / C)`` for channel ``c``, the same position on every node."""
    return [block[c * len(block) // channels] for c in range(channels)]


def nic_index(router: Router, gpu: int) -> int | None:
    """The rail of GPU ``gpu``: the index of its NIC within its node, None without a NIC."""
    nic = router.nic_of(gpu)
    return None if nic is None else router.cluster.graph.nodes[nic]["index"]


def rail_members(gpus: Sequence[int], router: Router) -> dict[tuple[int, int], int]:
    """The first member of the group on each (node, rail), for :func:`pxn_relay`."""
    out: dict[tuple[int, int], int] = {}
    for g in gpus:
        rail = nic_index(router, g)
        if rail is not None:
            out.setdefault((router.cluster.node_of(g), rail), g)
    return out


def pxn_relay(src: int, dst: int, rails: dict[tuple[int, int], int], router: Router) -> int | None:
    """The GPU that relays a cross-rail send from ``src`` to ``dst`` on a rail-optimized fabric
    (NCCL's PXN, ``NCCL_P2P_PXN_LEVEL``, NCCL 2.12): the group's member on ``src``'s node served
    by a NIC of ``dst``'s rail (``rails`` from :func:`rail_members`); None when the send needs no
    relay (same node, same rail, another kind of fabric) or no member sits on that rail."""
    cluster = router.cluster
    if cluster.fabric_kind != "rail-optimized" or cluster.node_of(src) == cluster.node_of(dst):
        return None
    rail = nic_index(router, dst)
    if rail is None or nic_index(router, src) == rail:
        return None
    return rails.get((cluster.node_of(src), rail))
