"""MoE token routing: how unevenly tokens reach the experts, and so the EP ranks.

Expert popularity follows a Zipf law, ``p_e ~ 1 / rank_e ** skew`` over a random permutation of
the experts drawn from an explicit seed (skew 0 is uniform routing). Measured router statistics
of trained MoE models are roughly of this shape (e.g. DeepSeek-V3 report, section 4.5 on expert
load before and after bias balancing). :func:`ep_loads` gives, per MoE layer, each EP rank's load
divided by the mean load: each rank computes its own tokens, and the busiest sets the layer time,
because the combine all-to-all waits for it (:func:`load_factors`: the busiest rank's load over the
mean).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from simtrain.errors import SpecError


@dataclass(frozen=True)
class Routing:
    skew: float = 0.0  # Zipf exponent of expert popularity; 0 = uniform
    seed: int = 0  # seed of the expert permutation per layer

    def __post_init__(self) -> None:
        if not (self.skew >= 0 and np.isfinite(self.skew)):
            raise SpecError(f"routing skew={self.skew!r}: must be a finite number >= 0")


def expert_probabilities(num_experts: int, skew: float, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """Share of routed tokens per expert (sums to 1)."""
    weights = 1.0 / np.arange(1, num_experts + 1, dtype=float) ** skew
    probs: npt.NDArray[np.float64] = weights / weights.sum()
    return probs[rng.permutation(num_experts)]


def rank_loads(probs: npt.NDArray[np.float64], ep: int) -> npt.NDArray[np.float64]:
    """Share of tokens each EP rank receives: experts are laid out in contiguous blocks."""
    loads: npt.NDArray[np.float64] = probs.reshape(ep, -1).sum(axis=1)
    return loads


def ep_loads(num_experts: int, ep: int, num_layers: int, routing: Routing) -> list[tuple[float, ...]]:
    """Each EP rank's load over the mean load (``ep`` values averaging 1), one tuple per MoE layer
    in layer order (all 1.0 when uniform)."""
    if routing.skew == 0:
        return [(1.0,) * ep] * num_layers
    rng = np.random.default_rng(routing.seed)
    return [tuple(float(x) for x in rank_loads(expert_probabilities(num_experts, routing.skew, rng), ep) * ep)
            for _ in range(num_layers)]


def load_factors(num_experts: int, ep: int, num_layers: int, routing: Routing) -> list[float]:
    """Busiest-rank load over mean load, one value per MoE layer (1.0 everywhere when uniform)."""
    return [max(loads) for loads in ep_loads(num_experts, ep, num_layers, routing)]
