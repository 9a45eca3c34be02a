"""Pipeline stages: balancing reduces the imbalance; uneven first and last chunks, given or
automatic (torchtitan's split, as Llama 3 ran)."""

from __future__ import annotations

from helpers import cli, simulate_settings
from simtrain.specs.model import load_model
from simtrain.workload.stages import auto_split, chunk_layers, describe_split


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


def test_automatic_split_lightens_the_end_chunks():
    assert auto_split(126, 16) == [7] + [8] * 14 + [7]  # Llama 3 405B as Llama 3 ran it
    assert auto_split(80, 4) == [20] * 4  # even where the layers divide
    assert auto_split(30, 4) == [7, 8, 8, 7]
    assert auto_split(81, 4) == [20, 21, 21, 19]  # torchtitan: the first chunks take the remainder
    assert auto_split(5, 4) == [1, 2, 1, 1]  # too few layers to lighten both ends
    for layers, chunks in ((126, 16), (61, 8), (7, 3), (95, 12)):
        sizes = auto_split(layers, chunks)
        assert sum(sizes) == layers and min(sizes) >= 1
    assert describe_split([7] + [8] * 14 + [7]) == "7 + 14 x 8 + 7"
    m = load_model("llama3-405b")
    assert [len(r) for r in chunk_layers(m, 16)] == [7] + [8] * 14 + [7]


def test_llama3_405b_runs_on_pp16_without_layer_flags(tmp_path):
    """126 layers on PP=16 split automatically; ``simtrain run`` prints the split."""
    code, out, err = cli("run", "--model", "llama3-405b", "--topology", "h100-ib", "--gpus", 16384, "--tp", 8,
                         "--pp", 16, "--seq", 8192, "--gbs", 2048, "--out", tmp_path, "--no-plot")
    assert code == 0, err
    assert "layers per pipeline chunk: 7 + 14 x 8 + 7" in out
