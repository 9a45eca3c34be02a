"""Model FLOPs: the one formula the simulation's MFU and the closed form share."""

from __future__ import annotations

import pytest

from simtrain.specs.flops import ModelFlops
from simtrain.specs.model import list_models, load_model

pytestmark = pytest.mark.quick


def test_llama_flops_are_the_notes_formula():
    # course notes, parallel_plan.py: f_layer = 6 (N - 2 V h) / L + 6 seq h, f_head = 6 V h
    m = load_model("llama3-70b")
    flops = ModelFlops.of(m, 8192)
    n_embed = m.params_total - m.params_nonembedding
    assert n_embed == 2 * m.vocab * m.hidden
    f_layer = 6 * (m.params_total - n_embed) / m.layers + 6 * 8192 * m.hidden
    assert flops.per_token_layer == f_layer
    assert flops.head_per_token == 6 * m.vocab * m.hidden
    assert flops.per_token_by_layer == m.layers * f_layer + 6 * m.vocab * m.hidden
    assert flops.per_token == pytest.approx(flops.per_token_by_layer, rel=1e-15)


@pytest.mark.parametrize("name", list_models())
def test_both_sums_agree_and_mtp_counts_as_layers(name):
    m = load_model(name)
    full, plain = ModelFlops.of(m, 4096), ModelFlops.of(m, 4096, mtp=False)
    assert full.per_token == pytest.approx(full.per_token_by_layer, rel=1e-12)
    assert (full.layers, full.heads) == (m.layers + m.mtp_layers, 1 + m.mtp_layers)
    assert (plain.layers, plain.heads) == (m.layers, 1)


def test_n_params_replaces_the_active_parameters():
    m = load_model("llama3-8b")
    n_embed = m.params_total - m.params_nonembedding
    assert ModelFlops.of(m, 2048, n_params=8.0e9).linear_per_token == 6 * (8.0e9 - n_embed)
