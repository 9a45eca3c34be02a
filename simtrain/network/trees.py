"""NCCL's tree and NVLink SHARP all-reduces as phases of flows.

NCCL pipelines both, so each is one phase whose flows all run at once (the steady state of the
pipeline: reduction and broadcast overlap, one link direction each); their latency comes from
NCCL's tuning model (:mod:`simtrain.network.nccl_protocols`). Channels and heads as in
:mod:`simtrain.network.channels`: channel ``c`` of a node is carried across nodes by its head,
the member at position ``floor(c k / C)``, on that member's NIC.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable, Sequence, cast

import numpy as np

from simtrain.network.channels import Hop, HopArrays, channel_count, heads, hop_list, node_blocks
from simtrain.network.links import Link
from simtrain.network.phases import Flow, Phase
from simtrain.topology.routing.router import Router


def _btree_parent(rank: int, n: int) -> int:
    """NCCL ``ncclGetBtree`` (src/graph/trees.cc): the parent of ``rank``, -1 for the root 0."""
    if rank == 0:
        return -1
    bit = 1
    while bit < n and not bit & rank:
        bit <<= 1
    up = (rank ^ bit) | (bit << 1)
    return rank ^ bit if up >= n else up


def dtree_parents(n: int) -> tuple[list[int], list[int]]:
    """Parents in NCCL's two trees (``ncclGetDtree``): the second mirrors the first for even ``n``
    and shifts it by one for odd ``n``."""
    first = [_btree_parent(r, n) for r in range(n)]
    if n % 2:
        second = [-1 if (p := first[(r - 1) % n]) < 0 else (p + 1) % n for r in range(n)]
    else:
        second = [-1 if (p := first[n - 1 - r]) < 0 else n - 1 - p for r in range(n)]
    return first, second


@lru_cache(maxsize=8)
def _dtree_arrays(n: int) -> tuple[np.ndarray, np.ndarray]:
    first, second = dtree_parents(n)
    return np.array(first, dtype=np.int64), np.array(second, dtype=np.int64)


def _internode_tree(node_heads: Sequence[int] | np.ndarray, share: float) -> HopArrays:
    """Both of NCCL's trees over the nodes' heads, each carrying half of ``share``: every child
    sends to its parent (reduce) and every parent to its child (broadcast), child by child."""
    hs = np.asarray(node_heads, dtype=np.int64)
    src, dst = [], []
    for parents in _dtree_arrays(len(hs)):
        children = np.flatnonzero(parents >= 0)
        a, b = hs[children], hs[parents[children]]
        src.append(np.stack([a, b], axis=1).ravel())
        dst.append(np.stack([b, a], axis=1).ravel())
    src_all = np.concatenate(src)
    return src_all, np.concatenate(dst), np.full(len(src_all), share / 2)


def _chains(blocks: list[list[int]], grid: np.ndarray | None, channel: int, channels: int) -> HopArrays:
    """Channel ``channel``'s chain through each node's members from its head: per consecutive
    pair ``(a, b)``, ``b -> a`` (reduce toward the head) then ``a -> b`` (broadcast), ``1/C`` each.
    ``grid``: the blocks as one array where all have the same size, else None."""
    if grid is not None:
        chains = np.roll(grid, -(channel * grid.shape[1] // channels), axis=1)
        a, b = chains[:, :-1], chains[:, 1:]
        src, dst = np.stack([b, a], axis=2).ravel(), np.stack([a, b], axis=2).ravel()
    else:
        pairs = []
        for block in blocks:
            start = channel * len(block) // channels
            chain = block[start:] + block[:start]
            pairs += [p for a, b in zip(chain, chain[1:]) for p in ((b, a), (a, b))]
        src = np.array([p[0] for p in pairs], dtype=np.int64)
        dst = np.array([p[1] for p in pairs], dtype=np.int64)
    return src, dst, np.full(len(src), 1 / channels)


def _concat(parts: list[HopArrays]) -> HopArrays:
    return cast(HopArrays, tuple(np.concatenate([p[i] for p in parts]) for i in range(3)))  # the three columns


def _flows(hops: Iterable[Hop], nbytes: float, router: Router) -> tuple[Flow, ...]:
    """One flow per hop, unmerged: flows that share a link then all carry the same bytes, so the
    max-min fair flow model finishes them when their busiest link has carried its load, the time
    :func:`~simtrain.network.phases.phase_time` gives (two hops merged into one flow would get
    one fair share for two)."""
    return tuple((router.links(a, b), nbytes * share) for a, b, share in hops)


def tree_hops(gpus: Sequence[int], router: Router) -> HopArrays:
    """The hops of NCCL's tree all-reduce on ``gpus`` (:func:`tree_phases`) as arrays of
    sources, destinations and shares of the buffer, channel by channel: each node's chain, then
    the two trees over the channel's heads."""
    blocks = node_blocks(gpus, router.cluster)
    channels = channel_count(blocks, router)
    k = len(blocks[0])
    grid = np.array(blocks, dtype=np.int64) if all(len(b) == k for b in blocks) else None
    parts = []
    for c in range(channels):
        parts.append(_chains(blocks, grid, c, channels))
        node_heads = grid[:, c * k // channels] if grid is not None else [heads(b, channels)[c] for b in blocks]
        parts.append(_internode_tree(node_heads, 1 / channels))
    return _concat(parts)


def tree_unit_hops(op: str, gpus: Sequence[int], router: Router) -> HopArrays:
    """The flows of :func:`tree_phases` for one byte, as (sources, destinations, bytes)."""
    src, dst, share = tree_hops(gpus, router)
    return src, dst, 1.0 * share


def tree_phases(op: str, gpus: Sequence[int], nbytes: float, router: Router) -> list[Phase]:
    """NCCL's tree all-reduce across nodes (NVIDIA blog "Massively Scale Your Deep Learning
    Training with NCCL 2.4", 2019; double binary trees after Sanders, Speck and Traeff, Parallel
    Computing 2009): per channel, a chain through each node's members from its head (reduce toward
    the head, broadcast away from it, ``S/C`` each way per link), and NCCL's two binary trees
    (:func:`dtree_parents`) over the nodes' heads, each carrying ``S/(2C)`` up and down."""
    if len(gpus) <= 1 or nbytes <= 0:
        return []
    return [Phase(_flows(hop_list(tree_hops(gpus, router)), nbytes, router), 0.0, "tree")]


def nvls_factor(router: Router) -> float:
    """Bytes an NVLS flow costs per byte moved: the NVLink links' achievable rate over the rate
    multimem traffic reaches (``nvlink_efficiency / nvls_efficiency`` of the node)."""
    spec = router.cluster.spec
    return 1.0 if spec is None else spec.node.nvlink_efficiency / spec.node.nvls_efficiency


def _switch_hops(block: list[int], node_heads: list[int], nbytes: float, router: Router) -> list[Flow]:
    """One node's NVLS traffic: every member sends its whole buffer to the switch (the heads'
    ``multimem.ld_reduce`` reads) and receives the whole result (their ``multimem.st``
    multicast); each of the ``H`` heads receives and sends ``S/H`` (its reduced shard)."""
    cluster = router.cluster
    sw = f"node{cluster.node_of(block[0])}/nvswitch"
    load: dict[Link, float] = {}
    for g in block:
        gid = cluster.gpu_id(g)
        extra = nbytes / len(node_heads) if g in node_heads else 0.0
        for link in ((gid, sw), (sw, gid)):
            load[link] = load.get(link, 0.0) + nbytes + extra
    factor = nvls_factor(router)
    return [((link,), b * factor) for link, b in load.items()]


def nvls_phases(op: str, gpus: Sequence[int], nbytes: float, router: Router) -> list[Phase]:
    """All-reduce inside one NVSwitch node with NVLink SHARP (NCCL 2.17+): the switch reduces
    (``multimem.ld_reduce``) and multicasts (``multimem.st``): each GPU, a head for its own shard,
    sends ``(n+1)/n S`` to the switch and receives as much back, at the NVLS rate of the node
    (:func:`nvls_factor`). NVIDIA/nccl issue 1455 measures algbw 258 to 273 GB/s on 5 to 8 H100s,
    as ``n/(n+1)`` of one rate predicts."""
    if len(gpus) <= 1 or nbytes <= 0:
        return []
    return [Phase(tuple(_switch_hops(list(gpus), list(gpus), nbytes, router)), 0.0, "nvls")]


def nvls_tree_phases(op: str, gpus: Sequence[int], nbytes: float, router: Router) -> list[Phase]:
    """NCCL's NVLS tree all-reduce across nodes (NCCL 2.18+): inside each node NVLS reduces the
    buffer onto ``C`` heads (one per channel, ``S/C`` each) and multicasts the result back
    (:func:`nvls_phases`' traffic); across nodes each channel's heads all-reduce their shard on
    NCCL's two trees (:func:`tree_phases`' inter-node part)."""
    if len(gpus) <= 1 or nbytes <= 0:
        return []
    blocks = node_blocks(gpus, router.cluster)
    channels = channel_count(blocks, router)
    node_heads = [heads(block, channels) for block in blocks]
    flows: list[Flow] = []
    for block, hs in zip(blocks, node_heads):
        flows += _switch_hops(block, hs, nbytes, router)
    hops = _concat([_internode_tree([hs[c] for hs in node_heads], 1 / channels) for c in range(channels)])
    return [Phase(tuple(flows) + _flows(hop_list(hops), nbytes, router), 0.0, "nvls tree")]
