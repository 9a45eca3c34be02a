"""The network-model registry: one record per model, read by the settings, the run and collective."""

from __future__ import annotations

import pytest

from helpers import assert_user_error
from simtrain import api
from simtrain.api.collective import COLLECTIVE_NETWORKS
from simtrain.network.models import MODELS, described
from simtrain.settings import NETWORKS, SETTINGS
from simtrain.topology.routing.router import Router


@pytest.mark.quick
def test_the_setting_and_collective_list_the_registry():
    assert NETWORKS == tuple(MODELS) == SETTINGS["network"].choices
    assert SETTINGS["network"].default == "analytic"
    assert COLLECTIVE_NETWORKS == ("analytic", "flow")
    assert described() == ("analytic (NCCL's closed-form time per collective), flow (max-min fair flows on the "
                           "topology graph) or none (free communication)")


@pytest.mark.quick
@pytest.mark.parametrize("name", list(MODELS))
def test_each_record_builds_a_network_a_run_uses(name):
    sc = api.resolve({"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2, "pp": 2, "seq": 1024,
                      "gbs": 8, "network": name})
    net = MODELS[name].build(sc.cluster, Router(sc.cluster), None)
    for method in ("prepare", "fixed_duration", "transfer", "next_event_s", "advance", "check", "link_report"):
        assert callable(getattr(net, method)), method
    report = api.simulate(sc).report
    assert report["config"]["network"] == name and report["step_time_s"] > 0


@pytest.mark.quick
def test_an_unknown_network_is_one_line_naming_the_valid_ones():
    assert_user_error("run", "--network", "flwo", contains=("flwo", "analytic", "flow", "none"))
