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
        sc = api.resolve(dict(model="llama3-8b", topology="h100-ib", gpus=8, tp=1, pp=1, seq=8192, gbs=16, zero=3))
        sc = api.with_settings(sc, cluster=cluster)
        rep = api.simulate(sc).report
        total = rep["exposed_comm_s"]["dp"] + rep["overlapped_comm_s"]["dp"]
        share[name] = rep["exposed_comm_s"]["dp"] / total
    assert share["fast"] < 0.25
    assert share["slow"] > 0.6


def _dp_spans(res):
    tl = res.timeline
    return tl.spans(tl.mask(rank=0, stream="dp"))


def test_gradients_reduce_in_fp32_unless_bf16_and_after_the_backward_without_overlap():
    base = dict(model="llama3-8b", topology="h100-ib", gpus=16, tp=1, pp=1, seq=2048, gbs=16, zero=0)
    fp32 = api.simulate(api.resolve(base))
    bf16 = api.simulate(api.resolve({**base, "grad_dtype": "bf16"}))
    assert sum(s.bytes for s in _dp_spans(fp32)) == 2 * sum(s.bytes for s in _dp_spans(bf16))
    assert fp32.report["peak_memory_gib"][0] > bf16.report["peak_memory_gib"][0]  # 2 bytes per parameter more
    late = api.simulate(api.resolve({**base, "overlap_grad_reduce": False}))
    tl = late.timeline
    backward_end = max(s.end_s for s in tl.spans(tl.mask(rank=0, stream="compute")) if s.name != "optimizer")
    assert min(s.start_s for s in _dp_spans(late)) >= backward_end
    assert late.report["exposed_comm_s"]["dp"] > fp32.report["exposed_comm_s"]["dp"]
