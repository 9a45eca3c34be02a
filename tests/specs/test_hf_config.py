"""Hugging Face ``config.json`` files: every family's parameter counts, equality with the presets,
unsupported types and layouts, missing and mistyped keys."""

from __future__ import annotations

import json
import re

import pytest

from simtrain.errors import SpecError
from simtrain.specs.hf_config import HF_FAMILIES
from simtrain.specs.model import ModelSpec, load_model, model_from_hf_config

pytestmark = pytest.mark.quick


LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.40.0.dev0", "use_cache": True, "vocab_size": 128256,
}


MISTRAL_7B = {
    "architectures": ["MistralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": False, "vocab_size": 32000,
}


MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
    "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
    "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
    "sliding_window": None, "tie_word_embeddings": False, "vocab_size": 32000,
}


QWEN2_7B = {
    "architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu", "hidden_size": 3584,
    "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28,
    "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28,
    "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 131072, "tie_word_embeddings": False, "use_sliding_window": False,
    "vocab_size": 152064,
}


QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 12288,
    "max_position_embeddings": 40960, "model_type": "qwen3", "num_attention_heads": 32,
    "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000, "tie_word_embeddings": False, "vocab_size": 151936,
}


QWEN3_235B = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "decoder_sparse_step": 1,
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 12288,
    "max_position_embeddings": 40960, "max_window_layers": 94, "mlp_only_layers": [],
    "model_type": "qwen3_moe", "moe_intermediate_size": 1536, "norm_topk_prob": True,
    "num_attention_heads": 64, "num_experts": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 94, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "tie_word_embeddings": False, "vocab_size": 151936,
}


DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "ep_size": 1,
    "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
    "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1,
    "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True,
    "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
    "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_scaling": {"type": "yarn", "factor": 40}, "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid", "tie_word_embeddings": False, "topk_group": 4,
    "topk_method": "noaux_tc", "v_head_dim": 128, "vocab_size": 129280,
}


GPT2_124M = {
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
    "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768,
    "n_head": 12, "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "vocab_size": 50257,
}


PYTHIA_1_4B = {
    "architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0,
    "hidden_act": "gelu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 8192, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
    "model_type": "gpt_neox", "num_attention_heads": 16, "num_hidden_layers": 24,
    "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": False,
    "use_parallel_residual": True, "vocab_size": 50304,
}


# (config, expected total, expected active): exact counts where the source publishes them
# (GPT-2 124,439,808; Pythia-1.4B 1,414,647,808 in the Pythia paper), else model-card values.
HF_CASES = {
    "llama": (LLAMA3_8B, 8.03e9, None),
    "mistral": (MISTRAL_7B, 7.24e9, None),
    "mixtral": (MIXTRAL_8X7B, 46.7e9, 12.9e9),
    "qwen2": (QWEN2_7B, 7.62e9, None),
    "qwen3": (QWEN3_8B, 8.2e9, None),
    "qwen3_moe": (QWEN3_235B, 235e9, 22e9),
    "deepseek_v3": (DEEPSEEK_V3, 671e9, 37e9),
    "gpt2": (GPT2_124M, 124_439_808, None),
    "gpt_neox": (PYTHIA_1_4B, 1_414_647_808, None),
}


def write_json(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2))
    return path


def test_hf_cases_cover_every_family():
    assert set(HF_CASES) == set(HF_FAMILIES)


@pytest.mark.parametrize("family", sorted(HF_CASES))
def test_hf_config_families(tmp_path, family):
    config, total, active = HF_CASES[family]
    m = load_model(str(write_json(tmp_path, config)))
    assert isinstance(m, ModelSpec)
    assert m.params_total == pytest.approx(total, rel=0.01)
    if active is not None:
        assert m.params_active == pytest.approx(active, rel=0.03)
    else:
        assert m.params_active == m.params_total


def test_hf_exact_counts():
    gpt2 = model_from_hf_config(GPT2_124M, "gpt2")
    assert gpt2.params_total == 124_439_808
    assert (gpt2.ffn, gpt2.learned_pos, gpt2.tied_embeddings) == (4 * 768, 1024, True)
    pythia = model_from_hf_config(PYTHIA_1_4B, "pythia")
    assert pythia.params_total == 1_414_647_808
    assert pythia.params_nonembedding == 1_208_602_624  # Pythia paper, table 1
    assert pythia.learned_pos == 0 and pythia.bias and pythia.norm == "layer"
    qwen2 = model_from_hf_config(QWEN2_7B, "qwen2")
    assert qwen2.attention_params() == (3584 * (3584 + 2 * 512) + 3584 * 3584
                                        + 3584 + 2 * 512)


def test_hf_llama3_8b_equals_preset(tmp_path):
    hf = load_model(str(write_json(tmp_path, LLAMA3_8B)))
    preset = load_model("llama3-8b")
    assert hf.name == tmp_path.name
    for fn in ("attention_params", "dense_mlp_params", "norm_params_per_layer",
               "embedding_params", "lm_head_params"):
        assert getattr(hf, fn)() == getattr(preset, fn)()
    assert hf.layer_params(0) == preset.layer_params(0)
    assert (hf.params_total, hf.params_active, hf.params_nonembedding) == (
        preset.params_total, preset.params_active, preset.params_nonembedding)


@pytest.mark.parametrize("name, family", [("qwen3-235b-a22b", "qwen3_moe"),
                                          ("deepseek-v3", "deepseek_v3"),
                                          ("mixtral-8x7b", "mixtral")])
def test_hf_moe_equals_preset(name, family):
    hf = model_from_hf_config(HF_CASES[family][0], family)
    preset = load_model(name)
    assert (hf.params_total, hf.params_active) == (preset.params_total, preset.params_active)


def test_unsupported_model_type(tmp_path):
    path = write_json(tmp_path, {**LLAMA3_8B, "model_type": "falcon"})
    with pytest.raises(SpecError, match=r"model_type = 'falcon' is not supported.*llama"):
        load_model(str(path))


def test_hf_missing_and_wrong_type_keys(tmp_path):
    config = dict(LLAMA3_8B)
    del config["intermediate_size"]
    with pytest.raises(SpecError, match=r"cfg\.json: missing key 'intermediate_size'"):
        load_model(str(write_json(tmp_path, config, "cfg.json")))
    with pytest.raises(SpecError, match=r"src: hidden_size = '4096': expected int"):
        model_from_hf_config({**LLAMA3_8B, "hidden_size": "4096"}, "src")
    with pytest.raises(SpecError, match=r"src: tie_word_embeddings = 0: expected bool"):
        model_from_hf_config({**LLAMA3_8B, "tie_word_embeddings": 0}, "src")
    with pytest.raises(SpecError, match=r"src: missing key 'kv_lora_rank'"):
        model_from_hf_config({k: v for k, v in DEEPSEEK_V3.items() if k != "kv_lora_rank"}, "src")
    with pytest.raises(SpecError, match=r"src: model llama: kv_heads = 5: must divide heads = 32"):
        model_from_hf_config({**LLAMA3_8B, "num_key_value_heads": 5}, "src")
    with pytest.raises(SpecError, match=r"src: expected a JSON object"):
        model_from_hf_config([1, 2], "src")  # type: ignore[arg-type]


def test_hf_unsupported_layouts():
    with pytest.raises(SpecError, match=r"mlp_only_layers = \[5\]"):
        model_from_hf_config({**QWEN3_235B, "mlp_only_layers": [5]}, "src")
    dense_first = model_from_hf_config({**QWEN3_235B, "mlp_only_layers": [0, 1]}, "src")
    assert dense_first.dense_layers == 2 and dense_first.moe_layers == 92


@pytest.mark.parametrize("key", ["num_key_value_heads", "head_dim"])
def test_zero_heads_or_width_is_refused(key):
    """0 became multi-head attention or the default width; null keeps the default."""
    config = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
              "intermediate_size": 1024, "vocab_size": 1000}
    with pytest.raises(SpecError, match=f"config.json: {key} = 0: must be > 0"):
        model_from_hf_config({**config, key: 0}, "config.json")
    assert model_from_hf_config({**config, key: None}, "config.json").kv_heads == 4


def test_a_key_given_twice_is_refused(tmp_path):
    from helpers import assert_user_error

    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, '
                    '"intermediate_size": 1024, "vocab_size": 1000, "hidden_size": 512}')
    message = f"{path}: the key 'hidden_size' is given twice in one object (256 and 512); keep one"
    with pytest.raises(SpecError, match=re.escape(message)):
        load_model(str(path))
    assert_user_error("run", "--model", path, "--gpus", 8, "--no-plot", "--out", tmp_path / "o", contains=message)
    nested = tmp_path / "nested.json"
    nested.write_text('{"a": {"x": 1, "x": 2}}')
    with pytest.raises(SpecError, match="the key 'x' is given twice"):
        load_model(str(nested))
