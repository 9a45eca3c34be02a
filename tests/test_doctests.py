"""The examples in the public API's docstrings run and print what they say."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["simtrain.api.resolve", "simtrain.api.presets", "simtrain.api.inspect", "simtrain.api.schedule", "simtrain.api.simulate", "simtrain.api.estimate", "simtrain.api.compare",
           "simtrain.api.search", "simtrain.analytic.model", "simtrain.analytic.compare", "simtrain.layout_search.simulated", "simtrain.specs.gpu",
           "simtrain.specs.parallel", "simtrain.specs.model", "simtrain.specs.order", "simtrain.topology.cluster",
           "simtrain.topology.mesh",
           "simtrain.settings", "simtrain.cli.run", "simtrain.outputs.text_tables", "simtrain.importers.job",
           "simtrain.importers.megatron", "simtrain.importers.torchtitan", "simtrain.workload.stages"]


SLOW = {"simtrain.api.simulate", "simtrain.api.compare", "simtrain.api.search", "simtrain.layout_search.simulated"}  # their examples run simulations and searches


@pytest.mark.parametrize("name", [name if name in SLOW else pytest.param(name, marks=pytest.mark.quick)
                                  for name in MODULES])
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, verbose=False, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0, f"{name} has no examples"
