"""Transformer model specifications, parameter counts, presets and loaders.

Parameter formulas follow the Hugging Face ``transformers`` modeling files of each family
(``modeling_llama.py``, ``modeling_mixtral.py``, ``modeling_qwen3.py``, ``modeling_qwen3_moe.py``,
``modeling_deepseek_v3.py``, ``modeling_gpt2.py``, ``modeling_gpt_neox.py``) and the papers:
Llama 3 (arXiv:2407.21783, table 3), GPT-3 (arXiv:2005.14165, table 2.1), Mixtral
(arXiv:2401.04088), Qwen3 (arXiv:2505.09388, table 2) and DeepSeek-V3 (arXiv:2412.19437,
section 2.1 for MLA and 4.2 for the sizes). Counts are plain numbers of weights (not bytes).

Presets live in ``simtrain/specs/models/<name>.toml``; their top-level keys are the
:class:`ModelSpec` field names.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simtrain.errors import SpecError, unknown_name
from simtrain.specs.hf_config import hf_config_fields
from simtrain.specs.strict import Table, check_value, parse_toml, read_json, read_toml

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable
    from importlib.abc import Traversable

NORMS = ("rms", "layer")


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """One decoder-only transformer. Every size is a count (of features, heads, layers, tokens).

    >>> m = load_model("llama3-8b")
    >>> m.params_total, m.kv_width
    (8030261248, 1024)
    """

    name: str  # preset or file name, used in messages
    hidden: int  # model width h (residual stream features)
    layers: int  # transformer blocks L
    heads: int  # query attention heads a
    kv_heads: int = 0  # key/value heads (GQA); 0 = heads (plain multi-head attention)
    head_dim: int = 0  # features per head; 0 = hidden // heads (MLA: qk_nope + qk_rope)
    ffn: int  # dense MLP inner width f
    vocab: int  # vocabulary size V (rows of the embedding and of the LM head)
    gated_mlp: bool = True  # SwiGLU MLP with gate/up/down (3 matrices); False = up/down (2)
    tied_embeddings: bool = False  # LM head shares the input embedding matrix
    bias: bool = False  # biases on every linear layer (GPT-2/3, GPT-NeoX)
    qkv_bias: bool = False  # biases on the q/k/v projections only (Qwen2)
    learned_pos: int = 0  # positions of a learned position embedding (GPT-2/3); 0 = rotary
    norm: str = "rms"  # "rms" (weight only) or "layer" (weight and bias); affects norm params
    qk_norm: bool = False  # per-head RMSNorm on queries and keys (Qwen3), head_dim weights each
    num_experts: int = 0  # routed experts per MoE layer; 0 = dense model
    top_k: int = 0  # routed experts each token uses
    # node-limited routing (DeepSeek-V3 n_group / topk_group): the routed experts form this many
    # equal groups and a token's experts come from at most expert_groups_per_token of them (0: any)
    expert_groups: int = 1
    expert_groups_per_token: int = 0
    shared_experts: int = 0  # always-on experts per MoE layer (DeepSeek), each moe_ffn wide
    moe_ffn: int = 0  # inner width of one expert MLP
    dense_layers: int = 0  # the first N layers use the dense MLP (DeepSeek-V3: 3)
    q_lora_rank: int = 0  # MLA query compression rank; 0 = direct q projection
    kv_lora_rank: int = 0  # MLA key/value compression rank; 0 = standard attention (no MLA)
    qk_nope_head_dim: int = 0  # MLA per-head query/key features without rotary
    qk_rope_head_dim: int = 0  # MLA per-head query/key features with rotary (key part shared)
    v_head_dim: int = 0  # MLA per-head value features
    dropout: float = 0.0  # hidden and attention dropout probability (GPT-2/3: 0.1); adds masks
    # multi-token prediction modules (DeepSeek-V3 report, section 2.2; Megatron-LM's --mtp-num-layers):
    # on the last pipeline stage, each a layer like the last decoder layer (layer index layers + k)
    # plus its eh_proj and norms, predicting one more token through the shared LM head; 0 = none
    mtp_layers: int = 0

    def __post_init__(self) -> None:
        _check_and_complete(self)

    # ----- shapes -------------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    @property
    def q_width(self) -> int:
        """Query features per token: heads * head_dim (MLA: heads * (qk_nope + qk_rope))."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Key (= value, except MLA) features per token: kv_heads * head_dim.

        MLA: the decompressed key width heads * (qk_nope + qk_rope) that the attention scores use;
        the cached latent is kv_lora_rank + qk_rope_head_dim and the value width heads * v_head_dim.
        """
        return self.kv_heads * self.head_dim

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def total_layers(self) -> int:
        """Decoder layers plus multi-token prediction layers (indices ``layers`` and up)."""
        return self.layers + self.mtp_layers

    def is_moe_layer(self, i: int) -> bool:
        """Whether layer ``i`` (0-based; an MTP layer from ``layers`` on) has routed experts: an
        MTP layer is built like the last decoder layer (Megatron-Core's MTP block reuses the
        decoder's layer spec, ``megatron/core/transformer/multi_token_prediction.py``)."""
        if not 0 <= i < self.total_layers:
            raise IndexError(f"layer {i} out of range 0..{self.total_layers - 1} of {self.name}")
        return self.is_moe and min(i, self.layers - 1) >= self.dense_layers

    # ----- parameter counts ---------------------------------------------------------------------
    def attention_params(self) -> int:
        """Projection weights (and biases) of one attention block, norms excluded.

        Standard/GQA: q, k, v, o = h*q_width + 2*h*kv_width + q_width*h; with ``bias`` each of the
        four has a bias (GPT-2 ``c_attn``/``c_proj``, GPT-NeoX ``query_key_value``/``dense``),
        with ``qkv_bias`` only q/k/v (Qwen2). MLA (``DeepseekV3Attention``): q_a_proj h*q_lora,
        q_b_proj q_lora*heads*(nope+rope) (or q_proj h*heads*(nope+rope) without q_lora),
        kv_a_proj_with_mqa h*(kv_lora+rope), kv_b_proj kv_lora*heads*(nope+v), o_proj heads*v*h.
        """
        h = self.hidden
        if self.is_mla:
            qk = self.heads * self.head_dim
            q = h * self.q_lora_rank + self.q_lora_rank * qk if self.q_lora_rank else h * qk
            kv = (h * (self.kv_lora_rank + self.qk_rope_head_dim)
                  + self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim))
            return q + kv + self.heads * self.v_head_dim * h
        weights = h * (self.q_width + 2 * self.kv_width) + self.q_width * h
        if self.bias:
            return weights + self.q_width + 2 * self.kv_width + h
        return weights + (self.q_width + 2 * self.kv_width if self.qkv_bias else 0)

    def _mlp(self, width: int) -> int:
        """One MLP h -> width -> h: 3 matrices when gated (SwiGLU), else 2; biases on each."""
        h = self.hidden
        if self.gated_mlp:
            return 3 * h * width + ((2 * width + h) if self.bias else 0)
        return 2 * h * width + ((width + h) if self.bias else 0)

    def dense_mlp_params(self) -> int:
        return self._mlp(self.ffn)

    def expert_params(self) -> int:
        """ONE routed expert (an MLP moe_ffn wide)."""
        return self._mlp(self.moe_ffn) if self.is_moe else 0

    def shared_expert_params(self) -> int:
        """All shared experts of one MoE layer (DeepSeek: one MLP shared_experts * moe_ffn wide)."""
        return self._mlp(self.shared_experts * self.moe_ffn) if self.shared_experts else 0

    def router_params(self) -> int:
        """The gate of one MoE layer: h * num_experts, no bias (Mixtral, Qwen3-MoE, DeepSeek-V3;
        DeepSeek-V3's num_experts load-balancing correction biases are not counted)."""
        return self.hidden * self.num_experts

    def norm_params_per_layer(self) -> int:
        """Every norm weight of one layer: the two block norms (h each, 2h for LayerNorm), Qwen3's
        q/k norms (head_dim each) and MLA's q_a/kv_a latent RMSNorms (q_lora + kv_lora)."""
        n = 2 * self.hidden * (2 if self.norm == "layer" else 1)
        n += 2 * self.head_dim if self.qk_norm else 0
        return n + (self.q_lora_rank + self.kv_lora_rank if self.is_mla else 0)

    def moe_mlp_params(self) -> int:
        """The MLP of one MoE layer: all routed experts, the shared experts and the router."""
        return (self.num_experts * self.expert_params() + self.shared_expert_params()
                + self.router_params())

    def mtp_extra_params(self) -> int:
        """What an MTP module holds beside its transformer layer (Megatron-Core
        ``MultiTokenPredictionLayer``): ``eh_proj`` 2h -> h, no bias, and three norms (``enorm``
        on the next token's embedding, ``hnorm`` on the hidden state, ``final_layernorm``); the
        embedding and the output layer are the model's, shared."""
        return 2 * self.hidden * self.hidden + 3 * self.final_norm_params()

    def layer_params(self, i: int) -> int:
        """All parameters of layer ``i`` (0-based; an MTP layer with its :meth:`mtp_extra_params`)."""
        mlp = self.moe_mlp_params() if self.is_moe_layer(i) else self.dense_mlp_params()
        mtp = self.mtp_extra_params() if i >= self.layers else 0
        return self.attention_params() + mlp + self.norm_params_per_layer() + mtp

    def layer_active_params(self, i: int) -> int:
        """Parameters of layer ``i`` one token uses: top_k routed experts instead of all."""
        if not self.is_moe_layer(i):
            return self.layer_params(i)
        return (self.attention_params() + self.norm_params_per_layer() + self.router_params()
                + self.top_k * self.expert_params() + self.shared_expert_params()
                + (self.mtp_extra_params() if i >= self.layers else 0))

    def embedding_params(self) -> int:
        """Input token embedding V*h plus learned position embeddings learned_pos*h."""
        return (self.vocab + self.learned_pos) * self.hidden

    def lm_head_params(self) -> int:
        """Output projection h*V, 0 when tied to the input embedding (no bias in any family)."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    def final_norm_params(self) -> int:
        return self.hidden * (2 if self.norm == "layer" else 1)

    def _total(self, per_layer: Callable[[int], int]) -> int:
        """``per_layer`` over every layer, one run of like layers (dense, MoE, MTP) at a time: the
        layer-by-layer sum's integer for any layer count; plus the embedding, LM head and final norm."""
        split = min(self.dense_layers, self.layers) if self.is_moe else self.layers
        runs = ((0, split), (split, self.layers), (self.layers, self.total_layers))
        return (sum((end - start) * per_layer(start) for start, end in runs if end > start)
                + self.embedding_params() + self.lm_head_params() + self.final_norm_params())

    @property
    def params_total(self) -> int:
        """Every parameter, each shared matrix once; MTP modules only where ``mtp_layers`` asks
        (the DeepSeek-V3 preset's 671e9 excludes its 14e9 MTP module)."""
        return self._total(self.layer_params)

    @property
    def params_nonembedding(self) -> int:
        """Total minus input (token and position) embeddings and the untied LM head (the
        convention of Kaplan et al. 2020 and the Pythia paper's non-embedding counts)."""
        return self.params_total - self.embedding_params() - self.lm_head_params()

    @property
    def params_active(self) -> int:
        """Parameters used per token: dense parts, top_k routed and all shared experts."""
        return self._total(self.layer_active_params)


def _check_and_complete(spec: ModelSpec) -> None:
    """Check every field of ``spec`` (types, ranges, the MLA and MoE combinations) and fill in
    the derived defaults: ``kv_heads`` = heads, ``head_dim`` = hidden / heads (MLA: qk_nope +
    qk_rope)."""
    where = f"model {spec.name}"
    check_value(f"{where}: name", spec.name, str)
    if not spec.name:
        raise SpecError("model name = '': must not be empty")
    for f in fields(spec):
        if f.name != "name":
            check_value(f"{where}: {f.name}", getattr(spec, f.name), _kind(f.type))
    for key in ("hidden", "layers", "heads", "ffn", "vocab"):
        check_value(f"{where}: {key}", getattr(spec, key), int, positive=True)
    for key in ("kv_heads", "head_dim", "learned_pos", "num_experts", "top_k", "expert_groups_per_token",
                "shared_experts", "moe_ffn", "dense_layers", "q_lora_rank", "kv_lora_rank",
                "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "mtp_layers"):
        check_value(f"{where}: {key}", getattr(spec, key), int, min_value=0)
    check_value(f"{where}: norm", spec.norm, str, choices=NORMS)
    if not 0 <= spec.dropout < 1:
        raise SpecError(f"{where}: dropout = {spec.dropout!r}: must be in [0, 1)")

    def bad(key: str, why: str) -> SpecError:
        return SpecError(f"{where}: {key} = {getattr(spec, key)!r}: {why}")

    if spec.kv_heads == 0:
        object.__setattr__(spec, "kv_heads", spec.heads)
    if spec.heads % spec.kv_heads:
        raise bad("kv_heads", f"must divide heads = {spec.heads}")
    mla_dims = ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    if spec.is_mla:
        for key in mla_dims[1:]:
            if getattr(spec, key) <= 0:
                raise bad(key, "must be > 0 with MLA (kv_lora_rank > 0)")
        if spec.bias or spec.qkv_bias:
            raise bad("bias" if spec.bias else "qkv_bias", "biases are not supported with MLA")
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        if spec.head_dim == 0:
            object.__setattr__(spec, "head_dim", qk)
        if spec.head_dim != qk:
            raise bad("head_dim", f"must equal qk_nope_head_dim + qk_rope_head_dim = {qk}")
    else:
        for key in mla_dims:
            if getattr(spec, key):
                raise bad(key, "needs kv_lora_rank > 0 (MLA)")
        if spec.head_dim == 0:
            if spec.hidden % spec.heads:
                raise bad("hidden", f"not divisible by heads = {spec.heads}; give head_dim")
            object.__setattr__(spec, "head_dim", spec.hidden // spec.heads)
    if spec.is_moe:
        if not 1 <= spec.top_k <= spec.num_experts:
            raise bad("top_k", f"must be in 1..num_experts = {spec.num_experts}")
        if spec.moe_ffn <= 0:
            raise bad("moe_ffn", "must be > 0 for an MoE model (num_experts > 0)")
        if spec.dense_layers > spec.layers:
            raise bad("dense_layers", f"must be <= layers = {spec.layers}")
        if spec.expert_groups < 1 or spec.num_experts % spec.expert_groups:
            raise bad("expert_groups", f"must divide num_experts = {spec.num_experts}")
        if spec.expert_groups_per_token > spec.expert_groups:
            raise bad("expert_groups_per_token", f"must be <= expert_groups = {spec.expert_groups} (0: no limit)")
        if spec.expert_groups_per_token and spec.top_k > spec.expert_groups_per_token * (
                spec.num_experts // spec.expert_groups):
            raise bad("expert_groups_per_token", f"leaves fewer than top_k = {spec.top_k} experts to choose from")
    else:
        if spec.expert_groups != 1:
            raise bad("expert_groups", "needs num_experts > 0 (an MoE model)")
        for key in ("top_k", "expert_groups_per_token", "shared_experts", "moe_ffn", "dense_layers"):
            if getattr(spec, key):
                raise bad(key, "needs num_experts > 0 (an MoE model)")


def _kind(annotation: Any) -> type:
    return {"str": str, "bool": bool, "int": int, "float": float}[str(annotation)]


# ----- native TOML ------------------------------------------------------------------------------
def model_from_table(table: Table, default_name: str) -> ModelSpec:
    """A model from a table whose keys are the :class:`ModelSpec` field names."""
    values: dict[str, Any] = {}
    for f in fields(ModelSpec):
        kind = _kind(f.type)
        if f.name == "name":
            values["name"] = table.get("name", str, default_name)
        elif f.name in ("hidden", "layers", "heads", "ffn", "vocab"):
            values[f.name] = table.get(f.name, kind, positive=True)
        elif f.name == "norm":
            values[f.name] = table.get(f.name, kind, f.default, choices=NORMS)
        else:
            values[f.name] = table.get(f.name, kind, f.default,
                                       min_value=0 if kind in (int, float) else None)
    table.done()
    try:
        return ModelSpec(**values)
    except SpecError as exc:
        raise SpecError(f"{table.where}: {exc}") from None


def _presets() -> Traversable:
    return files("simtrain.specs") / "models"


def list_models() -> list[str]:
    """Names of the model presets, sorted."""
    return sorted(p.name[:-5] for p in _presets().iterdir() if p.name.endswith(".toml"))


#: What an unknown model name is told besides the presets: a model is also a file (a Hugging Face
#: model's name, such as ``Qwen/Qwen3-30B-A3B``, is not fetched; its config.json is read).
MODEL_FILES_TOO = ("or give the path of a file: a Hugging Face config.json (downloaded from the model's "
                   "page, e.g. path/to/config.json) or a model .toml")


def load_model(name_or_path: str) -> ModelSpec:
    """A model from a native ``.toml`` file, a Hugging Face ``.json`` config or a preset name."""
    path = Path(name_or_path)
    suffix = path.suffix.lower()
    if suffix in (".toml", ".json"):
        if not path.is_file():
            raise SpecError(f"{path}: file not found")
        if suffix == ".toml":
            return model_from_table(Table(read_toml(path), str(path)), path.stem)
        data = read_json(path)
        name = path.parent.name if path.stem == "config" and path.parent.name else path.stem
        return model_from_hf_config(data, str(path), name=name)
    if name_or_path not in list_models():
        raise unknown_name("model", name_or_path, list_models(), also=MODEL_FILES_TOO)
    resource = _presets() / f"{name_or_path}.toml"
    data = parse_toml(resource.read_text(encoding="utf-8"), f"{name_or_path}.toml")
    return model_from_table(Table(data, f"model preset {name_or_path}.toml"), name_or_path)


# ----- Hugging Face config.json -----------------------------------------------------------------
def model_from_hf_config(data: dict[str, Any], source: str, name: str | None = None) -> ModelSpec:
    """A model from the dict of a Hugging Face ``config.json`` (translated by
    :func:`~simtrain.specs.hf_config.hf_config_fields`); ``source`` names it in messages."""
    values = hf_config_fields(data, source, name)
    try:
        return ModelSpec(**values)
    except SpecError as exc:
        raise SpecError(f"{source}: {exc}") from None
