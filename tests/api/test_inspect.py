"""describe_topology() and describe_mesh(): a cluster and the rank grid of a layout."""

from __future__ import annotations

import json

import pytest

from simtrain.api.inspect import describe_mesh, describe_topology, link_utilisation
from simtrain.errors import SimtrainError
from simtrain.topology.cluster import load_topology

pytestmark = pytest.mark.quick


def test_a_topology_at_a_given_size():
    info = describe_topology("h100-ib", nodes=2)
    assert info["num_nodes"] == 2 and info["num_gpus"] == 16 and "drawing" not in info


def test_a_report_colours_only_a_drawing():
    with pytest.raises(SimtrainError, match="give --draw OUT.png too"):
        describe_topology("h100-ib", nodes=2, report="report.json")


def test_link_utilisation_reads_a_flow_report(tmp_path):
    cluster = load_topology("h100-ib", nodes=2)
    u, v = next(iter(cluster.graph.edges()))
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"links": {"utilisation_by_link": {f"{u}->{v}": 0.25}}}))
    assert link_utilisation(path, cluster) == {(u, v): 0.25}
    assert link_utilisation(None, cluster) is None
    path.write_text(json.dumps({"links": {"utilisation_by_link": {"nowhere->x": 0.25}}}))
    with pytest.raises(SimtrainError, match="link 'nowhere->x' is not in topology"):
        link_utilisation(path, cluster)
    path.write_text(json.dumps({"links": {"utilisation_by_link": {f"{u}->{v}": -1}}}))
    with pytest.raises(SimtrainError, match="is not a finite number >= 0"):
        link_utilisation(path, cluster)


def test_a_mesh_of_given_degrees_and_the_defaults():
    info = describe_mesh({"gpus": 16, "tp": 2, "pp": 2}, rank=3)
    assert info["groups"]["tp"][0] == [0, 1] and info["groups"]["pp"][0] == [0, 8]
    assert info["intra_node"]["tp"] and not info["intra_node"]["pp"]
    assert info["coords"]["tp"] == 1 and info["order"] == "tp-cp-ep-dp-pp"
    assert describe_mesh({"gpus": 16, "tp": 2, "pp": 2}, topology="a100-hdr")["gpus_per_node"] == 8


def test_a_mesh_names_what_is_wrong():
    with pytest.raises(SimtrainError, match="unknown setting 'nodes'"):
        describe_mesh({"nodes": 2})
    with pytest.raises(SimtrainError, match="tp"):
        describe_mesh({"gpus": 16, "tp": 3})
