"""The layouts a search tries: EP, expert TP and the token dispatcher for an MoE model on the
checks a run's layout passes, a dense model's enumeration unchanged, and one-line errors for
lists no layout can use."""

from __future__ import annotations

import pytest

from helpers import assert_user_error, cli
from simtrain.layout_search.candidates import enumerate_candidates
from simtrain.specs.model import load_model
from simtrain.specs.parallel import expert_layouts


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
    (("--model", "mixtral-8x7b", "--tp", "4", "--pp", "4", "--cp", "1", "--ep", "8"),
     "no layout to try: none of the degrees given makes a layout of 16 GPUs"),
    (("--model", "llama3-8b", "--tp", "16"), "no layout to try: none of the degrees given makes a layout of 16 GPUs "
                                              "(TP at most the 8 GPUs of a node, tp*cp*pp dividing the GPUs)"),
])
def test_bad_expert_lists_are_one_line(argv, words):
    assert_user_error(*SMALL, *argv, contains=words)


@pytest.mark.quick
def test_a_candidate_reads_and_changes_its_settings_by_checked_names():
    from simtrain.layout_search.candidates import label
    from simtrain.errors import SpecError

    c = enumerate_candidates({"model": "llama3-8b", "topology": "h100-ib", "nodes": 1, "gbs": 8}, gpus=8,
                             gpus_per_node=8, tps=(2,), cps=(1,), pps=(2,))[0]
    assert (c.get("tp"), c.get("ep", 1), c.value("dp"), c.gives("ep")) == (2, 1, 2, False)
    assert c.with_setting("recompute", "full").get("recompute") == "full" and c.get("recompute") == "auto"
    assert label(c) == "TP=2 CP=1 PP=2 DP=2 1f1b mbs=1 ZeRO-1 rc=auto"
    with pytest.raises(KeyError):
        c.value("ep")
    with pytest.raises(SpecError, match="unknown setting 'recompte'"):
        c.with_setting("recompte", "full")
