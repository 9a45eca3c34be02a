"""estimate(): the closed form's report of a scenario; estimate_scenario() recomputes by its rule."""

from __future__ import annotations

import pytest

from simtrain import estimate, estimate_scenario, resolve
from simtrain.api.estimate import not_modelled_note
from simtrain.errors import SimtrainError

pytestmark = pytest.mark.quick

SMALL = {"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2, "pp": 2, "seq": 2048, "gbs": 16}


def test_the_closed_forms_step_is_its_breakdowns_sum():
    report = estimate(estimate_scenario(SMALL))
    assert report["step_time_s"] == pytest.approx(sum(report["breakdown_s"].values()))


def test_a_fixed_recompute_is_kept():
    assert estimate_scenario({**SMALL, "recompute": "full"}).parallel.recompute == "full"


def test_a_schedule_without_bubble_formulas_is_one_line():
    with pytest.raises(SimtrainError, match="--schedule zb-auto: the closed-form model has bubble formulas for"):
        estimate(resolve({**SMALL, "schedule": "zb-auto"}))


def test_settings_it_does_not_model_are_named():
    assert not_modelled_note(resolve(SMALL)) == ""
    assert "--comm-interference 0.5" in not_modelled_note(resolve({**SMALL, "comm_interference": 0.5}))
