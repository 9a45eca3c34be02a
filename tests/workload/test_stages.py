"""Pipeline stages: balancing reduces the imbalance; uneven first and last chunks."""

from __future__ import annotations

from helpers import simulate_settings
from simtrain.specs.model import load_model
from simtrain.workload.stages import chunk_layers


def test_balancing_reduces_imbalance_on_126_layers():
    base = dict(model="llama3-405b", topology="h100-ib", gpus=128, tp=8, pp=16, seq=4096, gbs=32)
    naive = simulate_settings(**base, first_stage_layers=6, last_stage_layers=8)  # fewer layers next to the embedding
    balanced = simulate_settings(**base, balance_stages=True)
    assert balanced.report["stage_imbalance"] < naive.report["stage_imbalance"]
    assert balanced.report["breakdown_s"]["imbalance"] < naive.report["breakdown_s"]["imbalance"]


def test_uneven_chunk_layers():
    m = load_model("llama3-405b")
    split = chunk_layers(m, 16, 7, 7)
    assert [len(r) for r in split] == [7] + [8] * 14 + [7]
    assert split[-1].stop == 126
