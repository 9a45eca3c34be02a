"""The links of many routes at once, as integer ids: what a collective over a whole cluster needs
to find its busiest link without building a route per pair of GPUs.

A ring or a tree over 100,000 GPUs has about two million hops. Their routes follow from a few
tables (:class:`~simtrain.topology.routing.router.Router`, module docstring there): across two nodes of a
fabric built from a spec, a route is the source GPU's head (GPU -> NIC -> leaf), one of the two
leaves' equal-cost middles picked by ECMP, and the destination's tail (leaf -> NIC -> GPU); inside
a node it crosses the one switch the router learned for that pair of local GPUs on nodes of that
kind (:mod:`simtrain.topology.routing.node_routes`). :meth:`LinkIds.route_links` reads the heads, tails
and learned switches per GPU and the middles from the fabric's structure (2 tiers: leaf -> spine
``s`` -> leaf; 3 tiers: through spine ``s`` of one pod, or through core ``c`` and spine
``c % spines`` of both pods), with the router's ECMP choice: the ``crc32(f"{src}-{dst}")``-th of
the middles in sorted order, which is the router's choice whenever all middles are equally wide,
so only where each of the two leaves' links to their spines (and each of the two pods' links to
the cores) have one capacity. Every other route (other fabrics, middles through a degraded link,
routes searched after a failed link, ties) is the router's own. The links are the
router's, bit for bit, and so are the bottlenecks and latencies :meth:`LinkIds.route_costs` sums
from them for many sends at once; the tests compare both on every preset.
"""

from __future__ import annotations

import zlib
from itertools import chain
from typing import Any

import numpy as np

from simtrain.topology.build import paused_gc, plain_adjacency
from simtrain.topology.routing.tables import first_nic, nic_port

Link = tuple[str, str]
WIDTH = 8  # links of the longest route from the tables: GPU, NIC, leaf, spine, core, spine, leaf, NIC, GPU


class LinkIds:
    """Integer ids for the links of ``router`` (a :class:`~simtrain.topology.routing.router.Router`) and
    the links of many routes at once (module docstring); :meth:`capacity` gives their
    ``capacity_Bps`` by id."""

    def __init__(self, router: Any) -> None:
        self.router = router
        edges = router._static()[0]  # (u, v) -> (capacity_Bps, latency_s), every directed edge
        with paused_gc():  # a million new tuples, none in a cycle
            self._ids: dict[Link, int] = dict(zip(edges, range(len(edges))))
        self._capacity = np.fromiter(edges.column("capacity_Bps"), dtype=float, count=len(edges))
        # a route's link ids: 4-byte where they fit (2.4 million routes of 8 links on 131,072 GPUs)
        self._id_type = np.int32 if len(edges) < 2**31 else np.int64
        n = router.cluster.num_gpus
        self._known = np.zeros(n, dtype=bool)
        self._head = np.full((n, 2), -1, dtype=np.int64)  # GPU -> NIC, NIC -> leaf
        self._tail = np.full((n, 2), -1, dtype=np.int64)  # leaf -> NIC, NIC -> GPU
        self._leaf = np.full(n, -1, dtype=np.int64)  # index of the leaf the GPU's NIC hangs off
        self._nvswitch = np.full((n, 2), -1, dtype=np.int64)  # GPU -> its node's NVSwitch and back
        self._nic = np.full(n, -1, dtype=np.int64)  # nic_numbers
        self._nic_names: dict[str, int] = {}
        self._fabric: dict[str, Any] | None = None
        self._latency: np.ndarray | None = None  # latency_s by link id
        self._node_latency: np.ndarray | None = None  # latency_s of the node each link enters

    def id(self, link: Link) -> int:
        """The id of ``link`` (a directed edge of the graph): its position among the edges."""
        return self._ids[link]

    def capacity(self) -> np.ndarray:
        """``capacity_Bps`` of every link, by id (read only)."""
        return self._capacity

    def nic_numbers(self, gpus: np.ndarray) -> np.ndarray:
        """A number per GPU of ``gpus`` (valid GPU numbers) naming its NIC
        (:meth:`Router.nic_of <simtrain.topology.routing.router.Router.nic_of>`) among the cluster's NICs,
        -1 for none: two GPUs have the same number iff they use one NIC."""
        self._learn(gpus)
        return self._nic[gpus]

    def route_links(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The links of the routes from ``src[k]`` to ``dst[k]`` (GPU numbers): their ids and the
        index ``k`` of the route of each, routes in order, each route's links in path order."""
        rows = self.routes(src, dst)
        mask = rows >= 0
        # the row of each link (row-major, as ``rows[mask]`` lists them), without the column
        # indices a two-dimensional ``np.nonzero`` would also allocate
        return rows[mask], np.repeat(np.arange(len(rows)), np.count_nonzero(mask, axis=1))

    def routes(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Per route from ``src[k]`` to ``dst[k]``, the ids of its links in path order, gaps
        (-1) anywhere: a row per route (int32 where every id fits)."""
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        self._learn(src)
        self._learn(dst)
        rows = np.full((len(src), WIDTH), -1, dtype=self._id_type)
        done = np.zeros(len(src), dtype=bool)
        gpn = self.router.cluster.gpus_per_node
        same = src // gpn == dst // gpn
        if self.router.structural:
            done |= self._inside(src, dst, same, rows)
            done |= self._across(src, dst, ~same, rows)
        rest = [(k, tuple(self.id(e) for e in self.router.links(int(src[k]), int(dst[k]))))
                for k in np.flatnonzero(~done).tolist()]
        longest = max((len(ids) for _, ids in rest), default=0)
        if longest > WIDTH:  # a route longer than the tables' (a graph built by hand)
            rows = np.pad(rows, ((0, 0), (0, longest - WIDTH)), constant_values=-1)
        for k, ids in rest:
            rows[k, :len(ids)] = ids
        return rows

    def route_costs(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per route from ``src[k]`` to ``dst[k]`` (``src != dst``), its bottleneck bandwidth and
        its latency, bit for bit as :meth:`Router.bandwidth <simtrain.topology.routing.router.Router.bandwidth>`
        and :meth:`Router.latency <simtrain.topology.routing.router.Router.latency>` give them: the
        links' latencies added in path order, then the latencies of the nodes between them."""
        rows = self.routes(src, dst)
        if self._latency is None:
            edges, node_lat = self.router._static()[:2]
            self._latency = np.fromiter(edges.column("latency_s"), dtype=float, count=len(edges))
            heads = chain.from_iterable(edges.out_nodes())  # each edge's second node, in edge order
            self._node_latency = np.fromiter(map(node_lat.__getitem__, heads), dtype=float, count=len(edges))
        valid = rows >= 0
        safe = np.where(valid, rows, 0)
        bandwidth = np.where(valid, self._capacity[safe], np.inf).min(axis=1)
        last = rows.shape[1] - 1 - np.argmax(valid[:, ::-1], axis=1)  # each route's last link
        links, nodes = np.zeros(len(rows)), np.zeros(len(rows))
        for col in range(rows.shape[1]):  # in path order, gaps adding 0.0; nodes: those links enter, but the last
            links = links + np.where(valid[:, col], self._latency[safe[:, col]], 0.0)
            nodes = nodes + np.where(valid[:, col] & (col < last), self._node_latency[safe[:, col]], 0.0)
        return bandwidth, links + nodes

    def _learn(self, gpus: np.ndarray) -> None:
        """Learn the GPUs of ``gpus`` not yet known (:meth:`_learn_gpus`)."""
        new = gpus[~self._known[gpus]]
        if len(new):
            self._learn_gpus(np.unique(new))

    def _learn_gpus(self, new: np.ndarray) -> None:
        """Head, tail, leaf, NVSwitch links and NIC of GPUs ``new`` (distinct, not yet known),
        each from the router's tables; on a uniform cluster from one node's, renamed
        (:func:`_renamed`)."""
        gpn = self.router.cluster.gpus_per_node
        if self.router.cluster.uniform and len(new) > gpn:
            self._store(new, *_renamed(self, int(new[0]) // gpn, new))
        else:
            self._store(new, *_read(self, new.tolist()))

    def _store(self, new: np.ndarray, head: list[int], tail: list[int], leaf: list[int], nvswitch: list[int],
               nics: list[int]) -> None:
        self._head[new] = np.array(head, dtype=np.int64).reshape(-1, 2)
        self._tail[new] = np.array(tail, dtype=np.int64).reshape(-1, 2)
        self._leaf[new] = leaf
        self._nvswitch[new] = np.array(nvswitch, dtype=np.int64).reshape(-1, 2)
        self._nic[new] = nics
        self._known[new] = True

    def _inside(self, src: np.ndarray, dst: np.ndarray, same: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Fill the rows of routes inside one node that cross its NVSwitch, as learned for the
        node's kind; the routes filled."""
        done = np.zeros(len(src), dtype=bool)
        gpn = self.router.cluster.gpus_per_node
        nodes = src // gpn
        cand = same & (self._nvswitch[src, 0] >= 0) & (self._nvswitch[dst, 1] >= 0)
        if not cand.any():
            return done
        node_routes = self.router.node_routes
        idx = np.flatnonzero(cand)
        node_kind = np.full(self.router.cluster.num_nodes, -1, dtype=np.int64)
        kinds: dict[tuple, int] = {}
        present = np.flatnonzero(np.bincount(nodes[idx]))  # the nodes, without a sort
        if self.router.cluster.uniform:  # every node has the first one's kind (NodeRoutes.kind)
            kinds[node_routes.kind(int(present[0]))] = 0
            node_kind[present] = 0
        else:
            for n in present.tolist():
                node_kind[n] = kinds.setdefault(node_routes.kind(n), len(kinds))
        key = (node_kind[nodes[idx]] * gpn + src[idx] % gpn) * gpn + dst[idx] % gpn
        example = np.full(len(kinds) * gpn * gpn, -1, dtype=np.int64)
        example[key] = idx  # a route of each (kind, local source, local destination)
        through = np.zeros(len(example), dtype=bool)
        for c in np.flatnonzero(example >= 0).tolist():
            a, b = int(src[example[c]]), int(dst[example[c]])
            self.router.route(a, b)  # learns the route for the node's kind where it can be reused
            node = a // gpn
            switch = node_routes.switch(node_routes.kind(node), a - node * gpn, b - node * gpn)
            through[c] = switch == "nvswitch"
        hit = idx[through[key]]
        rows[hit, 0] = self._nvswitch[src[hit], 0]
        rows[hit, 1] = self._nvswitch[dst[hit], 1]
        done[hit] = True
        return done

    def _across(self, src: np.ndarray, dst: np.ndarray, apart: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Fill the rows of routes between two nodes whose GPUs have NICs under leaves, where the
        fabric's structure gives the middles and they are equally wide; the routes filled."""
        done = np.zeros(len(src), dtype=bool)
        fabric = self.fabric_table()
        cand = apart & (self._leaf[src] >= 0) & (self._leaf[dst] >= 0)
        if fabric is None or not cand.any():
            return done
        idx = np.flatnonzero(cand)
        la, lb = self._leaf[src[idx]], self._leaf[dst[idx]]
        pa, pb = fabric["pod"][la], fabric["pod"][lb]
        # the router's ECMP choice where all of a pair's middles are equally wide: the leaves' (and
        # pods') links to their spines (and cores) each of one capacity; elsewhere the router's own
        even = (la == lb) | (fabric["even_up"][la] & fabric["even_down"][lb] & ((pa == pb) | (
            fabric["even_to_core"][pa] & fabric["even_from_core"][pb])))
        idx, la, lb, pa, pb = idx[even], la[even], lb[even], pa[even], pb[even]
        a, b = src[idx], dst[idx]
        rows[idx, 0:2] = self._head[a]
        rows[idx, 6:8] = self._tail[b]
        crc = np.zeros(len(idx), dtype=np.int64)  # ECMP picks a middle where the leaves differ
        apart = np.flatnonzero(la != lb)
        crc[apart] = [zlib.crc32(f"{s}-{d}".encode()) for s, d in zip(a[apart].tolist(), b[apart].tolist())]
        spines = fabric["spines"]
        near = (la != lb) & (pa == pb)  # through one spine of their pod
        s = fabric["spine_order"][crc[near] % spines]
        rows[idx[near], 2] = fabric["up"][la[near], s]
        rows[idx[near], 3] = fabric["down"][lb[near], s]
        far = pa != pb  # through a core and a spine of each pod
        if far.any():
            c = fabric["core_order"][crc[far] % fabric["cores"]]
            s = c % spines
            rows[idx[far], 2] = fabric["up"][la[far], s]
            rows[idx[far], 3] = fabric["to_core"][pa[far], c]
            rows[idx[far], 4] = fabric["from_core"][pb[far], c]
            rows[idx[far], 5] = fabric["down"][lb[far], s]
        done[idx] = True
        return done

    def fabric_table(self) -> dict[str, Any] | None:
        """The fabric's link ids by leaf, pod, spine and core, the ECMP order; None: no such table."""
        if self._fabric is None:
            self._fabric = _fabric_table(self) or {}
        return self._fabric or None


def member_links(ids: LinkIds, gpus: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per GPU of ``gpus`` (valid GPU numbers): the ids of its six links beside its node (GPU ->
    NIC -> leaf and leaf -> NIC -> GPU as its routes take them, GPU -> NVSwitch -> GPU; -1 where
    it has none), the index of its NIC's leaf (-1: none) and its :meth:`LinkIds.nic_numbers`."""
    nics = ids.nic_numbers(gpus)  # learns them
    own = np.concatenate([ids._head[gpus], ids._tail[gpus], ids._nvswitch[gpus]], axis=1)
    return own, ids._leaf[gpus], nics


def _read(ids: LinkIds, new: list[int]) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """What :meth:`LinkIds._learn_gpus` learns per GPU of ``new``: head and tail links (two
    each), leaf index, NVSwitch links (two), NIC number, read from the router's tables (flat lists)."""
    router = ids.router
    attrs, link, known = router.cluster.graph._node, ids._ids.__getitem__, ids._ids
    ports, anchor = router._static()[3:5]
    gpn = router.cluster.gpus_per_node
    adj, numbers = plain_adjacency(router.cluster.graph), ids._nic_names
    head, tail, leaf, nvswitch, nics = [], [], [], [], []  # type: ignore[var-annotated]
    for g in new:
        gid = f"gpu{g}"
        channel_nic = first_nic(gid, adj, attrs)  # Router.nic_of
        nics.append(-1 if channel_nic is None else numbers.setdefault(channel_nic, len(numbers)))
        port = nic_port(gid, ports, anchor)  # the NIC its routes leave by (Router._nic_port)
        nic, lf = port if port is not None else (None, None)
        if lf is not None and attrs[lf]["kind"] == "leaf":
            head += (link((gid, nic)), link((nic, lf)))
            tail += (link((lf, nic)), link((nic, gid)))
            leaf.append(attrs[lf]["index"])
        else:
            head += (-1, -1)
            tail += (-1, -1)
            leaf.append(-1)
        sw = f"node{g // gpn}/nvswitch"
        nvswitch += (link((gid, sw)), link((sw, gid))) if (gid, sw) in known else (-1, -1)
    return head, tail, leaf, nvswitch, nics


def _renamed(ids: LinkIds, node: int, new: np.ndarray) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """:func:`_read` of GPUs ``new`` of a uniform cluster, from what it read on ``node``:
    every node has the same GPUs, NVSwitch and NICs, named by their node, so local GPU ``i`` of any
    node has the channel NIC, the NIC its routes leave by and the NVSwitch link of local GPU ``i``
    of ``node``, renamed; each link's id, each NIC's leaf (the switch its tables route it from)
    and that leaf's index are looked up under the new names as :func:`_read` does."""
    router = ids.router
    graph, gpn, numbers = router.cluster.graph, router.cluster.gpus_per_node, ids._nic_names
    attrs, adj, (ports, anchor) = graph._node, plain_adjacency(graph), router._static()[3:5]
    cut, sw = len(f"node{node}/"), f"node{node}/nvswitch"
    channel, port, switch = [], [], []
    for g in range(node * gpn, (node + 1) * gpn):
        nic = first_nic(f"gpu{g}", adj, attrs)
        channel.append(None if nic is None else nic[cut:])
        found = nic_port(f"gpu{g}", ports, anchor)
        port.append(None if found is None or attrs[found[1]]["kind"] != "leaf" else found[0][cut:])
        switch.append((f"gpu{g}", sw) in ids._ids)
    n_of, i_of = (new // gpn).tolist(), (new % gpn).tolist()
    gids = [f"gpu{g}" for g in new.tolist()]
    if all(p is not None for p in port):
        nics = [-1 if channel[i] is None else numbers.setdefault(f"node{n}/{channel[i]}", len(numbers))
                for n, i in zip(n_of, i_of)]
        nic_names = [f"node{n}/{port[i]}" for n, i in zip(n_of, i_of)]
        leaves = [anchor[nic][0] for nic in nic_names]
        if all(attrs[lf]["kind"] == "leaf" for lf in leaves):
            link = ids._ids.__getitem__
            up = list(map(link, zip(gids, nic_names))), list(map(link, zip(nic_names, leaves)))
            down = list(map(link, zip(leaves, nic_names))), list(map(link, zip(nic_names, gids)))
            head = [x for pair in zip(*up) for x in pair]
            tail = [x for pair in zip(*down) for x in pair]
            leaf = [attrs[lf]["index"] for lf in leaves]
            if all(switch) or not any(switch):
                return head, tail, leaf, _nvswitch_links(ids, gids, n_of, all(switch)), nics
    return _read(ids, new.tolist())  # GPUs without NICs under leaves: read each


def _nvswitch_links(ids: LinkIds, gids: list[str], nodes: list[int], has_switch: bool) -> list[int]:
    """GPU -> NVSwitch and back, flat, per GPU of ``gids`` (on ``nodes``); -1 without one."""
    if not has_switch:
        return [-1] * (2 * len(gids))
    link = ids._ids.__getitem__
    switches = [f"node{n}/nvswitch" for n in nodes]
    out = list(map(link, zip(gids, switches))), list(map(link, zip(switches, gids)))
    return [x for pair in zip(*out) for x in pair]


def _fabric_table(ids: LinkIds) -> dict[str, Any] | None:
    cluster = ids.router.cluster
    spec = cluster.spec
    if spec is None or spec.fabric.kind == "none":
        return None
    fb, edges = spec.fabric, ids.router._static()[0]
    leaves, spines, three = spec.num_leaves, fb.spines, fb.tiers == 3
    pods = spec.num_pods if three else 1
    cores = fb.cores if three else 0
    pod = np.array([cluster.graph.nodes[f"leaf{lf}"]["pod"] for lf in range(leaves)], dtype=np.int64)

    def spine(p: int, s: int) -> str:
        return f"pod{p}/spine{s}" if three else f"spine{s}"

    tiers: list[list[Link]] = [[], [], [], []]
    for lf in range(leaves):
        for s in range(spines):
            tiers[0].append((f"leaf{lf}", spine(int(pod[lf]), s)))
            tiers[1].append((spine(int(pod[lf]), s), f"leaf{lf}"))
    for p in range(pods):
        for c in range(cores):
            tiers[2].append((spine(p, c % spines), f"core{c}"))
            tiers[3].append((f"core{c}", spine(p, c % spines)))
    if any(e not in edges for tier in tiers for e in tier):
        return None  # a link taken out: the router searches the graph
    table = [np.array([ids.id(e) for e in tier], dtype=np.int64) for tier in tiers]
    up, down = table[0].reshape(leaves, spines), table[1].reshape(leaves, spines)
    to_core, from_core = table[2].reshape(pods, cores), table[3].reshape(pods, cores)

    def even(links: np.ndarray) -> np.ndarray:  # per row: all its links of one capacity
        caps = ids.capacity()[links]
        return (caps == caps[:, :1]).all(axis=1)

    return {
        "spines": spines, "cores": cores, "pod": pod, "up": up, "down": down, "to_core": to_core,
        "from_core": from_core, "even_up": even(up), "even_down": even(down), "even_to_core": even(to_core),
        "even_from_core": even(from_core),
        # the router sorts the middles by name: spine10 before spine2
        "spine_order": np.array(sorted(range(spines), key=lambda s: f"spine{s}"), dtype=np.int64),
        "core_order": np.array(sorted(range(cores), key=lambda c: (f"spine{c % spines}", f"core{c}")),
                               dtype=np.int64),
    }
