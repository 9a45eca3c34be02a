"""Chart colours: every span kind has a colour and a label; communication kinds have hatch patterns
of their own; the kinds stay apart for colour-blind readers; lighter shades; readable text."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from simtrain.outputs.colors import (CHUNK_LIGHTEN, KIND_COLOURS, KIND_HATCHES, KIND_LABELS, hex_colour, lighten,
                                     text_colour)
from simtrain.workload.program import COMM_KINDS, COMPUTE_KINDS, KINDS

pytestmark = pytest.mark.quick

# Colour-vision deficiency simulation at full severity, in linear RGB: Machado, Oliveira and
# Fernandes, "A Physiologically-based Model for Simulation of Color Vision Deficiency", IEEE TVCG
# 15(6), 2009 (their table, severity 1.0).
VISION = {
    "normal": np.eye(3),
    "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                            [-0.003882, -0.048116, 1.051998]]),
    "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                              [-0.011820, 0.042940, 0.968881]]),
    "tritanopia": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                            [0.004733, 0.691367, 0.303900]]),
}


def _lab(rgb: tuple[float, float, float], vision: np.ndarray) -> np.ndarray:
    """CIELAB (D65) of an sRGB colour as seen with ``vision``."""
    c = np.asarray(rgb)
    linear = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    linear = np.clip(vision @ linear, 0, 1)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    t = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(t > 0.008856, np.cbrt(t), 7.787 * t + 16 / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def _closest(kinds, shade: float) -> float:
    """The smallest colour difference (CIE76 delta E) between two of ``kinds`` at ``shade``, over
    normal vision and the three dichromacies."""
    return min(float(np.linalg.norm(_lab(lighten(KIND_COLOURS[a], shade), v)
                                    - _lab(lighten(KIND_COLOURS[b], shade), v)))
               for v in VISION.values() for a, b in itertools.combinations(kinds, 2))


def test_every_kind_has_a_colour_and_a_label_and_only_communication_a_hatch():
    assert set(KIND_COLOURS) == set(KINDS) == set(KIND_LABELS)
    assert set(KIND_HATCHES) == set(COMM_KINDS)
    assert len(set(KIND_HATCHES.values())) == len(KIND_HATCHES)  # each its own pattern
    assert lighten("#4477AA", 0.0) == pytest.approx((0x44 / 255, 0x77 / 255, 0xAA / 255))
    assert lighten("#000000", 1.0) == (1.0, 1.0, 1.0)
    assert text_colour((1.0, 1.0, 1.0)) == "black" and text_colour((0.0, 0.0, 0.0)) == "white"
    assert hex_colour(lighten("#0072B2", 0.0)) == "#0072B2" and hex_colour((1.2, -1, 0.5)) == "#FF0080"


def test_kinds_stay_apart_for_colour_blind_readers():
    # a delta E of about 10 is clearly visible side by side; the old palette had 7 (I and dp,
    # tritanopia) and 11.5 (EP and optimizer, deuteranopia)
    assert _closest(COMPUTE_KINDS, 0.0) > 16
    assert _closest(COMM_KINDS, 0.0) > 25  # and each communication kind has its own hatch besides
    # a later chunk's lighter shade, among the kinds that belong to a stage (not the optimizer)
    assert _closest([k for k in COMPUTE_KINDS if k != "opt"], CHUNK_LIGHTEN[1]) > 10
