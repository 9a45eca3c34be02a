"""The scenario type: every setting has a typed field, the run options default as the settings do,
and the report's config follows the fields, in the spelling given where they hold what was resolved."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from simtrain import api
from simtrain.api import perturbations as perturbed
from simtrain.scenario import RunOptions, Scenario, given_settings, scenario_config, setting_values
from simtrain.settings import SETTINGS

pytestmark = pytest.mark.quick

SMALL = {"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2, "pp": 2, "seq": 2048, "gbs": 16,
         "straggler": "5:0.5,9"}


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return api.resolve(SMALL)


def test_every_setting_has_a_field(scenario):
    values = setting_values(scenario)
    assert set(SETTINGS) <= set(values)
    assert set(values) - set(SETTINGS) == {"recompute_layers"}


def test_the_run_options_default_as_their_settings_do():
    assert {f.name: f.default for f in fields(RunOptions)} == {f.name: SETTINGS[f.name].default
                                                               for f in fields(RunOptions)}


def test_the_config_is_every_setting_as_given_where_the_fields_still_hold_it(scenario):
    config = scenario_config(scenario)
    assert set(config) == set(SETTINGS) | {"gpu"}
    assert config["straggler"] == "5:0.5,9" and config["etp"] is None and config["efficiency"] == scenario.gpu.efficiency
    assert setting_values(scenario)["straggler"] == "5:0.5,9:0.8"  # the fields' own spelling
    assert config["dp"] == 4 and config["gbs"] == 16 and config["nodes"] == scenario.cluster.num_nodes


def test_a_field_replaced_by_hand_shows_in_the_config(scenario):
    other = replace(scenario, parallel=replace(scenario.parallel, zero=2, recompute="selective",
                                                       recompute_modules=("mlp",)),
                    perturbations=perturbed.from_texts(slow_node="1:0.5"), options=RunOptions(steps=3),
                    jitter=replace(scenario.jitter, cv=0.1, slow_step_prob=0.5))
    config = scenario_config(other)
    assert (config["zero"], config["recompute"], config["recompute_modules"], config["steps"]) == \
        (2, "selective", "mlp", 3)
    assert (config["straggler"], config["slow_node"], config["jitter"], config["slow_steps"]) == \
        (None, "1:0.5", 0.1, "0.5:0.5")
    assert config["tp"] == 2 and config["etp"] is None  # the fields left alone keep their values
    assert given_settings(other)["slow_node"] == "1:0.5" and "etp" not in given_settings(other)
    assert api.resolve({**given_settings(other), "straggler": None}).parallel == other.parallel


def test_a_scenario_made_by_hand_reports_its_names_only(scenario):
    bare = Scenario(model=scenario.model, cluster=scenario.cluster, gpu=scenario.gpu, parallel=scenario.parallel,
                    network="analytic", collective_algo=None, fold=True, max_events=10_000)
    assert set(scenario_config(bare)) == {"model", "topology", "nodes", "gpu", "efficiency"}


def test_a_scenario_pickles_with_its_record(scenario):
    import pickle

    again = pickle.loads(pickle.dumps(scenario))
    assert again == scenario and scenario_config(again) == scenario_config(scenario)
