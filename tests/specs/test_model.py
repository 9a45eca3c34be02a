"""Model specs: preset parameter counts against published totals, TOML files, errors."""

from __future__ import annotations

import pytest

from simtrain.errors import SpecError
from simtrain.specs.model import ModelSpec, list_models, load_model

pytestmark = pytest.mark.quick


# Published totals (and active counts for MoE models): model cards, papers and announcements.
PUBLISHED = {
    "llama3-8b": (8.03e9, None),
    "llama3-70b": (70.6e9, None),
    "llama3-405b": (405.9e9, None),
    "gpt3-175b": (175e9, None),
    "mixtral-8x7b": (46.7e9, 12.9e9),
    "mixtral-8x22b": (140.6e9, 39.1e9),
    "qwen3-235b-a22b": (235e9, 22e9),
    "deepseek-v3": (671e9, 37e9),
}


def test_list_models_is_sorted_and_complete():
    names = list_models()
    assert names == sorted(names)
    assert set(PUBLISHED) <= set(names)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_total_matches_published(name):
    m = load_model(name)
    assert m.name == name
    total, active = PUBLISHED[name]
    assert m.params_total == pytest.approx(total, rel=0.01)
    if active is None:
        assert not m.is_moe and m.params_active == m.params_total
    else:
        assert m.is_moe
        assert m.params_active == pytest.approx(active, rel=0.03)
        assert m.params_active < m.params_total


def test_llama3_8b_hand_counts():
    m = load_model("llama3-8b")
    h, f, v = 4096, 14336, 128256
    assert (m.head_dim, m.kv_heads, m.q_width, m.kv_width) == (128, 8, 4096, 1024)
    assert m.attention_params() == 4096 * (4096 + 2 * 1024) + 4096 * 4096
    assert m.dense_mlp_params() == 3 * h * f
    assert m.norm_params_per_layer() == 2 * h
    assert m.layer_params(0) == m.layer_params(31) == 218_112_000
    assert m.embedding_params() == m.lm_head_params() == v * h
    assert m.params_total == 32 * 218_112_000 + 2 * v * h + h == 8_030_261_248
    assert m.params_nonembedding == 32 * 218_112_000 + h
    assert not m.is_moe and m.moe_layers == 0 and m.expert_params() == 0
    with pytest.raises(IndexError):
        m.layer_params(32)


def test_gpt3_counts_biases_positions_and_tying():
    m = load_model("gpt3-175b")
    h = 12288
    assert m.attention_params() == 4 * h * h + 4 * h
    assert m.dense_mlp_params() == 8 * h * h + 5 * h
    assert m.norm_params_per_layer() == 4 * h
    assert m.lm_head_params() == 0
    assert m.embedding_params() == (50257 + 2048) * h


def test_mixtral_moe_parts():
    m = load_model("mixtral-8x7b")
    h = 4096
    assert m.moe_layers == 32 and all(m.is_moe_layer(i) for i in range(32))
    assert m.expert_params() == 3 * h * 14336
    assert m.router_params() == h * 8
    assert m.shared_expert_params() == 0
    assert m.layer_params(0) - m.layer_active_params(0) == 6 * m.expert_params()


def test_deepseek_v3_mla_and_dense_layers():
    m = load_model("deepseek-v3")
    h = 7168
    assert [m.is_moe_layer(i) for i in range(4)] == [False, False, False, True]
    assert m.moe_layers == 58
    assert m.head_dim == 192 and m.q_width == m.kv_width == 128 * 192
    mla = (h * 1536 + 1536 * 128 * 192 + h * (512 + 64) + 512 * 128 * (128 + 128)
           + 128 * 128 * h)
    assert m.attention_params() == mla == 187_105_280
    assert m.norm_params_per_layer() == 2 * h + 1536 + 512
    assert m.shared_expert_params() == m.expert_params() == 3 * h * 2048
    assert m.layer_params(0) == mla + 3 * h * 18432 + 2 * h + 2048
    assert m.layer_params(3) == mla + 257 * 3 * h * 2048 + h * 256 + 2 * h + 2048


def test_qwen3_head_dim_differs_from_hidden_over_heads():
    m = load_model("qwen3-235b-a22b")
    assert m.q_width == 64 * 128 != m.hidden
    assert m.kv_width == 4 * 128
    assert m.norm_params_per_layer() == 2 * 4096 + 2 * 128


def test_native_toml_file(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text("hidden = 64\nlayers = 2\nheads = 4\nffn = 256\nvocab = 1000\n")
    m = load_model(str(path))
    assert (m.name, m.kv_heads, m.head_dim) == ("tiny", 4, 16)
    assert m.params_total == 2 * (4 * 64 * 64 + 3 * 64 * 256 + 2 * 64) + 2 * 1000 * 64 + 64


# ----- errors -----------------------------------------------------------------------------------


def test_unknown_preset_suggests_close_match():
    with pytest.raises(SpecError, match=r"unknown model 'llama3-8'.*did you mean 'llama3-8b'"):
        load_model("llama3-8")


def test_unknown_toml_key(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("hidden = 64\nlayers = 2\nheads = 4\nffn = 256\nvocab = 1000\nkv_head = 2\n")
    with pytest.raises(SpecError,
                       match=r"bad\.toml.*unknown key 'kv_head'.*did you mean 'kv_heads'"):
        load_model(str(path))


def test_toml_wrong_type_and_missing_key(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('hidden = "64"\nlayers = 2\nheads = 4\nffn = 256\nvocab = 1000\n')
    with pytest.raises(SpecError, match=r"bad\.toml: hidden = '64': expected int"):
        load_model(str(path))
    path.write_text("hidden = 64\nlayers = 2\nheads = 4\nffn = 256\n")
    with pytest.raises(SpecError, match=r"bad\.toml: missing key 'vocab'"):
        load_model(str(path))
    path.write_text("hidden = 64\nlayers = 2\nheads = 4\nffn = 256\nvocab = 10\ngated_mlp = 1\n")
    with pytest.raises(SpecError, match=r"gated_mlp = 1: expected bool"):
        load_model(str(path))


def test_toml_impossible_values(tmp_path):
    path = tmp_path / "bad.toml"
    base = "hidden = 64\nheads = 4\nffn = 256\nvocab = 1000\n"
    for extra, pattern in [("layers = 2\nkv_heads = 3\n", r"kv_heads = 3: must divide heads = 4"),
                           ("layers = 2\nnum_experts = 4\ntop_k = 5\nmoe_ffn = 8\n",
                            r"top_k = 5: must be in 1\.\.num_experts = 4"),
                           ("layers = 2\nnum_experts = 4\ntop_k = 1\nmoe_ffn = 8\n"
                            "dense_layers = 3\n", r"dense_layers = 3: must be <= layers = 2"),
                           ("layers = 2\ntop_k = 2\n", r"top_k = 2: needs num_experts > 0"),
                           ('layers = 2\nnorm = "batch"\n', r"norm = 'batch': must be one of"),
                           ("layers = 0\n", r"layers = 0: must be > 0")]:
        path.write_text(base + extra)
        with pytest.raises(SpecError, match=pattern):
            load_model(str(path))


def test_modelspec_validation_names_model_field_value():
    with pytest.raises(SpecError, match=r"model m: hidden = -1: must be > 0"):
        ModelSpec(name="m", hidden=-1, layers=1, heads=1, ffn=1, vocab=1)
    with pytest.raises(SpecError, match=r"model m: hidden = 10: not divisible by heads = 3"):
        ModelSpec(name="m", hidden=10, layers=1, heads=3, ffn=1, vocab=1)
    with pytest.raises(SpecError, match=r"model m: qk_rope_head_dim = 0"):
        ModelSpec(name="m", hidden=8, layers=1, heads=2, ffn=1, vocab=1, kv_lora_rank=4,
                  qk_nope_head_dim=2, v_head_dim=2)
    with pytest.raises(SpecError, match=r"model m: layers = True: expected int"):
        ModelSpec(name="m", hidden=8, layers=True, heads=2, ffn=1, vocab=1)


def test_malformed_json_names_file_and_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n  "model_type": "llama",\n  "hidden_size": 4096,,\n}\n')
    with pytest.raises(SpecError, match=r"config\.json: malformed JSON at line 3"):
        load_model(str(path))


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match=r"nope\.toml: file not found"):
        load_model(str(tmp_path / "nope.toml"))


def test_multi_token_prediction_modules():
    """DeepSeek-V3 with its MTP module: one more layer built like the last decoder layer (MoE),
    plus eh_proj 2h -> h and three norms; the 685e9 of the Hugging Face checkpoint hold the 671e9
    main model and about 14e9 of MTP weights, its own copies of the embedding and the head included
    (2 V h = 1.9e9 of them), which simtrain shares with the main model as Megatron-Core does."""
    from dataclasses import replace

    base = load_model("deepseek-v3")
    m = replace(base, mtp_layers=1)
    assert (m.total_layers, m.is_moe_layer(61)) == (62, True)
    extra = m.params_total - base.params_total
    assert extra == base.layer_params(60) + 2 * 7168 * 7168 + 3 * 7168
    assert 11.5e9 < extra < 12.5e9 and 13e9 < extra + 2 * 129280 * 7168 < 14.5e9  # "14B", rounded
    with pytest.raises(IndexError):
        m.is_moe_layer(62)
    with pytest.raises(SpecError, match="mtp_layers"):
        replace(base, mtp_layers=-1)


@pytest.mark.parametrize("name", list_models())
def test_parameter_sums_by_runs_of_like_layers_equal_the_layer_by_layer_sum(name):
    """The totals add a run of like layers at a time (dense, MoE, MTP); the same integers as
    adding layer by layer, and as fast for any layer count."""
    import dataclasses

    for mtp in (0, 2):
        m = dataclasses.replace(load_model(name), mtp_layers=mtp)
        ends = m.embedding_params() + m.lm_head_params() + m.final_norm_params()
        assert m.params_total == sum(m.layer_params(i) for i in range(m.total_layers)) + ends
        assert m.params_active == sum(m.layer_active_params(i) for i in range(m.total_layers)) + ends
    huge = dataclasses.replace(load_model(name), mtp_layers=2**62)
    assert huge.params_total > 2**62
