"""Hugging Face ``config.json`` -> model fields, per model family.

Each family's keys and defaults follow its ``transformers`` configuration and modeling files
(``configuration_llama.py``/``modeling_llama.py``, ``modeling_mixtral.py``, ``modeling_qwen2.py``,
``modeling_qwen3.py``, ``modeling_qwen3_moe.py``, ``modeling_deepseek_v3.py``, ``modeling_gpt2.py``,
``modeling_gpt_neox.py``); the fields are those of :class:`simtrain.specs.model.ModelSpec`.
"""

from __future__ import annotations

from typing import Any

from simtrain.errors import SpecError
from simtrain.specs.strict import check_value

HF_FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "deepseek_v3",
               "gpt2", "gpt_neox")


def hf_config_fields(data: dict[str, Any], source: str, name: str | None = None) -> dict[str, Any]:
    """The :class:`~simtrain.specs.model.ModelSpec` fields of a Hugging Face ``config.json``
    given as a dict; ``source`` names it in messages.

    Keys the model does not depend on (rope, token ids, ...) are ignored; ``null`` for an
    optional key means the default of the family's ``Configuration`` class.
    """
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a JSON object, got {type(data).__name__}")

    def req(key: str, kind: type = int, positive: bool = True) -> Any:
        if key not in data or data[key] is None:
            raise SpecError(f"{source}: missing key {key!r} (needed for "
                            f"model_type {data.get('model_type')!r})")
        return check_value(f"{source}: {key}", data[key], kind, positive=positive and kind is int)

    def opt(key: str, default: Any, kind: type = int, positive: bool = False) -> Any:
        if data.get(key) is None:
            return default
        return check_value(f"{source}: {key}", data[key], kind, positive=positive,
                           min_value=0 if kind is int else None)

    mt = data.get("model_type")
    if mt not in HF_FAMILIES:
        raise SpecError(f"{source}: model_type = {mt!r} is not supported "
                        f"(supported: {', '.join(HF_FAMILIES)})")
    if name is None:
        ref = data.get("_name_or_path")
        name = ref.rstrip("/").rsplit("/", 1)[-1] if isinstance(ref, str) and ref else mt
    v: dict[str, Any] = {"name": name}
    if mt == "gpt2":  # GPT2Config: n_inner None -> 4 * n_embd, always tied by default
        h = req("n_embd")
        v.update(hidden=h, layers=req("n_layer"), heads=req("n_head"), vocab=req("vocab_size"),
                 ffn=opt("n_inner", 4 * h), learned_pos=req("n_positions"), gated_mlp=False,
                 bias=True, norm="layer", tied_embeddings=opt("tie_word_embeddings", True, bool),
                 dropout=opt("resid_pdrop", 0.1, float))
    else:
        v.update(hidden=req("hidden_size"), layers=req("num_hidden_layers"),
                 heads=req("num_attention_heads"), vocab=req("vocab_size"),
                 ffn=req("intermediate_size"),
                 tied_embeddings=opt("tie_word_embeddings", False, bool),
                 dropout=max(opt("attention_dropout", 0.0, float), opt("hidden_dropout", 0.0, float)))
    if mt == "gpt_neox":  # rotary position embedding; biases on every linear layer
        v.update(gated_mlp=False, bias=True, norm="layer")
    elif mt != "gpt2":
        # null means the default (multi-head attention, hidden / heads); 0 is no number of heads or width
        v.update(kv_heads=opt("num_key_value_heads", v["heads"], positive=True))
        v.update(head_dim=opt("head_dim", 128 if mt.startswith("qwen3") else 0, positive=True))
    if mt in ("llama", "mistral", "mixtral", "qwen3", "qwen3_moe"):
        # attention_bias puts biases on q/k/v/o; the o bias (h per layer) is not counted
        v.update(qkv_bias=opt("attention_bias", False, bool))
    if mt == "qwen2":  # Qwen2Attention: q/k/v biases always, o_proj none
        v.update(qkv_bias=True)
    if mt.startswith("qwen3"):
        v.update(qk_norm=True)
    if mt == "mixtral":  # every layer sparse; intermediate_size is the expert width
        v.update(num_experts=req("num_local_experts"), top_k=req("num_experts_per_tok"),
                 moe_ffn=v["ffn"])
    if mt == "qwen3_moe":
        if opt("decoder_sparse_step", 1) != 1:
            raise SpecError(f"{source}: decoder_sparse_step = {data['decoder_sparse_step']!r}: "
                            f"only 1 (every layer sparse) is supported")
        dense = data.get("mlp_only_layers") or []
        if not isinstance(dense, list) or dense != list(range(len(dense))):
            raise SpecError(f"{source}: mlp_only_layers = {dense!r}: only the first layers "
                            f"(0, 1, ..., N-1) can be dense")
        v.update(num_experts=req("num_experts"), top_k=req("num_experts_per_tok"),
                 moe_ffn=req("moe_intermediate_size"), dense_layers=len(dense))
    if mt == "deepseek_v3":
        if opt("moe_layer_freq", 1) != 1:
            raise SpecError(f"{source}: moe_layer_freq = {data['moe_layer_freq']!r}: only 1 "
                            f"is supported")
        v.update(num_experts=req("n_routed_experts"), top_k=req("num_experts_per_tok"),
                 expert_groups=opt("n_group", 1), expert_groups_per_token=opt("topk_group", 0),
                 moe_ffn=req("moe_intermediate_size"), shared_experts=opt("n_shared_experts", 0),
                 dense_layers=opt("first_k_dense_replace", 0), q_lora_rank=opt("q_lora_rank", 0),
                 kv_lora_rank=req("kv_lora_rank"), qk_nope_head_dim=req("qk_nope_head_dim"),
                 qk_rope_head_dim=req("qk_rope_head_dim"), v_head_dim=req("v_head_dim"),
                 head_dim=0)
    return v
