"""The flow model's compiled event loop: its sort and heap, and the model it runs against an
event-by-event simulation that recomputes every rate from scratch; growth of every array
(slots, paths, transfers, memo, history)."""

from __future__ import annotations

import heapq
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simtrain.network.flow_layout import RECORD, T_ID
from simtrain.network.links import HISTORY_SAMPLES, LinkUsage
from simtrain.network.maxmin import max_min_rates
from simtrain.network.solver import FlowModel
from simtrain.topology.cluster import load_topology
from simtrain.topology.routing.router import Router

pytestmark = pytest.mark.quick


def _reference(cluster, transfers):
    """Finish times of ``transfers`` ((start, id, [(links, bytes)], latency), by start) simulated
    event by event with every rate recomputed from scratch by progressive filling."""
    index = {e: i for i, e in enumerate(sorted(cluster.graph.edges()))}
    cap = np.array([cluster.graph.edges[e]["capacity_Bps"] for e in sorted(cluster.graph.edges())])
    flows: list[list] = []  # [transfer id, link indices, bytes left]
    left: dict[int, int] = {}
    lat: dict[int, float] = {}
    finish: dict[int, float] = {}
    waiting: list[tuple[float, int]] = []
    now, pending = 0.0, sorted(transfers, key=lambda t: t[0])
    while pending or flows or waiting:
        rates = np.zeros(len(flows))
        if flows:
            pf = np.repeat(np.arange(len(flows)), [len(f[1]) for f in flows])
            used, local = np.unique(np.concatenate([f[1] for f in flows]), return_inverse=True)
            rates = max_min_rates(pf, local, cap[used], len(flows))
        t_end = min((f[2] / r for f, r in zip(flows, rates) if r > 0), default=np.inf) + now
        t_next = min(t_end, pending[0][0] if pending else np.inf, waiting[0][0] if waiting else np.inf)
        for f, r in zip(flows, rates):
            f[2] -= r * (t_next - now)
        now = t_next
        ended = [f for f in flows if f[2] <= 1e-9 * f[3]]
        flows = [f for f in flows if f[2] > 1e-9 * f[3]]
        for f in ended:
            left[f[0]] -= 1
            if left[f[0]] == 0:
                heapq.heappush(waiting, (now + lat[f[0]], f[0]))
        while waiting and waiting[0][0] <= now:
            t, tid = heapq.heappop(waiting)
            finish[tid] = t
        while pending and pending[0][0] <= now:
            start, tid, specs, latency = pending.pop(0)
            moving = [(np.array([index[e] for e in links]), b) for links, b in specs if links and b > 0]
            flows.extend([tid, links, b, b] for links, b in moving)
            left[tid], lat[tid] = len(moving), latency
            if not moving:
                heapq.heappush(waiting, (now + latency, tid))
        while waiting and waiting[0][0] <= now:
            t, tid = heapq.heappop(waiting)
            finish[tid] = t
    return finish


def _transfers(rng: random.Random, router: Router, gpus: list[int], n: int):
    out, t = [], 0.0
    for tid in range(n):
        pairs = [tuple(rng.sample(gpus, 2)) for _ in range(rng.randint(1, 10))]
        nbytes = rng.choice([0.0, 1e6, 4e6, 2.5e7])
        out.append((t, tid, [(router.links(a, b), nbytes) for a, b in pairs], rng.choice([0.0, 5e-6])))
        t += rng.choice([0.0, 0.0, 1e-5, 3e-4])
    return out


def _run(cluster, transfers, record: bool = False, limit: int | None = None) -> FlowModel:
    model = FlowModel(cluster, record=record)
    if limit is not None:
        model.reshares.limit = limit
    for start, tid, specs, latency in transfers:
        model.advance(start)
        model.add(start, tid, specs, latency)
    model.advance(1e3)
    return model


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10 ** 6), st.sampled_from([1, 3, 7]))
def test_the_model_times_transfers_as_a_from_scratch_simulation_does(seed, spread):
    cluster = load_topology("h100-ib")
    router = Router(cluster)
    rng = random.Random(seed)
    transfers = _transfers(rng, router, list(range(0, cluster.num_gpus, spread)), rng.randint(1, 25))
    model = _run(cluster, transfers)
    ref = _reference(cluster, transfers)
    assert model.finish_s.keys() == ref.keys()
    for tid, t in ref.items():
        assert model.finish_s[tid] == pytest.approx(t, rel=1e-7, abs=1e-12)
    assert model.active_flows == 0 and model.active_transfers == 0


def test_every_array_grows_and_the_memo_may_be_cleared():
    """Hundreds of distinct paths, transfers and flows at once, the rate history and the memo past
    their first sizes; with the memo bounded to nothing, or cleared as it fills, the same times."""
    cluster = load_topology("h100-ib")
    router = Router(cluster)
    rng = random.Random(5)
    transfers = []
    for tid in range(80):
        pairs = [tuple(rng.sample(range(cluster.num_gpus), 2)) for _ in range(2 if tid < 70 else 40)]
        transfers.append((tid * 1e-7, tid, [(router.links(a, b), 5e7) for a, b in pairs], 0.0))
    full = _run(cluster, transfers, record=True)
    assert len(full.paths.arrays) > 260 and full.flows.active.size > 128 and full.transfers.ti.shape[1] > 64
    assert full.memo.n > 64 and full.usage.hst[0] > 64
    for limit in (0, 2_000):
        other = _run(cluster, transfers, record=True, limit=limit)
        assert other.finish_s == full.finish_s
        assert np.array_equal(other.usage.bytes, full.usage.bytes)
        assert len(other.usage.history) == len(full.usage.history)
    assert int(full.transfers.ti[T_ID, 0]) >= 0


def test_the_history_is_kept_in_order_within_its_limit():
    cluster = load_topology("h100-ib")
    router = Router(cluster)
    transfers = _transfers(random.Random(2), router, list(range(0, 64, 5)), 20)
    model = FlowModel(cluster, record=True)
    model.usage.history_limit = 40
    for start, tid, specs, latency in transfers:
        model.advance(start)
        model.add(start, tid, specs, latency)
    model.advance(1e3)
    history = model.usage.history
    assert history and sum(links.size for _, links, _ in history) <= 40 + len(model.edges)
    assert model.usage.history_limit <= 0
    times = [t for t, _, _ in history]
    assert times == sorted(times)


def test_the_history_keeps_its_samples_as_its_arrays_grow():
    edges = [(f"a{i}", f"b{i}") for i in range(8)]
    usage = LinkUsage(edges, {e: i for i, e in enumerate(edges)}, np.full(8, 1e9))
    assert usage.hlinks.size < 4096  # not recording: no room set aside
    rng = np.random.default_rng(3)
    written = []
    for k in range(700):  # 700 entries of up to 8 links: past the first arrays' 64 entries and 1,024 values
        links = np.sort(rng.choice(8, size=int(rng.integers(1, 9)), replace=False)).astype(np.int64)
        rates = rng.random(links.size)
        usage._append(k * 1e-3, links, rates)
        written.append((k * 1e-3, links, rates))
    usage.hst[RECORD] = 1  # read it back as a recorded history
    got = usage.history
    assert got is not None and len(got) == len(written)
    assert all(t == u and np.array_equal(a, b) and np.array_equal(r, s) for (t, a, r), (u, b, s) in zip(got, written))
    recording = LinkUsage(edges, {e: i for i, e in enumerate(edges)}, np.full(8, 1e9), record=True)
    assert recording.hlinks.size > HISTORY_SAMPLES == recording.history_limit  # room for the whole history


def _replayed(history, n_links: int) -> np.ndarray:
    rates = np.zeros(n_links)
    for _, links, values in history:
        rates[links] = values
    return rates


def test_the_history_holds_each_rate_change_and_only_changes():
    """Replaying the recorded entries gives the model's link rates at every point of a run; no
    entry is empty or repeats a link's rate before it."""
    cluster = load_topology("h100-ib")
    router = Router(cluster)
    transfers = _transfers(random.Random(11), router, list(range(0, 64, 3)), 30)
    model = FlowModel(cluster, record=True)
    for start, tid, specs, latency in transfers:
        model.advance(start)
        model.add(start, tid, specs, latency)
        model.settle_ahead()
        model._settle()
        assert np.array_equal(_replayed(model.usage.history, len(model.edges)), model.link_rate)
    model.advance(1e3)
    history = model.usage.history
    assert len(history) > 20 and not _replayed(history, len(model.edges)).any()
    before = np.zeros(len(model.edges))
    for _, links, values in history:
        assert links.size > 0 and (before[links] != values).all()
        before[links] = values


def test_a_links_series_is_its_samples_in_time_order():
    """Each link's (time, rate) samples, sorted by time with ties as recorded (isolated flows are
    booked out of order), divided by its number in ``per``: as read off the history one link at
    a time."""
    edges = [(f"a{i}", f"b{i}") for i in range(6)]
    usage = LinkUsage(edges, {e: i for i, e in enumerate(edges)}, np.full(6, 1e9), record=True)
    rng = np.random.default_rng(7)
    times = rng.choice([0.5, 1.0, 1.5, 2.0, 3.0], size=300)  # out of order, with ties
    for t in times:
        links = np.sort(rng.choice(6, size=int(rng.integers(1, 4)), replace=False)).astype(np.int64)
        usage._append(float(t), links, rng.random(links.size))
    want = [edges[4], edges[1], edges[5]]
    per = [2.0, 4.0, 0.5]
    got = {link: list(zip(t.tolist(), r.tolist())) for link, (t, r) in usage.series(want, per).items()}
    flat = [(t, int(link), r) for t, ls, rs in usage.history for link, r in zip(ls.tolist(), rs.tolist())]
    for link, p in zip(want, per):
        mine = [(t, r / p) for t, link_i, r in flat if link_i == usage.index[link]]
        assert got[link] == sorted(mine, key=lambda x: x[0])  # (sorted is stable)
        assert len(got[link]) > 20
    t1, r1 = usage.series(want)[edges[1]]
    assert list(zip(t1.tolist(), r1.tolist())) == [(t, r) for t, link_i, r in sorted(
        ((t, link_i, r) for t, link_i, r in flat if link_i == 1), key=lambda x: x[0])]
    assert usage.series([]) == {}
    idle = LinkUsage(edges, {e: i for i, e in enumerate(edges)}, np.full(6, 1e9), record=False)
    assert [a.size for a in idle.series([edges[0]])[edges[0]]] == [0, 0]
