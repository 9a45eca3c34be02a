"""Chart colours: every span kind has a colour and a label; lighter shades; readable text."""

from __future__ import annotations

import pytest

from simtrain.outputs.colors import KIND_COLOURS, KIND_LABELS, lighten, text_colour
from simtrain.workload.program import KINDS


def test_every_kind_has_a_colour_and_a_label():
    assert set(KIND_COLOURS) == set(KINDS) == set(KIND_LABELS)
    assert lighten("#4477AA", 0.0) == pytest.approx((0x44 / 255, 0x77 / 255, 0xAA / 255))
    assert lighten("#000000", 1.0) == (1.0, 1.0, 1.0)
    assert text_colour((1.0, 1.0, 1.0)) == "black" and text_colour((0.0, 0.0, 0.0)) == "white"
