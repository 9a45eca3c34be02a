"""Megatron-LM's pipeline layout strings: parsed as Megatron-LM parses them, and turned into
simtrain's split or refused with what does not fit."""

from __future__ import annotations

import pytest

from simtrain.importers.megatron_layout import LayoutError, layout_settings, parse_layout

pytestmark = pytest.mark.quick


def test_parse_unrolls_groups_and_repeats_and_drops_commas():
    """Megatron-LM's own example: ``Ettt|(tt|)*29,m|L`` is [E t t t] + [t t] x 29 + [m] + [L]."""
    assert parse_layout("Ettt|(tt|)*29,m|L") == ["Ettt"] + ["tt"] * 29 + ["m", "L"]
    assert parse_layout("Et*4|(t*4|)*2tmL") == ["Etttt", "tttt", "tttt", "tmL"]
    assert parse_layout("E,t,t,L") == ["EttL"]
    with pytest.raises(LayoutError, match=r"unknown layer character 'x', 'y'"):
        parse_layout("Etx|yL")


def test_settings_of_a_layout():
    """The end chunks' decoder layers, vpp = chunks / pp, the MTP modules with the loss."""
    assert layout_settings("Et|(tt|)*30mL", pp=8, layers=61, mtp_layers=1) == {
        "vpp": 4, "mtp_layers": 1, "first_stage_layers": 1, "last_stage_layers": 0}
    assert layout_settings("Et*3|t*4|t*4|tL", pp=4, layers=12, mtp_layers=None) == {
        "vpp": 1, "mtp_layers": 0, "first_stage_layers": 3, "last_stage_layers": 1}
    assert layout_settings("Et*8L", pp=1, layers=8, mtp_layers=None) == {"vpp": 1, "mtp_layers": 0}


def test_a_layout_that_does_not_fit_names_why():
    with pytest.raises(LayoutError, match="^2 MTP modules \\(m\\) where --mtp-num-layers gives 1$"):
        layout_settings("Et|tmmL", pp=2, layers=2, mtp_layers=1)
    with pytest.raises(LayoutError, match="^3 chunks do not divide over pp=2 pipeline ranks$"):
        layout_settings("Et|t|tL", pp=2, layers=3, mtp_layers=None)
    with pytest.raises(LayoutError, match="middle chunks hold 1, 2 decoder layers"):
        layout_settings("Et|t|tt|tL", pp=4, layers=5, mtp_layers=None)
