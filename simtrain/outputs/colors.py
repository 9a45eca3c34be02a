"""Colours of the charts: one per span kind, hatching for communication, line colours.

Every picture (the Gantt PNG/SVG and the HTML report) draws a span kind the same way:

- compute kinds are solid boxes in the eight-colour palette of Okabe & Ito, "Color Universal
  Design" (2008, https://jfly.uni-koeln.de/color/), chosen to stay apart for protanopes,
  deuteranopes and tritanopes;
- communication kinds are boxes in colours of Paul Tol's colour-blind-safe schemes
  (https://personal.sron.nl/~pault/) with a hatch pattern of their own over them, so a
  communication box never reads as a compute box and two communication kinds differ both in
  colour and in pattern.

Later model chunks of an interleaved schedule are drawn in lighter shades of their kind's colour.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

KIND_COLOURS: Mapping[str, str] = {
    "F": "#0072B2",    # blue (Okabe-Ito)
    "B": "#D55E00",    # vermillion (Okabe-Ito)
    "I": "#E69F00",    # orange (Okabe-Ito)
    "W": "#009E73",    # bluish green (Okabe-Ito)
    "R": "#F0E442",    # yellow (Okabe-Ito)
    "opt": "#CC79A7",  # reddish purple (Okabe-Ito)
    "tp": "#332288",   # indigo (Tol muted), hatched
    "cp": "#117733",   # green (Tol muted), hatched
    "ep": "#882255",   # wine (Tol muted), hatched
    "pp": "#000000",   # black, hatched
    "dp": "#DDCC77",   # sand (Tol muted), hatched
}
#: Hatch pattern of each communication kind (matplotlib's hatch syntax; the HTML report draws
#: the same strokes); compute kinds have none.
KIND_HATCHES: Mapping[str, str] = {
    "tp": "///", "cp": "\\\\\\", "ep": "xxx", "pp": "...", "dp": "---",
}
KIND_LABELS: Mapping[str, str] = {
    "F": "F forward", "B": "B backward", "I": "I input grad", "W": "W weight grad",
    "R": "R recompute", "opt": "optimizer", "tp": "TP comm", "cp": "CP comm",
    "ep": "EP comm", "pp": "PP send/recv", "dp": "DP comm",
}
#: Blend towards white for the 2nd, 3rd, 4th+ model chunk a rank holds (interleaved schedules).
CHUNK_LIGHTEN = (0.0, 0.35, 0.55, 0.7)
#: Colours of line plots, one per series in turn (Tol's "vibrant" scheme, then grey and black).
LINE_COLOURS = ("#0077BB", "#EE7733", "#009988", "#CC3311", "#33BBEE", "#EE3377", "#BBBBBB", "#000000")
#: Colour of the memory capacity line.
CAPACITY_COLOUR = "#CC3311"


def lighten(hex_colour: str, amount: float) -> tuple[float, float, float]:
    """``hex_colour`` (``#RRGGBB``) blended towards white by ``amount`` (0 = unchanged), as RGB."""
    rgb = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=float) / 255.0
    out = rgb + (1.0 - rgb) * amount
    return float(out[0]), float(out[1]), float(out[2])


def text_colour(rgb: tuple[float, float, float]) -> str:
    """Black or white, whichever reads better on ``rgb`` (relative luminance, ITU-R BT.709).

    Also the colour of a communication box's hatch strokes."""
    luminance = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]
    return "black" if luminance > 0.5 else "white"


def hex_colour(rgb: tuple[float, float, float]) -> str:
    """``rgb`` (components in 0..1) as ``#RRGGBB``."""
    return "#" + "".join(f"{round(min(max(c, 0.0), 1.0) * 255):02X}" for c in rgb)
