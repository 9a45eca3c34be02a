"""Model FLOPs: the FLOPs per token a training step's MFU counts, for the simulation and the closed form.

One formula, the course notes' (``parallel_plan.py`` of "3D / 5D parallelism", section "a
configuration search script": ``f_layer = 6 (N - 2 V h) / L + 6 seq h``, ``f_head = 6 V h``,
``model_flops = (L f_layer + f_head) gbs seq``):

* linear layers, forward and backward: ``6 N_active_nonembedding`` per token (the ``6 N`` rule,
  Kaplan et al. 2020, section 2.1, with the active parameters of a mixture of experts, top-k
  routed and shared experts);
* causal attention: ``6 seq q`` per token and layer with ``q`` the query width (half of PaLM's
  ``12 s h L``, Chowdhery et al. 2022, appendix B: a causal query attends to half the keys);
* the LM head: ``6 h V`` per token.

Recompute is not counted (MFU counts the model's own work). Multi-token prediction modules
count as layers, their ``eh_proj`` among the active parameters, with one LM head each, as NeMo's
and Megatron-LM's FLOP counts do (``nemo/utils/flops_formulas.py``, ``deepseekv3``); the closed
form, which does not model them, counts the decoder layers and one head.
"""

from __future__ import annotations

from dataclasses import dataclass

from simtrain.specs.model import ModelSpec


@dataclass(frozen=True)
class ModelFlops:
    """Model FLOPs per token of one model at one sequence length, by term (module docstring)."""

    linear_per_token: float  # 6 N_active_nonembedding
    attention_per_token_layer: float  # 6 seq q
    head_per_token: float  # 6 h V, one LM head
    layers: int  # decoder layers (+ MTP layers where counted)
    heads: int  # LM heads (1 + MTP layers where counted)

    @classmethod
    def of(cls, model: ModelSpec, seq: int, n_params: float | None = None, mtp: bool = True) -> "ModelFlops":
        """``model``'s FLOPs at sequence length ``seq``; ``n_params``: the parameter count in place
        of the model's active parameters (the closed form's override, dense models); ``mtp``:
        whether multi-token prediction modules count."""
        embedding = model.params_total - model.params_nonembedding  # input embedding, untied LM head
        active = model.params_active if n_params is None else n_params
        extra = model.mtp_layers if mtp else 0
        return cls(linear_per_token=6.0 * (active - embedding),
                   attention_per_token_layer=6.0 * seq * model.q_width,
                   head_per_token=6.0 * model.hidden * model.vocab,
                   layers=model.layers + extra, heads=1 + extra)

    @property
    def per_token(self) -> float:
        """Model FLOPs per token, summed term by term: ``6 N + 6 seq q L + 6 h V``."""
        return (self.linear_per_token + self.attention_per_token_layer * self.layers
                + self.head_per_token * self.heads)

    @property
    def per_token_layer(self) -> float:
        """The notes' ``f_layer``: one layer's share of the linear FLOPs plus its attention, per
        token: ``6 N / L + 6 seq q``."""
        return self.linear_per_token / self.layers + self.attention_per_token_layer

    @property
    def per_token_by_layer(self) -> float:
        """Model FLOPs per token summed as the notes sum them, ``L f_layer + heads f_head``: the
        number :attr:`per_token` gives up to rounding, in the order the closed form adds its stages."""
        return self.layers * self.per_token_layer + self.head_per_token * self.heads
