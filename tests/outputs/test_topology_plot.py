"""Topology drawings: PNG coloured by link utilisation, SVG, refused suffixes."""

from __future__ import annotations

import pytest

from helpers import make_cluster
from simtrain.errors import SpecError
from simtrain.outputs.topology_plot import draw_topology
from simtrain.topology.cluster import load_topology
from simtrain.topology.routing.router import Router


@pytest.mark.quick
def test_draw_topology_png(tmp_path):
    c = make_cluster()
    r = Router(c)
    util = {link: 0.7 for link in r.links(0, 40)}
    path = tmp_path / "topo.png"
    draw_topology(c, path, link_utilisation=util)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = tmp_path / "topo.svg"
    draw_topology(load_topology("h100-3tier"), svg)
    assert b"<svg" in svg.read_bytes()[:1000]
    with pytest.raises(SpecError, match=r"\.png or \.svg"):
        draw_topology(c, tmp_path / "topo.jpg")
