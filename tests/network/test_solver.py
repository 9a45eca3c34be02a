"""The max-min fair flow model: one flow, shared links, progressive filling, late advances, empty and
zero-byte transfers, incremental rates equal to a full recompute."""

from __future__ import annotations

import random

import numpy as np
import pytest

from helpers import GB
from simtrain.network.chains import run_transfers
from simtrain.network.solver import FlowModel, max_min_rates
from simtrain.topology.cluster import build_topology, load_topology
from simtrain.topology.routing.router import Router

pytestmark = pytest.mark.quick


def nvlink_node():
    """One node of 8 GPUs on an NVSwitch, 100 GB/s links that reach their line rate."""
    return build_topology({"gpu": "h100-sxm", "nodes": 1,
                           "node": {"gpus": 8, "nvlink_GBps": 100, "nvlink_efficiency": 1.0}}, "node")


SW = "node0/nvswitch"


L1 = ("gpu0", SW)  # GPU 0 -> NVSwitch


L2 = (SW, "gpu1")  # NVSwitch -> GPU 1


def test_one_flow_one_link_takes_bytes_over_bandwidth_plus_latency():
    c = nvlink_node()
    assert run_transfers(c, [(0.0, [((L1,), 1 * GB)], 0.0)]) == [pytest.approx(0.010, rel=1e-12)]
    assert run_transfers(c, [(0.5, [((L1,), 1 * GB)], 2e-6)]) == [pytest.approx(0.510002, rel=1e-12)]


def test_two_flows_share_a_link_and_the_survivor_speeds_up():
    c = nvlink_node()
    model = FlowModel(c)
    model.add(0.0, 1, [((L1,), 1 * GB)])
    model.add(0.0, 2, [((L1,), 2 * GB)])
    assert model.next_event_s() == pytest.approx(0.020)  # both at 50 GB/s
    assert model.advance(0.015) == []
    assert model.flows.rate[model.flows.active].tolist() == [50 * GB, 50 * GB]
    assert model.advance(0.020) == [1]
    assert model.next_event_s() == pytest.approx(0.030)  # alone at 100 GB/s: 1 GB left
    assert model.advance(1.0) == [2]
    assert model.finish_s == {1: pytest.approx(0.020), 2: pytest.approx(0.030)}
    assert model.next_event_s() is None
    st = model.usage.stats()[L1]
    assert st["bytes"] == pytest.approx(3 * GB) and st["busy_s"] == pytest.approx(0.030)
    assert st["peak_utilisation"] == pytest.approx(1.0)


def test_max_min_textbook_chain():
    """Bertsekas & Gallager's progressive filling on two links of capacity 1 and 2: flow 0 crosses
    both, flow 1 only the first, flow 2 only the second -> 0.5, 0.5, 1.5."""
    rates = max_min_rates(np.array([0, 0, 1, 2]), np.array([0, 1, 0, 1]), np.array([1.0, 2.0]), 3)
    assert rates.tolist() == [0.5, 0.5, 1.5]


def test_three_flows_on_a_chain_with_a_bottleneck():
    """L1 and L2 100 GB/s. long: L1+L2 (1 GB); s1: L1 (2 GB); s2: L2 (0.5 GB); s3: L2 (1 GB).
    L2 is the bottleneck: long, s2, s3 at 33.3, s1 takes the rest of L1 (66.7). At 15 ms s2 ends
    (0.5/33.3) and s1 has 1 GB left; then L2: long, s3 at 50, L1: s1 at 50. At 25 ms long and s3
    end (0.5 GB left at 50), s1 has 0.5 GB left alone at 100 -> 30 ms."""
    c = nvlink_node()
    model = FlowModel(c)
    done = run_transfers(c, [(0.0, [((L1, L2), 1 * GB)], 0.0), (0.0, [((L1,), 2 * GB)], 0.0),
                             (0.0, [((L2,), 0.5 * GB)], 0.0), (0.0, [((L2,), 1 * GB)], 0.0)],
                         model, check=True)
    assert done == pytest.approx([0.025, 0.030, 0.015, 0.025], rel=1e-9)
    assert model.usage.bytes_delivered == pytest.approx(model.usage.bytes_added) == 4.5 * GB


def test_late_advance_processes_intermediate_events_in_order():
    c = nvlink_node()
    model = FlowModel(c)
    model.add(0.0, 7, [((L1,), 1 * GB)], 1e-3)
    model.add(0.0, 3, [((L1,), 2 * GB)])
    assert model.advance(10.0) == [7, 3]
    assert model.finish_s == {7: pytest.approx(0.021), 3: pytest.approx(0.030)}


def test_empty_and_zero_byte_transfers_complete_after_their_latency():
    c = nvlink_node()
    model = FlowModel(c)
    model.add(1.0, 1, [], 5e-6)
    model.add(1.0, 2, [((L1,), 0.0), ((), 10.0)], 0.0)
    assert model.next_event_s() == pytest.approx(1.0)
    assert model.advance(1.0) == [2]
    assert model.next_event_s() == pytest.approx(1.000005)
    assert model.advance(2.0) == [1]
    with pytest.raises(ValueError, match="backwards"):
        model.add(0.5, 3, [((L1,), 1.0)])


def test_incremental_rates_equal_a_full_recompute():
    """Component-restricted recomputes give the same rates as progressive filling from scratch."""
    c = load_topology("h100-ib")
    router = Router(c)
    rng = random.Random(1)
    model = FlowModel(c)
    t = 0.0
    for tid in range(300):
        a, b = rng.sample(range(c.num_gpus), 2)
        model.add(t, tid, [(router.links(a, b), rng.uniform(1e6, 1e8))])
        t += rng.uniform(0, 2e-4)
        model.advance(t)
        if tid % 25 == 0:
            model.next_event_s()  # settles the rates (and runs ahead: put back to read the state at t)
            model.settle_ahead()
            slots = np.flatnonzero(model.flows.active)
            paths = [model.flows.paths[s] for s in slots]
            pf = np.repeat(np.arange(slots.size), [p.size for p in paths])
            used, local = np.unique(np.concatenate(paths), return_inverse=True)
            ref = max_min_rates(pf, local, model.capacity[used], slots.size)
            assert np.allclose(model.flows.rate[slots], ref, rtol=1e-12)
            model.check_capacity()
    model.advance(1e3)
    assert model.active_flows == 0 and model.active_transfers == 0
    assert model.usage.bytes_delivered == pytest.approx(model.usage.bytes_added, rel=1e-12)
