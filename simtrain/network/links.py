"""Link statistics of the flow fidelity, and the two views of them.

Per directed link: bytes carried, busy time, peak utilisation and (when recorded) the load over
time (:class:`LinkUsage`). Views: the ``links`` section of a run's report (:func:`link_report`)
and the most loaded links of one collective (:func:`summarize_links`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from simtrain.network.flow_layout import BUSY_S, BYTES, CAP, DELIVERED, HIST_LIMIT, N_HIST, N_HVALS, PEAK, RECORD
from simtrain.topology.cluster import Cluster

#: A link's load over time: the times of its steps (s) and its load from each (bytes/s, or a
#: fraction of its bandwidth), as two arrays of one length.
Samples = tuple[np.ndarray, np.ndarray]

Link = tuple[str, str]  # a directed edge (u, v) of the cluster graph
#: Link samples a recorded history keeps at most (:attr:`LinkUsage.history_limit`'s default)
HISTORY_SAMPLES = 2_000_000


def _widened(a: np.ndarray, used: int, size: int) -> np.ndarray:
    """``a`` with ``size`` columns (zeros beyond) and its first ``used`` copied: only those are
    written, so a large history grows at the cost of its data (concatenating the zeros wrote them
    all, 15 times slower at a million values)."""
    out = np.zeros(a.shape[:-1] + (size,), dtype=a.dtype)
    out[..., :used] = a[..., :used]
    return out


class LinkUsage:
    """Traffic statistics of the links ``edges`` (bandwidths ``capacity``, positions ``index``):
    bytes carried, time with traffic (busy) and peak utilisation per link; bytes and flows
    added and delivered overall; with ``record``, :attr:`history`: (time, the links whose summed
    rate changed, their new rates) after every recomputation that changed one, at most
    :attr:`history_limit` link samples.

    The per-link figures are rows of :attr:`ef` (:mod:`simtrain.network.flow_layout`), beside the
    flow model's summed rates, and the history lies in growable arrays: the flow model's compiled
    loop (:mod:`simtrain.network.flowcore`) writes both in place."""

    def __init__(self, edges: list[Link], index: dict[Link, int], capacity: np.ndarray,
                 record: bool = False) -> None:
        self.edges, self.index = edges, index
        self.ef = np.zeros((5, len(edges)))
        self.ef[CAP] = capacity
        self.us = np.zeros(1)  # bytes delivered
        self.bytes_added = 0.0
        self.flows_added = 0
        self.hst = np.array([0, 0, HISTORY_SAMPLES, int(record)], dtype=np.int64)
        # room for the whole history when recording: zeros the system hands out untouched, so
        # only the samples written take memory, and the arrays are not copied as they fill
        values = HISTORY_SAMPLES + 1024 if record else 1024
        self.ht = np.zeros(64)  # history: times (s)
        self.hmeta = np.zeros((2, 64), dtype=np.int64)  # history: offset and count of its links
        self.hlinks = np.zeros(values, dtype=np.int64)
        self.hrates = np.zeros(values)  # B/s

    capacity = property(lambda self: self.ef[CAP], doc="Each link's achievable bandwidth, B/s.")
    bytes = property(lambda self: self.ef[BYTES], doc="Bytes each link carried.")
    busy = property(lambda self: self.ef[BUSY_S], doc="Seconds each link carried traffic.")
    peak = property(lambda self: self.ef[PEAK], doc="Each link's peak utilisation (rate / capacity).")

    @property
    def bytes_delivered(self) -> float:
        return float(self.us[DELIVERED])

    @bytes_delivered.setter
    def bytes_delivered(self, value: float) -> None:
        self.us[DELIVERED] = value

    @property
    def history_limit(self) -> int:
        """Link samples the history may still take."""
        return int(self.hst[HIST_LIMIT])

    @history_limit.setter
    def history_limit(self, value: int) -> None:
        self.hst[HIST_LIMIT] = value

    @property
    def history(self) -> list[tuple[float, np.ndarray, np.ndarray]] | None:
        """(time, the links whose summed rate changed, their new rates) after every recomputation
        that changed one, in the order recorded; None when not recording."""
        if not self.hst[RECORD]:
            return None
        n = int(self.hst[N_HIST])
        return [(float(self.ht[i]), self.hlinks[o:o + c].copy(), self.hrates[o:o + c].copy())
                for i, (o, c) in enumerate(zip(self.hmeta[0, :n].tolist(), self.hmeta[1, :n].tolist()))]

    def make_room(self, entries: int, values: int) -> None:
        """Grow the history's arrays to hold ``entries`` more entries of ``values`` more links."""
        n, at = int(self.hst[N_HIST]), int(self.hst[N_HVALS])
        if n + entries > self.ht.size:
            size = max(2 * self.ht.size, n + entries)
            self.ht, self.hmeta = _widened(self.ht, n, size), _widened(self.hmeta, n, size)
        if at + values > self.hlinks.size:
            size = max(2 * self.hlinks.size, at + values)
            self.hlinks, self.hrates = _widened(self.hlinks, at, size), _widened(self.hrates, at, size)

    def remember(self, t: float, links: np.ndarray, rates: np.ndarray) -> None:
        """From ``t`` on ``links`` carry ``rates`` (kept when recording, within the limit)."""
        if not self.hst[RECORD] or self.hst[HIST_LIMIT] <= 0:
            return
        self.hst[HIST_LIMIT] -= links.size
        self._append(t, links, rates)

    def _append(self, t: float, links: np.ndarray, rates: np.ndarray) -> None:
        self.make_room(1, links.size)
        n, at = int(self.hst[N_HIST]), int(self.hst[N_HVALS])
        self.ht[n] = t
        self.hmeta[0, n], self.hmeta[1, n] = at, links.size
        self.hlinks[at:at + links.size] = links
        self.hrates[at:at + links.size] = rates
        self.hst[N_HIST], self.hst[N_HVALS] = n + 1, at + links.size

    def add_isolated(self, start_s: float, path: np.ndarray, nbytes: float) -> None:
        """A flow of ``nbytes`` that ran alone on the links ``path`` from ``start_s``, at the
        path's bottleneck bandwidth: bytes, busy time, peak and history as if the flow model
        had run it."""
        rate = float(self.capacity[path].min())
        busy = nbytes / rate
        self.bytes[path] += nbytes
        self.busy[path] += busy
        self.peak[path] = np.maximum(self.peak[path], rate / self.capacity[path])
        self.bytes_added += nbytes
        self.us[DELIVERED] += nbytes
        self.flows_added += 1
        if self.hst[RECORD] and self.hst[HIST_LIMIT] > 0:
            self.hst[HIST_LIMIT] -= 2 * path.size
            self._append(start_s, path, np.full(path.size, rate))
            self._append(start_s + busy, path, np.zeros(path.size))

    def stats(self) -> dict[Link, dict[str, float]]:
        """Per directed link that carried traffic: bytes, busy_s (time with rate > 0) and
        peak_utilisation (max rate / bandwidth), in link order."""
        used = np.flatnonzero((self.bytes > 0) | (self.peak > 0))
        return {self.edges[i]: {"bytes": float(self.bytes[i]), "busy_s": float(self.busy[i]),
                                "peak_utilisation": float(self.peak[i])} for i in used}

    def series(self, links: Sequence[Link], per: Sequence[float] | None = None) -> dict[Link, Samples]:
        """The steps of each link's load from :attr:`history`: (times in s, bytes/s) arrays, in
        time order (empty when not recorded); with ``per``, each link's rates divided by its
        number there (its bandwidth: utilisation). One pass over the history picks the samples of
        every link asked for; each link's are then sorted by time, stably (isolated flows are
        booked out of order)."""
        out: dict[Link, Samples] = {link: (np.zeros(0), np.zeros(0)) for link in links}
        n, at = int(self.hst[N_HIST]), int(self.hst[N_HVALS])
        if not self.hst[RECORD] or n == 0 or not links:
            return out
        wanted = np.full(len(self.edges), -1, dtype=np.int64)
        wanted[[self.index[link] for link in links]] = np.arange(len(links))
        which = wanted[self.hlinks[:at]]
        picked = np.flatnonzero(which >= 0)
        entry = np.searchsorted(self.hmeta[0, :n], picked, side="right") - 1  # the entry each sample belongs to
        times, rates, which = self.ht[entry], self.hrates[picked], which[picked]
        order = np.lexsort((times, which))  # by link, then time; ties as recorded
        times, rates, which = times[order], rates[order], which[order]
        if per is not None:
            rates = rates / np.asarray(per, dtype=np.float64)[which]
        bounds = np.searchsorted(which, np.arange(len(links) + 1)).tolist()
        for k, link in enumerate(links):
            out[link] = (times[bounds[k]:bounds[k + 1]], rates[bounds[k]:bounds[k + 1]])
        return out


def link_report(cluster: Cluster, usage: LinkUsage, step_s: float, represented: dict[Link, float] | None = None,
                top: int = 10) -> tuple[dict[str, Any], dict[str, Samples]]:
    """The ``links`` section of a run's report: per directed link that carried traffic, its
    bytes, busy time and mean utilisation over the step (of its achievable bandwidth,
    ``capacity_Bps``); the ``top`` most utilised listed first, and their utilisation over time
    for the trace's counter tracks. ``utilisation_by_link``, ``links_used`` and ``bytes_by_tier``
    also count the ``represented`` bytes per link: traffic of ranks a folded run stands for but
    does not run (``top`` lists only links whose flows ran)."""
    rows = []
    for (u, v), st in usage.stats().items():
        bw = cluster.graph.edges[u, v]["capacity_Bps"]
        rows.append({"link": f"{u}->{v}", "tier": cluster.graph.edges[u, v]["tier"], "bytes": st["bytes"],
                     "busy_s": st["busy_s"], "utilisation": st["bytes"] / (bw * step_s) if step_s > 0 else 0.0,
                     "peak_utilisation": st["peak_utilisation"], "_edge": (u, v), "_bw": bw})
    rows.sort(key=lambda r: (-r["utilisation"], r["link"]))
    raw = usage.series([r["_edge"] for r in rows[:top]], [r["_bw"] for r in rows[:top]])
    series = {r["link"]: raw[r["_edge"]] for r in rows[:top]}
    for r in rows:
        del r["_edge"], r["_bw"]
    by_tier: dict[str, float] = {}
    for r in rows:
        by_tier[r["tier"]] = by_tier.get(r["tier"], 0.0) + r["bytes"]
    util = {r["link"]: r["utilisation"] for r in rows}
    for (u, v), nbytes in (represented or {}).items():
        tier = cluster.graph.edges[u, v]["tier"]
        by_tier[tier] = by_tier.get(tier, 0.0) + nbytes
        name = f"{u}->{v}"
        util[name] = util.get(name, 0.0) + (nbytes / (cluster.graph.edges[u, v]["capacity_Bps"] * step_s)
                                            if step_s > 0 else 0.0)
    everything = dict(sorted(util.items()))
    return {"top": rows[:top], "links_used": len(everything), "bytes_by_tier": by_tier,
            "utilisation_by_link": everything}, series


def summarize_links(usage: LinkUsage, cluster: Cluster, elapsed_s: float,
                    top: int = 5) -> list[dict[str, Any]]:
    """The ``top`` links by time at full achievable bandwidth (bytes / ``capacity_Bps``), ties by
    name: line rate, achievable bandwidth, bytes, busy_s, peak and mean utilisation over
    ``elapsed_s``."""
    rows = []
    for (u, v), st in usage.stats().items():
        cap = cluster.graph.edges[u, v]["capacity_Bps"]
        rows.append((-st["bytes"] / cap, u, v, cap, st))
    rows.sort()
    out = []
    for neg, u, v, cap, st in rows[:top]:
        out.append({"link": f"{u} -> {v}", "tier": cluster.graph.edges[u, v]["tier"],
                    "bandwidth_Bps": cluster.graph.edges[u, v]["bandwidth_Bps"], "capacity_Bps": cap,
                    "bytes": st["bytes"], "busy_s": st["busy_s"],
                    "peak_utilisation": st["peak_utilisation"],
                    "mean_utilisation": (-neg / elapsed_s) if elapsed_s > 0 else 0.0})
    return out
