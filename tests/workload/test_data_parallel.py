"""Data parallelism: ZeRO-3's parameter gathers hide behind compute on a fast network, not on a slow one;
gradients reduce in fp32 unless bf16; ZeRO-2/3 reduce-scatter every micro-batch (m times ZeRO-1's
traffic, never a shorter step) while ZeRO-3 keeps its per-micro-batch gathers; the buckets in flight
in static memory."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simtrain import api
from simtrain.topology.cluster import build_topology
from simtrain.units import GiB
from simtrain.workload.data_parallel import bucket_size
from simtrain.workload.options import WorkloadOptions


@pytest.mark.quick
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


@pytest.mark.quick
def test_gradients_reduce_in_fp32_unless_bf16_and_after_the_backward_without_overlap():
    base = dict(model="llama3-8b", topology="h100-ib", gpus=16, tp=1, pp=1, seq=2048, gbs=16, zero=0)
    fp32 = api.simulate(api.resolve(base))
    bf16 = api.simulate(api.resolve({**base, "grad_dtype": "bf16"}))
    assert _bytes(fp32, "all_reduce") == 2 * _bytes(bf16, "all_reduce")
    assert fp32.report["peak_memory_gib"][0] > bf16.report["peak_memory_gib"][0]  # 2 bytes per parameter more
    late = api.simulate(api.resolve({**base, "overlap_grad_reduce": False}))
    tl = late.timeline
    backward_end = max(s.end_s for s in tl.spans(tl.mask(rank=0, stream="compute")) if s.name != "optimizer")
    assert min(s.start_s for s in _dp_spans(late)) >= backward_end
    assert late.report["exposed_comm_s"]["dp"] > fp32.report["exposed_comm_s"]["dp"]


def _bytes(res, comm: str) -> float:
    return sum(s.bytes for s in _dp_spans(res) if s.name == f"dp.{comm}")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tp=st.sampled_from([1, 2]), pp=st.sampled_from([1, 2]), dp=st.sampled_from([2, 4]),
       m=st.integers(2, 4), schedule=st.sampled_from(["1f1b", "zb-h1"]),
       network=st.sampled_from(["analytic", "flow"]))
def test_zero2_reduces_every_micro_batch_and_is_never_faster_than_zero1(tp, pp, dp, m, schedule, network):
    """ZeRO-2 reduce-scatters each micro-batch's gradients: m times ZeRO-1's reduce-scatter
    traffic, the same parameter gathers, and a step never shorter than ZeRO-1's."""
    base = dict(model="llama3-8b", topology="h100-ib", gpus=tp * pp * dp, tp=tp, pp=pp, seq=1024,
                gbs=dp * m, schedule=schedule, network=network)
    one, two = (api.simulate(api.resolve({**base, "zero": z})) for z in (1, 2))
    assert _bytes(two, "reduce_scatter") == pytest.approx(m * _bytes(one, "reduce_scatter"))
    assert _bytes(two, "all_gather") == pytest.approx(_bytes(one, "all_gather"))
    assert two.report["step_time_s"] >= one.report["step_time_s"] * (1 - 1e-12)


@pytest.mark.quick
def test_zero3_reduces_and_gathers_every_micro_batch_behind_the_backward():
    """ZeRO-3: each micro-batch's buckets are reduce-scattered while later micro-batches still
    compute, and every layer is gathered before each pass of each micro-batch."""
    m, layers = 4, 32
    res = api.simulate(api.resolve(dict(model="llama3-8b", topology="h100-ib", gpus=8, tp=1, pp=1, seq=1024,
                                        gbs=8 * m, zero=3)))
    spans = _dp_spans(res)
    scatters = [s for s in spans if s.name == "dp.reduce_scatter"]
    gathers = [s for s in spans if s.name == "dp.all_gather"]
    assert len(gathers) == 2 * layers * m  # forward and backward of every micro-batch
    assert len(scatters) % m == 0 and len(scatters) >= m
    tl = res.timeline
    backward_end = max(s.end_s for s in tl.spans(tl.mask(rank=0, stream="compute")) if s.name != "optimizer")
    assert sum(s.start_s < backward_end for s in scatters) >= len(scatters) // m  # the first micro-batch's at least


@pytest.mark.quick
def test_zero2_static_memory_is_the_gradient_shard_plus_two_buckets():
    """ZeRO-2 holds the sharded gradients plus two buckets of unsharded fp32 gradients (one
    reducing while the next fills; one without overlap); ZeRO-1 the whole gradient."""
    base = dict(model="llama3-8b", topology="h100-ib", gpus=16, tp=1, pp=1, seq=1024, gbs=32)
    static = {z: api.simulate(api.resolve({**base, "zero": z})).static_bytes[0] for z in (1, 2)}
    late = api.simulate(api.resolve({**base, "zero": 2, "overlap_grad_reduce": False})).static_bytes[0]
    sc = api.resolve({**base, "zero": 2})
    bucket = static[2] - late  # the largest bucket's fp32 gradient
    assert bucket >= 4 * bucket_size(sc.parallel, WorkloadOptions())
    n = sc.model.params_total
    assert static[1] - static[2] == pytest.approx(4 * n * (1 - 1 / 16) - 2 * bucket)
    assert (static[1] - static[2]) / GiB > 20


@pytest.mark.quick
@pytest.mark.parametrize("schedule", ["interleaved-1f1b", "zb-v"])
def test_zero1_gathers_each_ranks_chunks_in_the_order_it_first_runs_them(schedule):
    """With several model chunks per rank, ZeRO-1's parameter gathers follow the rank's first
    forward of each chunk (Megatron-LM gathers chunks 0 and 1 first, the rest one chunk ahead):
    the first stage's first layer waits for its own chunk's gathers, not for all of its chunks'."""
    vpp = 4 if schedule == "interleaved-1f1b" else 2
    chunks = {"vpp": vpp} if schedule == "interleaved-1f1b" else {}
    sc = api.resolve(dict(model="llama3-8b", topology="h100-ib", gpus=32, tp=4, pp=4, seq=2048, gbs=32, zero=1,
                          schedule=schedule, **chunks))
    res, sched = api.simulate(sc), api.build_schedule(sc, WorkloadOptions())
    tl = res.timeline
    for rank in range(4):
        gathers = sorted((s for s in tl.spans(tl.mask(rank=rank * 8, stream="dp")) if s.name == "dp.all_gather"),
                         key=lambda s: s.start_s)
        first_use = []  # the rank's stages by their first forward action
        for action in sched.actions[rank]:
            for half in action.halves():
                if half.kind == "F" and half.stage not in first_use:
                    first_use.append(half.stage)
        assert len(first_use) == vpp
        order = [s.stage for s in gathers]
        assert order == sorted(order, key=first_use.index), (schedule, rank, order, first_use)
        if rank == 0:  # the first stage waits for no activation: its first layer only for its own chunk
            first_layer = min(s.start_s for s in tl.spans(tl.mask(rank=0, stream="compute")) if s.name == "attn.F")
            assert first_layer <= min(s.start_s for s in gathers if s.stage != first_use[0])


@pytest.mark.quick
def test_without_overlap_param_gather_the_first_forward_waits_for_every_bucket():
    """Megatron-LM's default (no --overlap-param-gather): the optimizer step gathers every bucket
    synchronously, so the step's first layer starts after the last gather; with it, after its own."""
    base = dict(model="llama3-8b", topology="h100-ib", gpus=16, tp=2, pp=1, seq=2048, gbs=16, zero=1)
    starts = {}
    for overlap in (True, False):
        tl = api.simulate(api.resolve({**base, "overlap_param_gather": overlap})).timeline
        gathers = [s for s in tl.spans(tl.mask(rank=0, stream="dp")) if s.name == "dp.all_gather"]
        first = min(s.start_s for s in tl.spans(tl.mask(rank=0, stream="compute")) if s.name == "attn.F")
        assert len(gathers) > 2
        starts[overlap] = first, max(s.end_s for s in gathers)
    assert starts[True][0] < starts[True][1]  # the first layer before the last bucket arrives
    assert starts[False][0] >= starts[False][1] - 1e-12
