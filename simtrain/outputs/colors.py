"""Colours of the charts: one per span kind, lighter shades for later model chunks, line colours.

Paul Tol's colour-blind-safe "bright", "muted" and "vibrant" schemes
(https://personal.sron.nl/~pault/).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

KIND_COLOURS: Mapping[str, str] = {
    "F": "#4477AA",    # blue
    "B": "#EE6677",    # red
    "I": "#CCBB44",    # yellow
    "W": "#228833",    # green
    "R": "#66CCEE",    # cyan
    "opt": "#AA3377",  # purple
    "tp": "#999933",   # olive
    "cp": "#44AA99",   # teal
    "ep": "#882255",   # wine
    "pp": "#332288",   # indigo
    "dp": "#DDCC77",   # sand
}
KIND_LABELS: Mapping[str, str] = {
    "F": "F forward", "B": "B backward", "I": "I input grad", "W": "W weight grad",
    "R": "R recompute", "opt": "optimizer", "tp": "TP comm", "cp": "CP comm",
    "ep": "EP comm", "pp": "PP send/recv", "dp": "DP comm",
}
#: Blend towards white for the 2nd, 3rd, 4th+ model chunk a rank holds (interleaved schedules).
CHUNK_LIGHTEN = (0.0, 0.35, 0.55, 0.7)
#: Colours of line plots, one per series in turn.
LINE_COLOURS = ("#0077BB", "#EE7733", "#009988", "#CC3311", "#33BBEE", "#EE3377", "#BBBBBB", "#000000")


def lighten(hex_colour: str, amount: float) -> tuple[float, float, float]:
    """``hex_colour`` (``#RRGGBB``) blended towards white by ``amount`` (0 = unchanged), as RGB."""
    rgb = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=float) / 255.0
    out = rgb + (1.0 - rgb) * amount
    return float(out[0]), float(out[1]), float(out[2])


def text_colour(rgb: tuple[float, float, float]) -> str:
    """Black or white, whichever reads better on ``rgb`` (relative luminance, ITU-R BT.709)."""
    luminance = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]
    return "black" if luminance > 0.5 else "white"
