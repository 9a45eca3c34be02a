"""presets(): the presets of one kind and their key figures."""

from __future__ import annotations

import pytest

from simtrain.api.presets import PRESET_TABLES, presets
from simtrain.errors import SpecError
from simtrain.specs.gpu import GPU_PRESETS
from simtrain.units import TFLOPS

pytestmark = pytest.mark.quick


@pytest.mark.parametrize("what", list(PRESET_TABLES))
def test_every_kind_lists_named_rows(what):
    rows = presets(what)
    names = [r["name"] for r in rows]
    assert rows and len(set(names)) == len(names)


def test_a_gpu_row_is_the_presets_figures():
    row = next(r for r in presets("gpus") if r["name"] == "h100-sxm")
    assert row["bf16_tflops"] == GPU_PRESETS["h100-sxm"].peak_bf16_flops / TFLOPS


def test_a_schedule_row_gives_the_closed_form_where_one_applies():
    rows = {r["name"]: r for r in presets("schedules")}
    assert rows["1f1b"]["bubble"] != "-" and rows["1f1b"]["closed_form_applies"] != "no closed form"


def test_an_unknown_kind_is_one_line_with_the_valid_ones():
    with pytest.raises(SpecError, match=r"unknown kind of preset 'gpu'; did you mean 'gpus'\?.*topologies"):
        presets("gpu")
