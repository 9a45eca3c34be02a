"""The search over MoE layouts: EP, expert TP and the token dispatcher are enumerated, the best
layout found is at least as fast as the hand-picked EP layouts of issue 27, the closed form's
pruning keeps the exhaustive search's best layouts, and a dense model's enumeration is unchanged.

The acceptance runs are the issue's clusters (Mixtral-8x7B on 64 H100s, Qwen3-30B-A3B on 16) at a
short sequence and a small batch, so that each search takes a few seconds. ``--cp 1``: at a
sequence of 2,048 tokens the closed form takes no CP (it needs 4,096 tokens per CP rank), so the
flag changes the count of layouts enumerated and nothing else.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import assert_user_error, cli, cli_json
from simtrain.search import enumerate_candidates
from simtrain.specs.model import load_model
from simtrain.specs.parallel import expert_layouts

QWEN3_30B = str(Path(__file__).parent / "data" / "qwen3-30b-a3b" / "config.json")
MIXTRAL_64 = ("--model", "mixtral-8x7b", "--topology", "h100-ib", "--gpus", 64, "--seq", 2048, "--gbs", 64)
QWEN_16 = ("--model", QWEN3_30B, "--topology", "h100-ib", "--gpus", 16, "--seq", 2048, "--gbs", 32)


def hand_picked(tmp_path, base, tp, pp, ep) -> dict:
    """``simtrain run`` of one hand-picked layout (the closed form's recompute rule, as search)."""
    return cli_json("run", *base, "--tp", tp, "--pp", pp, "--ep", ep, "--recompute", "auto", "--no-plot",
                    "--out", tmp_path / f"tp{tp}-pp{pp}-ep{ep}")


def best_of(search: dict) -> dict:
    best = search["ranking"][0]
    assert best["simulated_rank"] == 1 and best["fits_in_memory"]
    return best


def test_mixtral_search_finds_a_layout_at_least_as_fast_as_hand_picked_ep8(tmp_path):
    out = cli_json("search", *MIXTRAL_64, "--cp", 1, "--top", 4, "--jobs", 1)
    best = best_of(out)
    for tp, pp in ((1, 4), (1, 2), (2, 2)):  # EP 8 as the README's Mixtral example and the issue ran it
        hand = hand_picked(tmp_path, MIXTRAL_64, tp, pp, 8)
        assert hand["fits_in_memory"]
        assert best["simulated_step_time_s"] <= hand["step_time_s"], (best["label"], tp, pp)
    assert best["ep"] > 1 and best["settings"]["ep"] == best["ep"]
    assert f"EP={best['ep']} ETP={best['etp']} {best['moe_dispatcher']}" in best["label"]
    assert all({"ep", "etp", "moe_dispatcher"} <= set(r) for r in out["ranking"])


def test_qwen3_search_finds_a_layout_at_least_as_fast_as_hand_picked_ep8_pp2(tmp_path):
    out = cli_json("search", *QWEN_16, "--cp", 1, "--top", 4, "--jobs", 1)
    best = best_of(out)
    for tp, pp, ep in ((1, 2, 8), (1, 1, 8)):
        assert best["simulated_step_time_s"] <= hand_picked(tmp_path, QWEN_16, tp, pp, ep)["step_time_s"]
    assert best["ep"] >= 8


def test_pruning_keeps_the_exhaustive_searchs_best_layouts():
    """Qwen3-30B-A3B on 8 H100s: every layout that fits simulated, against the closed form's top 8."""
    base = ("search", "--model", QWEN3_30B, "--topology", "h100-ib", "--gpus", 8, "--seq", 1024, "--gbs", 16,
            "--cp", 1, "--jobs", 1)
    exhaustive = cli_json(*base)
    pruned = cli_json(*base, "--top", 8)
    assert exhaustive["candidates_simulated"] == exhaustive["candidates_fit"] > 8 == pruned["candidates_simulated"]
    top = 5
    assert [r["label"] for r in pruned["ranking"][:top]] == [r["label"] for r in exhaustive["ranking"][:top]]
    assert [r["simulated_step_time_s"] for r in pruned["ranking"][:top]] == \
        [r["simulated_step_time_s"] for r in exhaustive["ranking"][:top]]


@pytest.mark.quick
def test_expert_layouts_follow_the_parallel_specs_rules():
    mixtral = load_model("mixtral-8x7b")
    # etp * ep * pp divides the 64 GPUs, ep divides the 8 experts, etp divides tp
    assert expert_layouts(mixtral, world=64, tp=4, pp=4) == [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (2, 4),
                                                             (4, 1), (4, 2), (4, 4), (8, 1), (8, 2)]
    assert expert_layouts(mixtral, world=64, tp=2, pp=1, eps=(8,), etps=(1, 4)) == [(8, 1)]  # etp <= tp
    assert expert_layouts(load_model("llama3-8b"), world=8, tp=2, pp=1) == [(1, 2)]


@pytest.mark.quick
def test_dense_enumeration_is_unchanged_and_moe_adds_ep_etp_and_dispatchers():
    base = {"model": "llama3-8b", "topology": "h100-ib", "nodes": 8, "seq": 4096, "gbs": 64}
    dense = enumerate_candidates(base, gpus=64, gpus_per_node=8)
    assert len(dense) == 69 and not any("ep" in c.as_dict() for c in dense)
    moe = enumerate_candidates({**base, "model": "mixtral-8x7b"}, gpus=64, gpus_per_node=8, tps=(1,), cps=(1,),
                               pps=(1,))
    # EP 1 with one dispatcher (no token leaves its rank), EP 2, 4, 8 with each
    assert [(c.as_dict()["ep"], c.as_dict()["moe_dispatcher"]) for c in moe] == [
        (1, "alltoall"), (2, "alltoall"), (2, "deepep"), (4, "alltoall"), (4, "deepep"), (8, "alltoall"),
        (8, "deepep")]
    only = enumerate_candidates({**base, "model": "mixtral-8x7b"}, gpus=64, gpus_per_node=8, tps=(2,), cps=(1,),
                                pps=(1,), eps=(8,), etps=(1,), dispatchers=("deepep",))
    assert len(only) == 1 and only[0].as_dict()["etp"] == 1 and only[0].as_dict()["moe_dispatcher"] == "deepep"


SMALL = ("search", "--topology", "h100-ib", "--gpus", 16, "--seq", 2048, "--gbs", 32, "--jobs", 1)


@pytest.mark.quick
def test_the_table_lists_ep_etp_and_the_dispatcher():
    code, text, err = cli(*SMALL, "--model", "mixtral-8x7b", "--tp", 1, "--cp", 1, "--pp", 1, "--ep", "1,8",
                          "--moe-dispatchers", "deepep", "--top", 1)
    assert code == 0, err
    assert text.startswith("2 layouts enumerated")  # EP 1 (with the first dispatcher) and EP 8
    assert "TP=1 CP=1 PP=1 DP=16 EP=8 ETP=1 deepep 1f1b" in text


@pytest.mark.quick
@pytest.mark.parametrize("argv, words", [
    (("--model", "mixtral-8x7b", "--ep", "16"), "--ep 16: does not divide the 8 experts of mixtral-8x7b; valid: 1, 2, 4, 8"),
    (("--model", "llama3-8b", "--ep", "1,2"), "--ep 1,2: llama3-8b has no experts"),
    (("--model", "llama3-8b", "--etp", "1"), "--etp 1: llama3-8b has no experts"),
    (("--model", "llama3-8b", "--moe-dispatchers", "deepep"), "--moe-dispatchers deepep: llama3-8b has no experts"),
    (("--model", "mixtral-8x7b", "--etp", "16"), "--etp 16: above every TP tried (1,2,4,8)"),
    (("--model", "mixtral-8x7b", "--moe-dispatchers", "alltoall,fast"), "unknown dispatcher 'fast'; valid: alltoall, deepep"),
    (("--model", "mixtral-8x7b", "--ep", "0"), "argument --ep: invalid list '0': 0 must be >= 1"),
])
def test_bad_expert_lists_are_one_line(argv, words):
    assert_user_error(*SMALL, *argv, contains=words)
