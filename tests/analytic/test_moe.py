"""The closed form's MoE terms: all-to-all volume by hand, expert placement, the TP count, memory,
every closed-form schedule on an MoE model, agreement with the simulation, and a CP ring by hand."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from simtrain import api
from simtrain.analytic import moe
from simtrain.analytic.model import ANALYTIC_SCHEDULES, analytic_report, estimate
from simtrain.errors import SpecError
from simtrain.schedules import REGISTRY
from simtrain.specs.model import load_model
from simtrain.specs.parallel import ParallelSpec
from simtrain.topology.cluster import load_topology
from simtrain.units import GiB
from simtrain.workload.moe_routing import Routing, load_factors

pytestmark = pytest.mark.quick

#: Mixtral 8x7B on 64 GPUs with EP 8 and PP 4. TP must be 1 (or 2 with expert TP 2): EP is folded
#: from the DP x CP ranks of one pipeline position, so etp*ep*pp must divide the 64 GPUs, and with
#: TP 8 (expert TP 8 by default) it is 256.
MIXTRAL = dict(tp=1, pp=4, dp=16, ep=8, seq=4096, gbs=64, recompute="auto")
#: Qwen3-30B-A3B's published Hugging Face config.json.
QWEN3_30B = str(Path(__file__).parent.parent / "data" / "qwen3-30b-a3b" / "config.json")


@pytest.fixture(scope="module")
def mixtral():
    return load_model("mixtral-8x7b")


@pytest.fixture(scope="module")
def h100ib():
    return load_topology("h100-ib", nodes=8)


def test_all_to_all_volume_by_hand(mixtral):
    # tp 1: the 4096 tokens of a micro-batch enter the MoE block; each goes to top_k=2 experts,
    # hidden 4096 in bf16, 7 of 8 shares leave the rank (DeepSpeed-MoE, section 5)
    par = ParallelSpec(**MIXTRAL)
    assert moe.all_to_all_bytes(mixtral, par, 8) == 7 / 8 * 2 * 4096 * 2 * 4096 == 58_720_256
    # sequence parallelism keeps the tokens split over TP 2 when expert TP is 1 ...
    sp = ParallelSpec(**MIXTRAL | dict(tp=2, dp=8, etp=1))
    assert moe.all_to_all_bytes(mixtral, sp, 8) == 58_720_256 / 2
    # ... and so does expert TP 2: Megatron-LM's MoEAlltoAllTokenDispatcher sends the sequence
    # shard and all-gathers the received rows over the expert-TP group afterwards
    assert moe.all_to_all_bytes(mixtral, replace(sp, etp=2), 8) == 58_720_256 / 2
    # dispatch and combine, forward and backward, over 8 MoE layers at 100 GB/s
    assert moe.all_to_all_time(mixtral, par, 8, 100e9) == pytest.approx(8 * 4 * 58_720_256 / 100e9)
    assert moe.all_to_all_time(mixtral, replace(par, ep=1), 8, 100e9) == 0.0
    # under skew each layer moves its busiest rank's volume
    assert moe.all_to_all_time(mixtral, par, 2, 100e9, [1.5, 2.0]) == pytest.approx(3.5 * 4 * 58_720_256 / 100e9)


def test_deepep_all_to_all_by_hand(mixtral):
    """EP 8 over two nodes of four: a token reaches the other node with P = 22/28 (4 of 8
    experts there, top 2), so the buffer has 22/28 x 8/4 rows per token, in bf16 even with FP8
    training (Megatron-LM hands DeepEP the bf16 hidden states)."""
    par = ParallelSpec(**MIXTRAL | dict(moe_dispatcher="deepep", fp8=True))
    buffer = 4096 * 4096 * 22 / 28 * 8 / 4
    assert moe.all_to_all_bytes(mixtral, par, 4) == pytest.approx(7 / 8 * 2 * buffer)
    assert moe.all_to_all_bytes(mixtral, replace(par, fp8=False), 4) == moe.all_to_all_bytes(mixtral, par, 4)
    assert moe.all_to_all_time(mixtral, par, 8, 100e9, ep_per_node=4) == pytest.approx(
        8 * 4 * 7 / 8 * 2 * buffer / 100e9)


def test_expert_tp_collectives_by_hand(mixtral):
    # TP 2 = expert TP 2, 4096 tokens: 2048 per rank x top 2 rows arrive, the all-gather joins the
    # 2 ranks' rows (output 8192 x 4096 x 2 bytes), the reduce-scatter returns them; each moves
    # half of that, forward and backward
    par = ParallelSpec(**MIXTRAL | dict(tp=2, dp=8))
    out = 2 * 2048 * 2 * 4096 * 2
    assert moe.expert_tp_time(mixtral, par, [1.0, 1.0], 100e9) == pytest.approx(2 * 2 * 2 * 0.5 * out / 100e9)
    assert moe.expert_tp_time(mixtral, replace(par, etp=1), [1.0, 1.0], 100e9) == 0.0


def test_expert_layout_and_states(mixtral):
    par = ParallelSpec(**MIXTRAL)
    lay = moe.expert_layout(mixtral, par, mixtral.params_total)
    experts = 32 * 8 * 3 * 4096 * 14336
    assert lay.expert_params == experts / (8 * 4)
    assert lay.dense_params == (mixtral.params_total - experts) / 4
    # expert grid tp(1)-cp(1)-ep(8)-dp(2)-pp(4): EP spans one node, expert DP two
    assert (lay.edp, lay.ep_span, lay.edp_span) == (2, 8, 16)
    states = moe.model_states_bytes(lay, dpcp=16)
    assert states == 4 * (lay.dense_params + lay.expert_params) + 12 * lay.dense_params / 16 \
        + 12 * lay.expert_params / 2
    assert moe.expert_reduction_bytes(lay) == 2 * 1 / 2 * 2 * lay.expert_params
    assert moe.expert_reduction_bytes(replace(lay, edp=1)) == 0.0


def test_tp_collectives_per_moe_layer(mixtral):
    base = ParallelSpec(**MIXTRAL | dict(tp=2, dp=8))
    assert moe.tp_allreduces(mixtral, base, 8, 8) == 8 * 2  # attention; expert TP: expert_tp_time
    assert moe.tp_allreduces(mixtral, replace(base, etp=1), 8, 8) == 8 * 2  # attention only
    deepseek = load_model("deepseek-v3")
    assert moe.moe_layers_on_last_stage(deepseek, 61) == 58  # the first 3 layers are dense
    # DeepSeek's shared expert is a TP-sharded MLP: its gather and scatter, forward and backward
    assert moe.tp_allreduces(deepseek, replace(base, etp=1), 61, 58) == 3 * 4 + 58 * 4


def test_moe_step_uses_active_parameters(mixtral, h100ib):
    est = analytic_report(mixtral, h100ib, ParallelSpec(**MIXTRAL))
    embed = mixtral.params_total - mixtral.params_nonembedding
    f_layer = 6 * (mixtral.params_active - embed) / 32 + 6 * 4096 * mixtral.q_width
    assert est["model_flops_per_step"] == pytest.approx((32 * f_layer + 6 * 32000 * 4096) * 64 * 4096)
    assert est["breakdown_s"]["ep"] > 0 and est["breakdown_s"]["dp"] > 0
    assert sum(est["breakdown_s"].values()) == pytest.approx(est["step_time_s"], rel=1e-12)


def test_every_closed_form_schedule_gives_a_bubble_for_moe(mixtral, h100ib):
    par = ParallelSpec(**MIXTRAL | dict(gbs=256))  # 16 micro-batches: every schedule's condition holds
    for name in ANALYTIC_SCHEDULES:
        vpp = 2 if REGISTRY.closed_form(name).takes("vpp") else 1
        est = analytic_report(mixtral, h100ib, replace(par, schedule=name, vpp=vpp))
        assert est["schedule"] == name and est["breakdown_s"]["bubble"] > 0, name


def test_deepseek_fits_or_says_why(h100ib):
    deepseek = load_model("deepseek-v3")
    big = load_topology("h100-ib", nodes=32)
    est = analytic_report(deepseek, big, ParallelSpec(tp=8, etp=1, pp=1, dp=32, ep=256, seq=4096, gbs=64,
                                                      recompute="auto"))
    assert est["fits_in_memory"] and est["breakdown_s"]["ep"] > est["breakdown_s"]["tp"] > 0
    # EP 64 on 64 GPUs leaves 58 layers x 4 experts of 44M parameters on each GPU: 175 GB of states
    with pytest.raises(SpecError, match=r"no recompute count fits: .* \(model states 175\.2 GB under ZeRO-1 "
                                        r".* 85\.5 GB usable"):
        analytic_report(deepseek, h100ib, ParallelSpec(tp=8, etp=1, pp=1, dp=8, ep=64, seq=4096, gbs=64,
                                                       recompute="auto"))
    with pytest.raises(SpecError, match="n_params replaces N of dense models only"):
        estimate(deepseek, big, ParallelSpec(tp=8, etp=1, dp=32, ep=256, gbs=64), n_params=671e9)


def test_moe_step_close_to_the_simulation():
    """Uniform routing, EP within one node: the closed form's all-to-all is the simulated one
    within 2% (both move (ep-1)/ep of the routed tokens over NVLink), and the simulated step is
    0 to 30% above the closed form's, about twice the dense models' gap (Llama 3 70B on the
    same cluster: 13.5%): the simulation adds the memory-bound kernels (norms, activations, the
    token permutation, the router's top-k) and the dense GEMMs at their shapes' efficiency, where
    the closed form counts them at the large-GEMM rate (the routed experts' grouped GEMMs it
    prices at their shapes: :func:`moe.expert_gemm_excess`)."""
    sc = api.resolve({"model": "mixtral-8x7b", "topology": "h100-ib", "gpus": 64, **MIXTRAL},
                     recompute_rule="ledger")
    est = analytic_report(sc.model, sc.cluster, sc.parallel, gpu=sc.gpu)
    sim = api.simulate(sc).report
    assert sim["breakdown_s"]["ep"] == pytest.approx(est["breakdown_s"]["ep"], rel=0.02)
    assert 1.0 < sim["step_time_s"] / est["step_time_s"] < 1.3


def test_expert_gemms_at_their_shapes_by_hand():
    """Qwen3-30B-A3B (128 experts of 768) at EP 1 holds all 128 experts, 256 rows each per
    micro-batch of 4096 tokens: every grouped GEMM runs 32 rounds of 4 expert GEMMs, each round
    the host's 4 x 70 us, so a pass of fc1 and fc2 takes 2 x 32 x 280 us; EP 8 leaves 16 experts
    of 2048 rows, 4 rounds. The excess is that over the GEMMs' FLOPs at the sustained rate; with a
    flat efficiency a grouped GEMM is one kernel and the excess small."""
    qwen = load_model(QWEN3_30B)
    gpu = load_topology("h100-ib").gpu
    par = ParallelSpec(tp=1, pp=1, dp=16, seq=4096, gbs=16)
    flops = 2 * 4096 * 8 * 3 * 2048 * 768  # fc1 (gate and up) and fc2, 8 expert rows per token
    forward, total = moe.expert_gemm_excess(qwen, par, gpu)
    assert forward == pytest.approx(2 * 32 * 4 * 70e-6 - flops / gpu.effective_flops, rel=1e-9)
    assert total == pytest.approx(3 * forward, rel=1e-9)  # the input and weight gradients alike
    ep8, _ = moe.expert_gemm_excess(qwen, replace(par, ep=8), gpu)
    assert ep8 == pytest.approx(2 * 4 * 4 * 70e-6 - flops / gpu.effective_flops, rel=1e-9)
    flat, _ = moe.expert_gemm_excess(qwen, par, gpu.with_efficiency(0.6))
    assert 0 < flat < forward / 100  # launches, and the experts' weights read at the HBM rate
    # the step counts it as compute: on 16 GPUs at PP 4, EP 4 is the faster layout, as simulated
    cluster = load_topology("h100-ib", nodes=2)
    deep = replace(par, pp=4, dp=4, recompute="auto")
    one, four = (analytic_report(qwen, cluster, replace(deep, ep=ep)) for ep in (1, 4))
    assert four["step_time_s"] < one["step_time_s"] / 2
    assert one["breakdown_s"]["compute"] > 10 * one["breakdown_s"]["imbalance"]


def test_cp_ring_volume_by_hand():
    # Llama 3 8B, TP 2 x CP 4 in one node (450 GB/s), 32K tokens: each layer's 3 ring passes
    # (forward, and K/V with their gradients backward) send (cp-1) blocks of K and V, each
    # seq/cp x kv_width bf16 (Liu et al. 2023)
    llama = load_model("llama3-8b")
    est = estimate(llama, load_topology("seed-h100"),
                   ParallelSpec(tp=2, cp=4, pp=1, dp=1, seq=32768, gbs=4, recompute="auto"))
    ring = 32 * 3 * 3 * (2 * 8192 * 1024 * 2) / 450e9
    assert est["breakdown_s"]["cp"] + est["overlapped_comm_s"]["cp"] == pytest.approx(4 * ring)


def test_skew_charges_the_busiest_rank_and_counts_real_work(mixtral, h100ib):
    par = ParallelSpec(**MIXTRAL | dict(recompute="none"))
    routing = Routing(skew=1.0, seed=3)
    uniform = analytic_report(mixtral, h100ib, par)
    skewed = analytic_report(mixtral, h100ib, par, routing=routing)
    # FLOPs of the work done: the same as uniform routing, and MFU = HFU without recompute
    assert skewed["model_flops_per_step"] == uniform["model_flops_per_step"]
    assert skewed["hardware_flops_per_step"] == skewed["model_flops_per_step"]
    assert skewed["mfu"] == skewed["hfu"] < uniform["mfu"]
    # the last stage's 8 MoE layers: each adds (lf - 1) x 6 k psi_x FLOPs per token of the
    # busiest EP rank, 4096 tokens per micro-batch at the GPU's sustained FLOP/s, 64 / 16 = 4 micro-batches
    lf = load_factors(8, 8, 32, routing)[-8:]
    sec = 4096 / h100ib.gpu.effective_flops
    extra = sum(x - 1 for x in lf) * 6 * 2 * mixtral.expert_params() * sec
    assert skewed["breakdown_s"]["imbalance"] - uniform["breakdown_s"]["imbalance"] == pytest.approx(4 * extra)
    assert skewed["breakdown_s"]["compute"] == pytest.approx(uniform["breakdown_s"]["compute"])
    assert skewed["breakdown_s"]["ep"] == pytest.approx(uniform["breakdown_s"]["ep"] * sum(lf) / 8)


def test_zero_shards_dense_and_expert_states_over_their_own_groups(mixtral, h100ib):
    """ZeRO-3 against ZeRO-0 saves 16 (1 - 1/dp) bytes per dense parameter (sharded over DP = 16)
    and 16 (1 - 1/edp) per routed-expert parameter (over the expert data-parallel group, edp = 2)."""
    base = dict(MIXTRAL, recompute="none")
    z0, z3 = (estimate(mixtral, h100ib, ParallelSpec(zero=z, **base)) for z in (0, 3))
    experts = mixtral.moe_layers * mixtral.num_experts * mixtral.expert_params()
    dense_per_gpu = (mixtral.params_total - experts) / 4  # tp 1, pp 4
    expert_per_gpu = experts / (8 * 4)  # etp 1 x ep 8 x pp 4; edp = 64 / 32 = 2
    saved = 16 * (1 - 1 / 16) * dense_per_gpu + 16 * (1 - 1 / 2) * expert_per_gpu
    assert z0["memory_gib"] - z3["memory_gib"] == pytest.approx(saved / GiB)
