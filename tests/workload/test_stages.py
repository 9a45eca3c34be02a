"""Pipeline stages: balancing reduces the imbalance; uneven first and last chunks, given or
automatic (torchtitan's split, as Llama 3 ran), or Megatron-LM's with the embedding and the loss
accounted for, where the end chunks may hold no layer."""

from __future__ import annotations

import pytest

from helpers import BARE, GPU, cli, simulate_settings, tiny_model
from simtrain import api, costs
from simtrain.engine import simulator as engine
from simtrain.costs import Shape
from simtrain.errors import SpecError
from simtrain.network.fixed import FixedLatency
from simtrain.schedules import generate
from simtrain.specs.model import load_model
from simtrain.specs.parallel import ParallelSpec
from simtrain.topology.mesh import build_mesh
from simtrain.workload.data_parallel import ParamLayout
from simtrain.workload.lower import lower
from simtrain.workload.memory import memory_plan
from simtrain.workload.options import WorkloadOptions
from simtrain.workload.program import STREAM
from simtrain.workload.stages import accounted_split, auto_split, chunk_layers, describe_split, split_layers


def test_balancing_reduces_imbalance_on_126_layers():
    base = dict(model="llama3-405b", topology="h100-ib", gpus=128, tp=8, pp=16, seq=4096, gbs=32)
    naive = simulate_settings(**base, first_stage_layers=6, last_stage_layers=8)  # fewer layers next to the embedding
    balanced = simulate_settings(**base, balance_stages=True)
    assert balanced.report["stage_imbalance"] < naive.report["stage_imbalance"]
    assert balanced.report["breakdown_s"]["imbalance"] < naive.report["breakdown_s"]["imbalance"]


@pytest.mark.quick
def test_uneven_chunk_layers():
    m = load_model("llama3-405b")
    split = chunk_layers(m, 16, 7, 7)
    assert [len(r) for r in split] == [7] + [8] * 14 + [7]
    assert split[-1].stop == 126


@pytest.mark.quick
def test_automatic_split_lightens_the_end_chunks():
    assert auto_split(126, 16) == [7] + [8] * 14 + [7]  # Llama 3 405B as Llama 3 ran it
    assert auto_split(80, 4) == [20] * 4  # even where the layers divide
    assert auto_split(30, 4) == [7, 8, 8, 7]
    assert auto_split(81, 4) == [20, 21, 21, 19]  # torchtitan: the first chunks take the remainder
    assert auto_split(5, 4) == [1, 2, 1, 1]  # too few layers to lighten both ends
    for layers, chunks in ((126, 16), (61, 8), (7, 3), (95, 12)):
        sizes = auto_split(layers, chunks)
        assert sum(sizes) == layers and min(sizes) >= 1
    assert describe_split([7] + [8] * 14 + [7]) == "7 + 14 x 8 + 7"
    m = load_model("llama3-405b")
    assert [len(r) for r in chunk_layers(m, 16)] == [7] + [8] * 14 + [7]


def test_llama3_405b_runs_on_pp16_without_layer_flags(tmp_path):
    """126 layers on PP=16 split automatically; ``simtrain run`` prints the split."""
    code, out, err = cli("run", "--model", "llama3-405b", "--topology", "h100-ib", "--gpus", 16384, "--tp", 8,
                         "--pp", 16, "--seq", 8192, "--gbs", 2048, "--out", tmp_path, "--no-plot")
    assert code == 0, err
    assert "layers per pipeline chunk: 7 + 14 x 8 + 7" in out


@pytest.mark.quick
def test_megatron_accounts_for_the_embedding_and_the_loss():
    """Megatron-LM's --account-for-embedding/loss-in-pipeline-split: (L + 2) slots, as many per
    chunk, the end chunks one layer fewer, even where the layers divide."""
    assert accounted_split(94, 32, True, True) == [2] + [3] * 30 + [2]  # 96 slots / (pp=8 x vpp=4)
    assert accounted_split(94, 96, True, True) == [0] + [1] * 94 + [0]  # pp=32 x vpp=3: the ends hold no layer
    assert accounted_split(95, 32, True, False) == [2] + [3] * 31  # the embedding alone: 96 slots
    assert accounted_split(6, 4, True, True) == [1, 2, 2, 1]
    m = load_model("qwen3-235b-a22b")
    assert [len(r) for r in chunk_layers(m, 96, embedding=True, loss=True)][:3] == [0, 1, 1]
    with pytest.raises(SpecError, match="the 96 layer slots .* do not divide by the 20 pipeline chunks"):
        accounted_split(94, 20, True, True)


@pytest.mark.quick
def test_accounted_split_is_checked_against_the_layout():
    base = dict(model="qwen3-235b-a22b", topology="h100-ib", tp=2, ep=8, schedule="interleaved-1f1b", gbs=2048,
                seq=4096, account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
    sc = api.resolve(dict(base, gpus=512, pp=32, vpp=3))  # refused without the flags: 96 chunks, 94 layers
    assert sc.parallel.account_for_embedding_in_pipeline_split and sc.parallel.account_for_loss_in_pipeline_split
    with pytest.raises(SpecError, match=r"pp\*vpp=40 \(pp=8, vpp=5\) does not divide the 96 layer slots .* "
                                        r"with pp=8 use vpp 1, 2, 3, 4, 6, 12"):
        api.resolve(dict(base, gpus=128, pp=8, vpp=5))
    with pytest.raises(SpecError, match="first_stage_layers=2 with --account-for-embedding-in-pipeline-split"):
        api.resolve(dict(base, gpus=512, pp=32, vpp=3, first_stage_layers=2))
    with pytest.raises(SpecError, match=r"exceeds the 94 layers .*\(--account-for-embedding-in-pipeline-split"):
        api.resolve(dict(base, gpus=512, pp=32, vpp=3, account_for_embedding_in_pipeline_split=False,
                         account_for_loss_in_pipeline_split=False))


def _lowered(schedule: str, pp: int, vpp: int, opts: WorkloadOptions = WorkloadOptions()):
    """6 layers + embedding + loss = 8 slots on 8 chunks: the end chunks hold no layer."""
    par = ParallelSpec(pp=pp, vpp=vpp, gbs=8, seq=1024, account_for_embedding_in_pipeline_split=True,
                       account_for_loss_in_pipeline_split=True)
    sched = generate(schedule, pp, par.num_microbatches, **({"vpp": vpp} if vpp > 1 else {}))
    return par, sched, lower(tiny_model(layers=6), par, GPU, sched, build_mesh(1, 1, 1, pp), opts)


@pytest.mark.quick
@pytest.mark.parametrize("schedule, pp, vpp", [("1f1b", 8, 1), ("interleaved-1f1b", 4, 2), ("zb-v", 4, 1)])
def test_empty_end_chunks_run(schedule, pp, vpp):
    par, sched, prog = _lowered(schedule, pp, vpp)
    assert prog.layers_per_chunk == [0, 1, 1, 1, 1, 1, 1, 0]
    first = {op.name for op in prog.ops if op.stage >= 0 and sched.chunk_of_stage(op.stage) == 0
             and op.stream == STREAM["compute"]}
    last = {op.name for op in prog.ops if op.stage >= 0 and sched.chunk_of_stage(op.stage) == 7
            and op.stream == STREAM["compute"]}
    assert first <= {"embed.F", "embed.B", "embed.W"} and "embed.F" in first  # no layer op on chunk 0
    assert last <= {"lm_head.F", "lm_head.B", "lm_head.I", "lm_head.W"} and "lm_head.F" in last
    res = engine.run(prog, FixedLatency())
    assert res.timeline.end_s > 0
    if schedule == "zb-v":  # the embedding's W of the empty first chunk waits for the gradient it needs
        by_id = {op.id: op for op in prog.ops}
        w = next(op for op in prog.ops if op.name == "embed.W")
        assert any(by_id[d].name == "pp.send.grad" for d in w.deps)


@pytest.mark.quick
def test_an_empty_chunk_holds_no_activations():
    """1F1B on 8 chunks of 0, 1 x 6, 0 layers: pipeline rank 0 (the embedding alone) keeps nothing
    beyond its static memory, rank 1 keeps one layer's activations for each of its 7 micro-batches
    in flight (p - stage)."""
    par, sched, _ = _lowered("1f1b", 8, 1)
    model = tiny_model(layers=6)
    opts = WorkloadOptions()
    chunks = split_layers(model, par, GPU, 8, opts)
    layout = ParamLayout(model, par, sched, chunks)
    static = [layout.static_of_pipeline_rank(i)[0] + layout.reduce_buffer_bytes(i, opts) for i in range(8)]
    plan = memory_plan(model, par, GPU, sched, 0, opts)
    full = costs.layer_activation_bytes(model, Shape.of(par), full_recompute=False)
    assert plan[0] == static[0]
    assert plan[1] - static[1] == pytest.approx(7 * full)


@pytest.mark.quick
def test_empty_end_chunks_without_the_embedding_and_the_head_pass_through():
    """With no embedding and no LM head the end chunks emit nothing but their sends, which wait for
    what they received: the last chunk returns the gradient once the activation has arrived."""
    _, sched, prog = _lowered("interleaved-1f1b", 4, 2, BARE)
    by_id = {op.id: op for op in prog.ops}
    sends = [op for op in prog.ops if op.name == "pp.send.grad" and op.stage == sched.chain_length - 1]
    assert len(sends) == 8
    assert all(by_id[d].name == "pp.send.act" for op in sends for d in op.deps)
    engine.run(prog, FixedLatency())


@pytest.mark.quick
def test_mtp_layers_run_on_the_last_chunk():
    """The split is of the decoder layers; the MTP layers follow the last chunk's (Megatron-Core
    builds the MTP block on the last stage): NeMo's DeepSeek-V3 at PP16, 3 + 14 x 4 + 2 decoder
    layers, runs its MTP layer after layers 59 and 60. The step simulates, the MTP layer's
    all-to-alls and its second head on the last stage."""
    from dataclasses import replace

    m = replace(load_model("deepseek-v3"), mtp_layers=1)
    split = chunk_layers(m, 16, 3, 2)
    assert [len(r) for r in split] == [3] + [4] * 14 + [3] and split[-1] == range(59, 62)
    tiny = replace(tiny_model(layers=4), mtp_layers=1)
    assert [list(r) for r in chunk_layers(tiny, 2)] == [[0, 1], [2, 3, 4]]
    base = dict(model="llama3-8b", topology="h100-ib", gpus=16, tp=2, pp=2, seq=2048, gbs=16)
    plain, with_mtp = simulate_settings(**base), simulate_settings(**base, mtp_layers=1)
    assert with_mtp.report["step_time_s"] > plain.report["step_time_s"]
    assert with_mtp.report["model_flops_per_step"] > plain.report["model_flops_per_step"]


@pytest.mark.quick
def test_last_chunk_of_mtp_and_loss_alone():
    """Megatron Bridge's H100 layout for DeepSeek-V3, ``Et|(tt|)*30mL``: one decoder layer on the
    first of 32 chunks, two on each of the next 30, and the last holds the MTP module and the loss
    with no decoder layer (``last_stage_layers=0``). Without MTP modules a chunk of no layer is
    refused, in one line naming the value."""
    from dataclasses import replace

    m = replace(load_model("deepseek-v3"), mtp_layers=1)
    split = chunk_layers(m, 32, 1, 0)
    assert [len(r) for r in split] == [1] + [2] * 30 + [1] and split[-1] == range(61, 62)
    tiny = replace(tiny_model(layers=4), mtp_layers=1)
    assert [list(r) for r in chunk_layers(tiny, 4, 2, 0)] == [[0, 1], [2], [3], [4]]
    base = dict(model="llama3-8b", topology="h100-ib", gpus=8, tp=2, pp=4, seq=1024, gbs=8,
                first_stage_layers=2, last_stage_layers=0)
    res = simulate_settings(**base, mtp_layers=1)
    assert res.report["layers_per_chunk"] == [2, 15, 15, 1]  # the MTP module's layer alone
    with pytest.raises(SpecError, match=r"^last_stage_layers=0: must be an integer >= 0 \(with multi-token "
                                        r"prediction modules\) or 1$"):
        simulate_settings(**base)
