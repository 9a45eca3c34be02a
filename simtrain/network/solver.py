"""Max-min fair flows on the directed links of the cluster graph (the ``flow`` network fidelity).

A *flow* moves bytes along a fixed path of directed edges ``(u, v)``; a *transfer* is a group of
flows the engine waits on as one unit (one phase of a collective, one point-to-point send). It
completes ``latency_s`` after its last flow delivered its last byte: the model handles latency
itself, so :meth:`FlowModel.advance` returns transfers that are fully done, latency included.

Rates are max-min fair over all active flows and the links' ``bandwidth_Bps``, computed by
progressive filling (water-filling): raise every unfrozen flow's rate together until some link
saturates, freeze the flows crossing it, repeat (Bertsekas and Gallager, "Data Networks", 2nd ed.
1992, section 6.5.2). Rates are recomputed whenever a flow starts or ends, lazily (once per instant
however many flows changed) and only on the connected component (flows linked through shared
links) that changed, since max-min allocations decompose over components; each recompute is
vectorised with numpy over the flow-link incidence pairs.

Engine protocol (the engine owns the clock; the model never schedules anything itself)::

    model.add(now, tid, [(links, nbytes), ...], latency_s)  # any number at the same instant
    t = model.next_event_s()   # earliest state change: a flow ends (rates change) or a transfer
                               # completes; None when idle. Any add() may move it earlier:
                               # compare model.version to drop stale wake-ups.
    done = model.advance(t)    # transfer ids complete at or before t, by (finish time, id)

``advance(now)`` processes every internal event up to ``now`` in order, so calling it late is
correct too; :attr:`FlowModel.finish_s` holds each transfer's exact completion time.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from simtrain.topology.cluster import Cluster

Link = tuple[str, str]
FlowSpec = tuple[Sequence[Link], float]  # (path as directed edges, bytes)

REL_TOL = 1e-9  # relative slack for "this flow is done" and for the capacity invariant


@dataclass(frozen=True)
class Phase:
    """Flows that run concurrently, then ``latency_s`` (added after the last byte); the phases of a
    collective run one after another."""

    flows: tuple[tuple[tuple[Link, ...], float], ...]
    latency_s: float = 0.0
    name: str = ""

    @property
    def nbytes(self) -> float:
        return float(sum(b for _, b in self.flows))


def max_min_rates(pair_flow: np.ndarray, pair_link: np.ndarray, capacity: np.ndarray,
                  num_flows: int) -> np.ndarray:
    """Max-min fair rates by progressive filling. ``pair_flow[i]`` crosses link ``pair_link[i]``
    (indices into ``range(num_flows)`` and ``capacity``); every flow must cross >= 1 link.

    Each round all unfrozen flows share one rate, the level; a link saturates when level *
    (unfrozen flows on it) reaches its capacity left by frozen flows; the smallest such level wins
    and the flows on the links reaching it (within REL_TOL, rounding down) freeze there.
    """
    nlinks = capacity.shape[0]
    rate = np.zeros(num_flows)
    frozen = np.zeros(num_flows, dtype=bool)
    load = np.zeros(nlinks)
    pf, pl = pair_flow, pair_link
    while pf.size:
        count = np.bincount(pl, minlength=nlinks)
        used = count > 0
        share = np.full(nlinks, np.inf)
        share[used] = np.maximum(capacity[used] - load[used], 0.0) / count[used]
        level = share.min()
        saturated = share <= level * (1 + REL_TOL)
        newly = pf[saturated[pl]]
        rate[newly] = level
        frozen[newly] = True
        gone = frozen[pf]
        load += level * np.bincount(pl[gone], minlength=nlinks)
        pf, pl = pf[~gone], pl[~gone]
    return rate


class FlowModel:
    """Active flows and their max-min rates on ``cluster.graph``; see the module docstring."""

    def __init__(self, cluster: Cluster) -> None:
        g = cluster.graph
        self.edges: list[Link] = sorted(g.edges())
        self.index = {e: i for i, e in enumerate(self.edges)}
        self.capacity = np.array([g.edges[e]["bandwidth_Bps"] for e in self.edges], dtype=float)
        nl = len(self.edges)
        self.link_rate = np.zeros(nl)  # current sum of flow rates per link
        self.link_bytes = np.zeros(nl)
        self.link_busy = np.zeros(nl)
        self.link_peak = np.zeros(nl)  # peak utilisation (rate / capacity)
        self._link_flows: list[set[int]] = [set() for _ in range(nl)]
        self._paths: dict[tuple[Link, ...], np.ndarray] = {}
        self._memo: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        n = 64  # flow slots, grown by doubling; freed slots are reused smallest first
        self.rem, self.rate, self.size = np.zeros(n), np.zeros(n), np.zeros(n)
        self.active = np.zeros(n, dtype=bool)
        self._flinks: list[np.ndarray | None] = [None] * n
        self._ftransfer = [-1] * n
        self._free = list(range(n))
        self._pairs = 0  # active flow-link pairs
        self._dirty: set[int] = set()  # links whose flows changed since the last recompute
        self._transfers: dict[int, list] = {}  # id -> [flows left, latency_s]
        self._latency: list[tuple[float, int]] = []  # (completion time, id), bytes already done
        self._pending: list[int] = []  # completed during add(), returned by the next advance()
        self.finish_s: dict[int, float] = {}
        self.now = 0.0
        self.version = 0  # bumped by every add(): a wake-up planned under another version is stale
        self.history: list[tuple[float, np.ndarray, np.ndarray]] | None = None  # set to [] to record
        self.history_limit = 2_000_000  # link-rate samples kept at most (then recording stops)
        self.bytes_added = 0.0
        self.bytes_delivered = 0.0
        self.flows_added = 0
        self.recomputes = 0

    # ---- public interface -----------------------------------------------------------------
    def add(self, now_s: float, transfer_id: int, flows: Iterable[FlowSpec],
            latency_s: float = 0.0) -> None:
        """Start transfer ``transfer_id`` at ``now_s`` (>= the model's clock): its flows begin now; it
        completes ``latency_s`` after the last byte. Flows with no link or no bytes end at once."""
        if transfer_id in self._transfers:
            raise ValueError(f"transfer {transfer_id} is already active")
        specs = [(links, float(nbytes)) for links, nbytes in flows]
        if any(not b >= 0 for _, b in specs):
            raise ValueError(f"transfer {transfer_id}: flow sizes must be >= 0")
        self._pending.extend(self._run_until(now_s))
        self.version += 1
        live = 0
        for links, nbytes in specs:
            self.bytes_added += nbytes
            self.flows_added += 1
            if nbytes == 0 or not links:
                self.bytes_delivered += nbytes
                continue
            self._start_flow(transfer_id, self._path(links), nbytes)
            live += 1
        self._transfers[transfer_id] = [live, float(latency_s)]
        if live == 0:
            self._bytes_done(transfer_id, self.now)
            self._pending.extend(self._pop_latency(self.now))

    def next_event_s(self) -> float | None:
        """The earliest time the state changes at current rates (a flow ends or a transfer
        completes); ``self.now`` if completions wait to be collected; None when idle."""
        if self._pending:
            return self.now
        self._settle()
        t = self._next_flow_end()
        if self._latency:
            t = min(t, self._latency[0][0])
        return None if t == np.inf else float(t)

    def advance(self, now_s: float) -> list[int]:
        """Run to ``now_s``; the ids of transfers complete by then, ordered by (finish time, id)."""
        done, self._pending = self._pending + self._run_until(now_s), []
        return done

    @property
    def active_flows(self) -> int:
        return int(self.active.sum())

    @property
    def active_transfers(self) -> int:
        return len(self._transfers)

    def link_stats(self) -> dict[Link, dict[str, float]]:
        """Per directed link that carried traffic: bytes, busy_s (time with rate > 0) and
        peak_utilisation (max rate / bandwidth), in link order."""
        used = np.flatnonzero((self.link_bytes > 0) | (self.link_peak > 0))
        return {self.edges[i]: {"bytes": float(self.link_bytes[i]), "busy_s": float(self.link_busy[i]),
                                "peak_utilisation": float(self.link_peak[i])} for i in used}

    def check_capacity(self) -> float:
        """Assert that no link carries more than its bandwidth (rates summed from scratch, with
        ``REL_TOL`` slack) and that the cached per-link rates agree; the max utilisation."""
        self._settle()
        load = np.zeros_like(self.capacity)
        for s in np.flatnonzero(self.active):
            np.add.at(load, self._flinks[s], self.rate[s])
        worst = int(np.argmax(load / self.capacity)) if load.size else 0
        if load.size and load[worst] > self.capacity[worst] * (1 + REL_TOL):
            raise AssertionError(f"link {self.edges[worst]} carries {load[worst]:.6g} B/s > "
                                 f"bandwidth {self.capacity[worst]:.6g} B/s")
        if not np.allclose(load, self.link_rate, rtol=1e-9, atol=1e-6):
            raise AssertionError("cached per-link rates disagree with the flows' rates")
        return float(load[worst] / self.capacity[worst]) if load.size else 0.0

    # ---- flows ----------------------------------------------------------------------------
    def _path(self, links: Sequence[Link]) -> np.ndarray:
        key = tuple(links)
        arr = self._paths.get(key)
        if arr is None:
            try:
                arr = np.array([self.index[tuple(e)] for e in key], dtype=np.int64)
            except KeyError as exc:
                raise ValueError(f"flow path uses a link not in the graph: {exc.args[0]}") from None
            self._paths[key] = arr
        return arr

    def _start_flow(self, tid: int, links: np.ndarray, nbytes: float) -> None:
        if not self._free:
            self._grow()
        s = heapq.heappop(self._free)
        self.rem[s] = self.size[s] = nbytes
        self.rate[s] = 0.0
        self.active[s] = True
        self._flinks[s] = links
        self._ftransfer[s] = tid
        self._pairs += links.size
        for link in links.tolist():
            self._link_flows[link].add(s)
            self._dirty.add(link)

    def _grow(self) -> None:
        n = self.active.size
        self.rem, self.rate, self.size = (np.concatenate([a, np.zeros(n)])
                                          for a in (self.rem, self.rate, self.size))
        self.active = np.concatenate([self.active, np.zeros(n, dtype=bool)])
        self._flinks += [None] * n
        self._ftransfer += [-1] * n
        for s in range(n, 2 * n):
            heapq.heappush(self._free, s)

    def _end_flow(self, s: int) -> None:
        links = self._flinks[s]
        # bytes within the done-tolerance still count as carried, so every byte is delivered
        self.link_bytes[links] += max(self.rem[s], 0.0)
        self.bytes_delivered += self.size[s]
        self.active[s] = False
        self.rem[s] = self.rate[s] = 0.0
        self._pairs -= links.size
        for link in links.tolist():
            self._link_flows[link].discard(s)
            self._dirty.add(link)
        self._flinks[s] = None
        heapq.heappush(self._free, s)
        tid = self._ftransfer[s]
        tr = self._transfers[tid]
        tr[0] -= 1
        if tr[0] == 0:
            self._bytes_done(tid, self.now)

    def _bytes_done(self, tid: int, t: float) -> None:
        heapq.heappush(self._latency, (t + self._transfers[tid][1], tid))

    def _pop_latency(self, t: float) -> list[int]:
        out = []
        while self._latency and self._latency[0][0] <= t:
            ft, tid = heapq.heappop(self._latency)
            del self._transfers[tid]
            self.finish_s[tid] = ft
            out.append(tid)
        return out

    # ---- time -----------------------------------------------------------------------------
    def _next_flow_end(self) -> float:
        live = self.active & (self.rate > 0)
        if not live.any():
            return np.inf
        return self.now + float(np.min(self.rem[live] / self.rate[live]))

    def _run_until(self, t: float) -> list[int]:
        if t < self.now - 1e-12 * max(1.0, abs(self.now)):
            raise ValueError(f"time goes backwards: {t} < {self.now}")
        t = max(t, self.now)
        done: list[int] = []
        while True:  # every internal event up to t, in order; each ends >= 1 flow or transfer
            self._settle()
            te = self._next_flow_end()
            step = min(te, self._latency[0][0] if self._latency else np.inf)
            if step > t:
                break
            self._step(step, flows_end=te <= step)
            done.extend(self._pop_latency(step))
        self._step(t, flows_end=False)
        done.extend(self._pop_latency(t))
        return done

    def _step(self, t: float, flows_end: bool) -> None:
        """Move every flow to ``t`` at its current rate and end the flows that are done."""
        dt = t - self.now
        live = np.flatnonzero(self.active)
        if live.size == 0:
            self.now = t
            return
        rate = self.rate[live]
        with np.errstate(divide="ignore"):
            finish = np.where(rate > 0, self.now + self.rem[live] / rate, np.inf)
        if dt > 0:
            self.rem[live] -= rate * dt
            self.link_bytes += self.link_rate * dt
            self.link_busy[self.link_rate > 0] += dt
        self.now = t
        ended = (self.rem[live] <= REL_TOL * self.size[live])
        if flows_end:
            ended |= finish <= t * (1 + 1e-12)
        for s in live[ended].tolist():
            self._end_flow(s)

    # ---- rates ----------------------------------------------------------------------------
    def _settle(self) -> None:
        """Recompute the rates of the component(s) touched since the last recompute."""
        if not self._dirty:
            return
        slots, links = self._component()
        self._dirty = set()
        self.recomputes += 1
        if self.history is not None:
            touched = np.flatnonzero(self.link_rate) if links is None else np.asarray(links, dtype=np.int64)
        if links is None:
            self.link_rate[:] = 0.0
        else:
            self.link_rate[links] = 0.0
        if slots.size == 0:
            if self.history is not None:
                self._remember(touched)
            return
        # the same set of paths (a TP ring alone on its links, say) recurs thousands of times:
        # its max-min solution depends only on the paths, so it is memoised by them
        paths = [self._flinks[s] for s in slots.tolist()]
        pids = [id(p) for p in paths]  # path arrays are interned in self._paths
        order = sorted(range(len(pids)), key=pids.__getitem__)
        key = tuple(pids[i] for i in order)
        hit = self._memo.get(key)
        if hit is None:
            ordered = [paths[i] for i in order]
            lens = np.fromiter((p.size for p in ordered), dtype=np.int64, count=len(ordered))
            pair_link = np.concatenate(ordered)
            pair_flow = np.repeat(np.arange(len(ordered)), lens)
            used, local = np.unique(pair_link, return_inverse=True)
            sorted_rates = max_min_rates(pair_flow, local, self.capacity[used], len(ordered))
            link_rates = np.bincount(local, weights=sorted_rates[pair_flow], minlength=used.size)
            if len(self._memo) > 50_000:
                self._memo.clear()
            hit = self._memo[key] = (sorted_rates, used, link_rates)
        sorted_rates, used, link_rates = hit
        rates = np.empty(len(order))
        rates[order] = sorted_rates
        self.rate[slots] = rates
        self.link_rate[used] = link_rates
        self.link_peak[used] = np.maximum(self.link_peak[used], self.link_rate[used] / self.capacity[used])
        if self.history is not None:
            self._remember(np.union1d(touched, used))

    def _remember(self, links: np.ndarray) -> None:
        """With :attr:`history` on, log (time, links, their summed rates) after each recompute."""
        if self.history is None or self.history_limit <= 0:
            return
        self.history_limit -= links.size
        self.history.append((self.now, links.copy(), self.link_rate[links].copy()))

    def account_isolated(self, start_s: float, flows: Sequence[FlowSpec], duration_s: float) -> None:
        """Book flows that ran alone on their links (the engine timed them without the model):
        each flow at its path's bottleneck bandwidth; bytes, busy time, peak and history as if
        they had run here."""
        for links, nbytes in flows:
            if nbytes <= 0 or not links:
                continue
            idx = self._path(links)
            rate = float(self.capacity[idx].min())
            busy = nbytes / rate
            self.link_bytes[idx] += nbytes
            self.link_busy[idx] += busy
            self.link_peak[idx] = np.maximum(self.link_peak[idx], rate / self.capacity[idx])
            self.bytes_added += nbytes
            self.bytes_delivered += nbytes
            self.flows_added += 1
            if self.history is not None and self.history_limit > 0:
                self.history_limit -= 2 * idx.size
                self.history.append((start_s, idx, np.full(idx.size, rate)))
                self.history.append((start_s + busy, idx, np.zeros(idx.size)))

    def link_series(self, links: Sequence[Link]) -> dict[Link, list[tuple[float, float]]]:
        """(time, bytes/s) steps of each link's load from :attr:`history`, in time order (empty
        lists when not recorded)."""
        out: dict[Link, list[tuple[float, float]]] = {link: [] for link in links}
        if not self.history or not links:
            return out
        times = np.repeat([t for t, _, _ in self.history], [ls.size for _, ls, _ in self.history])
        idx = np.concatenate([ls for _, ls, _ in self.history])
        rates = np.concatenate([r for _, _, r in self.history])
        for link in links:
            sel = np.flatnonzero(idx == self.index[link])
            order = np.argsort(times[sel], kind="stable")  # isolated flows are booked out of order
            out[link] = list(zip(times[sel][order].tolist(), rates[sel][order].tolist()))
        return out

    def _component(self) -> tuple[np.ndarray, list[int] | None]:
        """Active flows reachable from the dirty links through shared links (breadth-first),
        and the links visited; (all active flows, None) once the search passes half the pairs."""
        budget = self._pairs // 2
        seen_links = set(self._dirty)
        stack = sorted(seen_links)
        flows: set[int] = set()
        visited = 0
        link_flows, flinks = self._link_flows, self._flinks
        while stack:
            for s in link_flows[stack.pop()]:
                if s in flows:
                    continue
                flows.add(s)
                path = flinks[s]
                visited += path.size
                if visited > budget:
                    return np.flatnonzero(self.active), None
                for link in path.tolist():
                    if link not in seen_links:
                        seen_links.add(link)
                        stack.append(link)
        return np.array(sorted(flows), dtype=np.int64), sorted(seen_links)


def run_chains(cluster: Cluster, chains: Sequence[tuple[float, Sequence[Phase]]],
               model: FlowModel | None = None, check: bool = False) -> list[float]:
    """Run chains of phases on one :class:`FlowModel`: chain ``i`` starts at ``chains[i][0]`` and
    its phases run one after another (each a transfer); all chains share the links. Returns each
    chain's finish time (its start if it has no phase). Pass ``model`` to inspect it afterwards;
    ``check`` asserts :meth:`FlowModel.check_capacity` at every event."""
    model = model if model is not None else FlowModel(cluster)
    finish = [0.0] * len(chains)
    starts = sorted((float(s), i) for i, (s, _) in enumerate(chains))
    owner: dict[int, tuple[int, int]] = {}  # transfer id -> (chain, phase index)
    next_id = 0

    def launch(t: float, c: int, k: int) -> None:
        nonlocal next_id
        phases = chains[c][1]
        if k >= len(phases):
            finish[c] = t
            return
        owner[next_id] = (c, k)
        model.add(t, next_id, phases[k].flows, phases[k].latency_s)
        next_id += 1

    pos = 0
    while True:
        te = model.next_event_s()
        if check:
            model.check_capacity()
        ts = starts[pos][0] if pos < len(starts) else None
        if ts is not None and (te is None or ts <= te):
            while pos < len(starts) and starts[pos][0] == ts:
                launch(ts, starts[pos][1], 0)
                pos += 1
            continue
        if te is None:
            return finish
        for tid in model.advance(te):
            c, k = owner.pop(tid)
            launch(model.finish_s[tid], c, k + 1)


def run_transfers(cluster: Cluster, transfers: Sequence[tuple[float, Sequence[FlowSpec], float]],
                  model: FlowModel | None = None, check: bool = False) -> list[float]:
    """Finish time of each ``(start_s, flows, latency_s)`` transfer, all sharing the links."""
    chains = [(start, [Phase(tuple((tuple(l), float(b)) for l, b in flows), float(lat))])
              for start, flows, lat in transfers]
    return run_chains(cluster, chains, model, check)


def summarize_links(model: FlowModel, cluster: Cluster, elapsed_s: float,
                    top: int = 5) -> list[dict[str, Any]]:
    """The ``top`` links by time at full bandwidth (bytes / bandwidth), ties by name: bytes,
    busy_s, peak and mean utilisation over ``elapsed_s``."""
    rows = []
    for (u, v), st in model.link_stats().items():
        cap = cluster.graph.edges[u, v]["bandwidth_Bps"]
        rows.append((-st["bytes"] / cap, u, v, cap, st))
    rows.sort()
    out = []
    for neg, u, v, cap, st in rows[:top]:
        out.append({"link": f"{u} -> {v}", "tier": cluster.graph.edges[u, v]["tier"],
                    "bandwidth_Bps": cap, "bytes": st["bytes"], "busy_s": st["busy_s"],
                    "peak_utilisation": st["peak_utilisation"],
                    "mean_utilisation": (-neg / elapsed_s) if elapsed_s > 0 else 0.0})
    return out
