"""EP all-to-all volumes: Megatron-LM's dispatcher sends a copy per expert, DeepEP's one per
destination node (node-limited routing caps the nodes), FP8 towards the experts."""

from __future__ import annotations

from dataclasses import replace
from math import comb

import numpy as np
import pytest

from simtrain.costs import Shape, dispatch
from simtrain.specs.model import load_model
from simtrain.specs.parallel import ParallelSpec

DSV3 = load_model("deepseek-v3")


def _sampled_hit(model, block: int, tokens: int = 40_000, seed: int = 0) -> float:
    """Share of tokens that reach experts 0..block-1: groups chosen uniformly, then top_k experts
    uniformly among the chosen groups' experts."""
    rng = np.random.default_rng(seed)
    e, k, groups, chosen = model.num_experts, model.top_k, model.expert_groups, model.expert_groups_per_token
    size = e // groups
    hits = 0
    for _ in range(tokens):
        allowed = np.concatenate([np.arange(g * size, (g + 1) * size)
                                  for g in rng.choice(groups, chosen, replace=False)]) if chosen else np.arange(e)
        hits += bool((rng.choice(allowed, k, replace=False) < block).any())
    return hits / tokens


@pytest.mark.quick
def test_without_a_group_limit_a_block_is_hit_as_the_hypergeometric_says():
    mixtral = load_model("mixtral-8x7b")  # 8 experts, top 2
    assert dispatch.hit_probability(mixtral, 1) == pytest.approx(1 - comb(7, 2) / comb(8, 2)) == 0.25
    assert dispatch.hit_probability(mixtral, 4) == pytest.approx(1 - comb(4, 2) / comb(8, 2))


def test_deepseek_v3_reaches_at_most_four_nodes():
    """256 experts in 8 groups (one per node at EP 64 over 8 nodes), 4 groups per token, top 8."""
    p_node = 0.5 * (1 - np.prod([(96 - i) / (128 - i) for i in range(8)]))
    assert dispatch.hit_probability(DSV3, 32) == pytest.approx(p_node)
    assert 8 * p_node <= 4
    assert dispatch.hit_probability(DSV3, 32) == pytest.approx(_sampled_hit(DSV3, 32), abs=0.01)


@pytest.mark.parametrize("block", [4, 16, 64, 128])
def test_group_limited_hits_match_sampling(block):
    assert dispatch.hit_probability(DSV3, block) == pytest.approx(_sampled_hit(DSV3, block, 20_000), abs=0.012)


@pytest.mark.quick
def test_deepep_sends_one_copy_per_remote_node():
    """EP 64 over 8 nodes: the buffer's share to other nodes is (N - 1) P(node) rows per token,
    against top_k x 56/64 = 7 for Megatron-LM's dispatcher."""
    rows = dispatch.a2a_rows(DSV3, "deepep", 64, 8)
    assert rows * 56 / 64 == pytest.approx(7 * dispatch.hit_probability(DSV3, 32))
    assert dispatch.a2a_rows(DSV3, "alltoall", 64, 8) * 56 / 64 == 7
    assert rows * 56 / 64 < 0.5 * 7
    inside = dispatch.a2a_rows(DSV3, "deepep", 8, 8)  # one node: one copy per other GPU
    assert inside * 7 / 8 == pytest.approx(7 * dispatch.hit_probability(DSV3, 32))


@pytest.mark.quick
def test_buffer_bytes():
    par = ParallelSpec(tp=1, ep=8, dp=8, seq=4096, gbs=8)
    shape = Shape.of(par)
    assert dispatch.a2a_bytes(DSV3, shape, 8.0) == 2 * 4096 * 8 * 7168
    assert dispatch.a2a_bytes(DSV3, shape, 8.0, load=1.5) == 1.5 * 2 * 4096 * 8 * 7168
    sp = Shape.of(replace(par, tp=2, dp=4))  # sequence parallelism: each TP rank its shard
    assert dispatch.a2a_bytes(DSV3, sp, 8.0) == 2 * 2048 * 8 * 7168
