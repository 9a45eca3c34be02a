"""Data parallelism: ZeRO-3's parameter gathers hide behind compute on a fast network, not on a slow one."""

from __future__ import annotations

from simtrain import api
from simtrain.topology.cluster import build_topology


def test_zero3_gathers_hidden_on_fast_network_exposed_on_slow():
    fast_topo = {"gpu": "h100-sxm", "nodes": 1, "node": {"gpus": 8, "nvlink_GBps": 450}}
    slow_topo = {"gpu": "h100-sxm", "nodes": 8, "node": {"gpus": 1, "nic_gbps": 25},
                 "fabric": {"kind": "fat-tree", "nodes_per_leaf": 8, "spines": 1}}
    share = {}
    for name, topo in (("fast", fast_topo), ("slow", slow_topo)):
        cluster = build_topology(topo, name)
        sc = api.resolve(dict(model="llama3-8b", topology="h100-ib", gpus=8, seq=8192, gbs=16, zero=3))
        sc = api.with_settings(sc, cluster=cluster)
        rep = api.simulate(sc).report
        total = rep["exposed_comm_s"]["dp"] + rep["overlapped_comm_s"]["dp"]
        share[name] = rep["exposed_comm_s"]["dp"] / total
    assert share["fast"] < 0.25
    assert share["slow"] > 0.6
