"""ParallelSpec: derivation of dp, the impossible combinations, recompute values."""

from __future__ import annotations

import re

import pytest

from simtrain.errors import SpecError
from simtrain.specs.model import load_model
from simtrain.specs.parallel import resolve_parallel, validate_parallel

pytestmark = pytest.mark.quick


L70 = load_model("llama3-70b")


MIX = load_model("mixtral-8x7b")


def test_dp_derived():
    par = resolve_parallel(64, tp=8, pp=4, gbs=512, seq=8192)
    assert par.dp == 2 and par.num_microbatches == 256 and par.world == 64
    validate_parallel(par, L70, 64)


@pytest.mark.parametrize("kw, model, message", [
    (dict(tp=16, gbs=64), L70, "tp=16 does not divide the 8 KV heads"),
    (dict(tp=3, dp=1, gbs=64), L70, "does not match gpus=64"),
    (dict(tp=8, pp=3, dp=1, gbs=64), L70, "does not match"),
    (dict(tp=8, pp=4, gbs=3), L70, "gbs=3 is not divisible by dp*mbs=2"),
    (dict(tp=8, pp=4, gbs=4), L70, "fewer than pp=4 stages"),
    (dict(tp=8, pp=8, vpp=12, gbs=64), L70, "pp*vpp=96 (pp=8, vpp=12) exceeds the 80 layers"),
    (dict(tp=8, cp=2, attention="eager", gbs=64), L70, "attention=eager with cp=2"),
    (dict(tp=8, grad_dtype="fp16", gbs=64), L70, "grad_dtype='fp16'"),
    (dict(tp=8, ep=2, gbs=64), L70, "has no experts"),
    (dict(tp=1, ep=3, gbs=64), MIX, "ep=3 does not divide the 8 experts"),
    (dict(tp=8, zero=4, gbs=64), L70, "ZeRO stage must be 0, 1, 2 or 3"),
    (dict(tp=8, cp=2, seq=4098, gbs=64), L70, "seq=4098 is not divisible by 2*cp=4"),
    (dict(tp=8, recompute="100", gbs=64), L70, "recompute=100 layers exceeds the 80"),
    (dict(tp=8, order="tp-cp-dp-pp", gbs=64), L70, "order 'tp-cp-dp-pp': must be a permutation"),
    (dict(tp=1, pp=4, ep=8, order="tp-cp-pp-ep-dp", gbs=64), MIX, "pp is inside ep"),
    (dict(tp=1, ep=8, moe_dispatcher="nccl", gbs=64), MIX, "moe_dispatcher='nccl': must be one of alltoall, deepep"),
])
def test_impossible(kw, model, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        gpus = 64
        par = resolve_parallel(gpus, **kw)
        validate_parallel(par, model, gpus)


def test_recompute_parse():
    with pytest.raises(SpecError, match="recompute='some'"):
        resolve_parallel(8, recompute="some")
    assert resolve_parallel(8, recompute="FULL").recompute == "full"
    assert resolve_parallel(8, recompute=3).recompute_layers(10) == 3


@pytest.mark.parametrize("key", ["first_stage_layers", "last_stage_layers"])
def test_end_chunk_layers_leave_a_layer_for_every_other_chunk(key):
    # 80 layers on pp*vpp = 8 chunks: the other 7 chunks need a layer each, so at most 73
    validate_parallel(resolve_parallel(64, tp=8, pp=4, gbs=64, vpp=2, schedule="interleaved-1f1b",
                                       **{key: 73}), L70, 64)
    for value in (74, 10 ** 18):
        par = resolve_parallel(64, tp=8, pp=4, gbs=64, vpp=2, schedule="interleaved-1f1b", **{key: value})
        with pytest.raises(SpecError, match=rf"^{key}={value}: leaves no layer .* at most 73 with pp\*vpp=8$"):
            validate_parallel(par, L70, 64)


@pytest.mark.parametrize("kw, model, message", [
    (dict(tp=8, gbs=64), L70, "with llama3-70b is dense"),
    (dict(tp=1, gbs=64), MIX, "with ep=1"),
    (dict(tp=1, ep=4, schedule="zb-h1", gbs=64), MIX, "with schedule zb-h1"),
    (dict(tp=1, ep=4, recompute="full", gbs=64), MIX, "with recompute=full"),
])
def test_1f1b_overlap_needs_expert_parallelism_and_the_1f1b_loop(kw, model, message):
    """Megatron-LM's checks of --overlap-moe-expert-parallel-comm, one line naming the value and
    the runs it applies to."""
    par = resolve_parallel(64, pp=4, seq=4096, overlap_moe_expert_parallel_comm=True, **kw)
    with pytest.raises(SpecError, match=f"overlap_moe_expert_parallel_comm=True {message}: it applies to MoE "
                                        f"models with ep > 1 under schedule 1f1b or interleaved-1f1b") as err:
        validate_parallel(par, model, 64)
    assert "\n" not in str(err.value)


def test_recompute_modules_are_selective_recompute_s_and_must_exist_in_the_model():
    llama, mixtral = load_model("llama3-8b"), load_model("mixtral-8x7b")
    par = resolve_parallel(8, tp=8, gbs=8, seq=2048, recompute="selective", recompute_modules="mlp, layernorm,mlp")
    assert par.recompute_modules == ("mlp", "layernorm") and par.recomputed_modules == ("mlp", "layernorm")
    validate_parallel(par, llama, 8)
    assert resolve_parallel(8, tp=8, gbs=8, recompute="selective").recomputed_modules == ("core_attn",)
    assert resolve_parallel(8, tp=8, gbs=8, recompute="full").recomputed_modules == ()
    with pytest.raises(SpecError, match=r"recompute_modules='mlp,attn': unknown module 'attn'; valid: core_attn, "
                                        r"mlp, moe, moe_act, layernorm, mla_up_proj, shared_experts"):
        resolve_parallel(8, tp=8, gbs=8, recompute="selective", recompute_modules="mlp,attn")
    with pytest.raises(SpecError, match=r"recompute_modules='mlp' with recompute='full': .*use recompute=selective"):
        validate_parallel(resolve_parallel(8, tp=8, gbs=8, recompute="full", recompute_modules="mlp"), llama, 8)
    for name, model in (("moe_act", llama), ("mla_up_proj", llama), ("mlp", mixtral), ("shared_experts", mixtral)):
        bad = resolve_parallel(8, tp=8, gbs=8, recompute="selective", recompute_modules=name)
        with pytest.raises(SpecError, match=rf"recompute_modules='{name}': {model.name} has no {name} module; "
                                            r"valid for it: core_attn"):
            validate_parallel(bad, model, 8)


def test_a_tp_above_the_vocabulary_is_refused():
    """vocab_size smaller than tp divided by zero in the kernel timing."""
    from helpers import tiny_model

    with pytest.raises(SpecError, match=re.escape("tp=2 exceeds the vocabulary of tiny (vocab_size = 1): each "
                                                  "tensor-parallel rank holds a slice of the embedding and the LM "
                                                  "head (valid tp: at most 1)")):
        validate_parallel(resolve_parallel(8, tp=2, gbs=8), tiny_model(vocab=1), 8)
    validate_parallel(resolve_parallel(8, tp=2, gbs=8), tiny_model(vocab=2), 8)


def test_a_tp_above_the_vocabulary_of_a_config_json_is_one_line(tmp_path):
    import json

    from helpers import assert_user_error

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "intermediate_size": 1024, "vocab_size": 1}))
    assert_user_error("run", "--model", path, "--topology", "h100-ib", "--gpus", 8, "--tp", 2, "--pp", 1, "--gbs", 8,
                      "--seq", 256, "--no-plot", "--out", tmp_path / "o", contains="(vocab_size = 1)")
