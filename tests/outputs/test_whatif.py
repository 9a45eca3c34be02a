"""The files of ``simtrain whatif``: a topology table written as TOML reads back the same and
loads; the ranking and sweep plots are PNG files."""

from __future__ import annotations

import pytest

from simtrain.outputs.whatif import draw_ranking, draw_sweep, topology_toml, write_topology
from simtrain.specs.strict import parse_toml
from simtrain.topology.cluster import load_topology, preset_table


@pytest.mark.quick
def test_a_topology_table_round_trips_and_loads(tmp_path):
    data = preset_table("h100-ib")
    data["node"]["nic_gbps"] = 100.0
    assert parse_toml(topology_toml(data), "t") == data
    path = write_topology(data, tmp_path / "sub" / "t.toml")
    cluster = load_topology(path)
    assert cluster.spec.node.nic_Bps == 100e9 / 8 and cluster.spec.power.host_w == 4400


@pytest.mark.quick
def test_strings_with_quotes_survive():
    data = {"name": 'a "quoted" \\ name', "nodes": 1, "node": {"nvswitch": False}}
    assert parse_toml(topology_toml(data), "t") == data


def test_plots_are_png(tmp_path):
    rows = [{"label": "a", "topology": "a", "sweep_value": 1.0, "time_to_train_s": 86400.0, "step_time_s": 1.0,
             "cost_to_train_usd": 10.0, "cost_per_step_usd": 0.1},
            {"label": "b", "topology": "a", "sweep_value": 2.0, "time_to_train_s": 43200.0, "step_time_s": 0.5,
             "cost_to_train_usd": None, "cost_per_step_usd": None}]
    for path in (draw_ranking(rows, tmp_path / "r.png", "t"), draw_sweep(rows, "x", tmp_path / "s.png", "t")):
        assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.quick
def test_docstring_examples():
    import doctest

    import simtrain.outputs.whatif

    assert doctest.testmod(simtrain.outputs.whatif).failed == 0
