"""Settings that act on some runs only are refused, in one line, on a run they cannot change; the
same settings on a run they act on, and every default, still run."""

from __future__ import annotations

import pytest

from helpers import assert_user_error
from simtrain import api
from simtrain.errors import SpecError

_DENSE = ["--model", "llama3-8b", "--topology", "h100-ib", "--seq", "1024", "--gbs", "8"]
_MOE = ["--model", "mixtral-8x7b", "--topology", "h100-ib", "--gpus", "16", "--tp", "2", "--pp", "2",
        "--seq", "1024", "--gbs", "8"]

REFUSED = [
    ([*_DENSE, "--gpus", "8", "--tp", "2", "--pp", "2", "--moe-dispatcher", "deepep"],
     ("moe_dispatcher='deepep'", "llama3-8b is dense", "ep > 1")),
    ([*_DENSE, "--gpus", "8", "--tp", "2", "--pp", "2", "--routing-skew", "0.8"],
     ("routing_skew=0.8", "llama3-8b is dense", "MoE models")),
    ([*_DENSE, "--gpus", "8", "--tp", "2", "--pp", "2", "--routing-seed", "3"], ("routing_seed=3", "dense")),
    ([*_MOE, "--ep", "4", "--routing-seed", "3"], ("routing_seed=3", "routing_skew=0", "--routing-skew")),
    ([*_MOE, "--ep", "1", "--moe-dispatcher", "deepep"], ("moe_dispatcher='deepep'", "ep=1", "ep > 1")),
    ([*_DENSE, "--gpus", "8", "--tp", "2", "--pp", "2", "--zero", "0", "--no-overlap-param-gather"],
     ("overlap_param_gather=False", "zero=0", "zero 1 or 2")),
    ([*_MOE, "--ep", "4", "--no-moe-shared-expert-overlap"],
     ("moe_shared_expert_overlap=False", "mixtral-8x7b has no shared experts", "DeepSeek")),
    ([*_DENSE, "--gpus", "8", "--tp", "1", "--pp", "2", "--tp-comm-overlap"], ("tp_comm_overlap=True", "tp=1")),
    ([*_DENSE, "--gpus", "8", "--tp", "1", "--pp", "2", "--no-tp-backward-overlap"],
     ("tp_backward_overlap=False", "tp=1")),
    ([*_DENSE, "--gpus", "8", "--tp", "2", "--pp", "1", "--no-overlap-p2p-comm"],
     ("overlap_p2p_comm=False", "pp=1", "pp > 1")),
    ([*_DENSE, "--gpus", "8", "--tp", "2", "--pp", "2", "--comm-interference", "5", "--network", "none"],
     ("comm_interference=5.0", "network=none", "analytic or flow")),
    ([*_DENSE, "--gpus", "16", "--tp", "2", "--pp", "2", "--degrade-link", "leaf0-spine0:0.5,leaf0-spine0:0.9"],
     ("--degrade-link 'leaf0-spine0:0.5' and 'leaf0-spine0:0.9'", "same link")),
    ([*_DENSE, "--gpus", "16", "--tp", "2", "--pp", "2", "--degrade-link", "leaf0-spine0:0.5,spine0-leaf0:0.9"],
     ("same link",)),
    ([*_DENSE, "--gpus", "64", "--tp", "8", "--pp", "1", "--node-gpu", "0-3:a100-80g,2-5:b200"],
     ("--node-gpu '0-3:a100-80g' and '2-5:b200'", "node 2")),
    ([*_DENSE, "--gpus", "16", "--tp", "2", "--pp", "2", "--fail-link", "leaf0-spine0",
      "--degrade-link", "leaf0-spine0:0.5"], ("--degrade-link leaf0-spine0:0.5 and --fail-link", "same link")),
]


@pytest.mark.quick
@pytest.mark.parametrize("argv,contains", REFUSED, ids=[" ".join(a[-2:]) for a, _ in REFUSED])
def test_a_setting_that_does_nothing_here_is_refused(argv, contains, tmp_path):
    assert_user_error("run", *argv, "--out", tmp_path, "--no-plot", contains=contains)


@pytest.mark.quick
def test_the_python_api_refuses_it_too_and_a_search_candidate_does_not():
    settings = dict(model="llama3-8b", topology="h100-ib", gpus=8, tp=1, pp=2, seq=1024, gbs=8,
                    tp_comm_overlap=True)
    with pytest.raises(SpecError, match="tp_comm_overlap=True: tp=1"):
        api.resolve(settings)
    assert api.resolve(settings, strict=False).parallel.tp == 1  # one candidate of a search over tp


def test_the_same_settings_run_where_they_act():
    for settings in (dict(model="mixtral-8x7b", topology="h100-ib", gpus=16, tp=2, pp=2, ep=4, seq=1024, gbs=8,
                          moe_dispatcher="deepep", routing_skew=0.8, routing_seed=3),
                     dict(model="llama3-8b", topology="h100-ib", gpus=16, tp=2, pp=2, seq=1024, gbs=8,
                          tp_comm_overlap=True, overlap_p2p_comm=False, comm_interference=0.5,
                          degrade_link="leaf0-spine0:0.5", node_gpu="0:a100-80g,1:b200")):
        assert api.simulate(api.resolve(settings)).report["step_time_s"] > 0
