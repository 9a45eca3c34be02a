"""The marks of a Gantt chart (:mod:`simtrain.outputs.gantt`): its boxes, as compound paths one
collection per (kind, shade), boxes less than a pixel apart merged, and the micro-batch numbers
written into boxes wide enough to hold them, at most :data:`MAX_LABELS`."""

from __future__ import annotations

import numpy as np

from simtrain.outputs.colors import CHUNK_LIGHTEN, KIND_COLOURS, KIND_HATCHES, lighten, text_colour
from simtrain.workload.program import KINDS

#: Most micro-batch numbers written into a chart.
MAX_LABELS = 3000
DPI = 100  # dots per inch of the figure
ROW_IN = 0.28  # height of one row, inches
BAR = 0.8  # box height as a fraction of the row


def merged(x0: np.ndarray, x1: np.ndarray, rows: np.ndarray, gap: float) -> tuple[np.ndarray, ...]:
    """Boxes of one row closer than ``gap`` (a pixel) merged: (x0, x1, row) of the merged boxes. Rows
    are laid end to end (each shifted past the previous one) so one running maximum finds all runs."""
    if len(x0) == 0:
        return x0, x1, rows
    order = np.lexsort((x0, rows))
    a, b, r = x0[order], x1[order], rows[order]
    shift = (r - r.min()) * (float(b.max() - a.min()) + 2 * gap + 1.0)
    reach = np.maximum.accumulate(b + shift)
    starts = np.ones(len(a), dtype=bool)
    starts[1:] = (a[1:] + shift[1:] > reach[:-1] + gap) | (r[1:] != r[:-1])
    first = np.flatnonzero(starts)
    return a[first], np.maximum.reduceat(b, first), r[first]


def draw_boxes(ax, x0, x1, span_row, kinds, levels, outlined: bool, pixel: float) -> None:
    """One collection per (kind, shade); communication hatched in a contrasting colour. Boxes wide
    enough for outlines to help are ``outlined``: compute in white, hatched ones a ``pixel`` short,
    so neighbours stay apart. Without outlines, boxes of a row and shade less than a ``pixel`` apart
    merge and form compound paths (:func:`compound`), unantialiased and snapped to pixels as a lone
    box is: Agg renders a hatch pattern once per path (matplotlib ``src/_backend_agg.h``, ``_draw_path``)."""
    from matplotlib.collections import PathCollection, PolyCollection

    for k_code, kind in enumerate(KINDS):
        sel_k = kinds == k_code  # an absent kind has no shades, so no collection
        hatch = KIND_HATCHES.get(kind)
        for level in np.unique(levels[sel_k]).tolist():
            sel = sel_k & (levels == level)
            fill = lighten(KIND_COLOURS[kind], CHUNK_LIGHTEN[level])
            style = dict(facecolors=[fill], edgecolors=[text_colour(fill) if hatch else "white"],
                         hatch=hatch, zorder=2)  # a hatch takes the edge colour
            if outlined:
                end = x1[sel] - (np.minimum(pixel, (x1[sel] - x0[sel]) / 2) if hatch else 0.0)
                ax.add_collection(PolyCollection(box_corners(x0[sel], end, span_row[sel])[:, :4],
                                                 linewidths=0.0 if hatch else 0.3, antialiaseds=True, **style))
            else:
                coll = PathCollection(compound(*merged(x0[sel], x1[sel], span_row[sel], pixel)),
                                      linewidths=0.0, antialiaseds=False, **style)
                coll.set_snap(True)
                ax.add_collection(coll)


def box_corners(a: np.ndarray, b: np.ndarray, row: np.ndarray) -> np.ndarray:
    """The corners of boxes ``a``..``b`` on rows ``row``, closed (the first again), shape (n, 5, 2)."""
    lo, hi = row - BAR / 2, row + BAR / 2
    return np.stack([np.stack([a, b, b, a, a], axis=1), np.stack([lo, lo, hi, hi, lo], axis=1)], axis=2)


def compound(a: np.ndarray, b: np.ndarray, row: np.ndarray) -> list:
    """Boxes ``a``..``b`` on rows ``row`` as two ``Path`` objects of a closed subpath per box (one
    for a lone box), never one: matplotlib draws a collection of one path as a marker
    (``Collection.draw``), whose clip box keeps one more pixel column at the axes' edge."""
    from matplotlib.path import Path

    verts = box_corners(a, b, row)
    codes = np.array([Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO, Path.CLOSEPOLY], dtype=Path.code_type)
    cuts = [0, (len(a) + 1) // 2, len(a)] if len(a) > 1 else [0, len(a)]
    return [Path(verts[i:j].reshape(-1, 2), np.tile(codes, j - i)) for i, j in zip(cuts, cuts[1:])]


def draw_labels(ax, x0, x1, span_row, kinds, levels, mbs, stages, px_per_unit: float,
               font_pt: float) -> None:
    """Micro-batch numbers, one per action: consecutive spans of a row with the same kind, stage
    and micro-batch (the blocks of one forward or backward) form one labelled group."""
    order = np.lexsort((x0, span_row))
    g_row, g_kind, g_mb, g_stage = span_row[order], kinds[order], mbs[order], stages[order]
    new_group = np.ones(len(order), dtype=bool)
    if len(order) > 1:
        new_group[1:] = ((g_row[1:] != g_row[:-1]) | (g_kind[1:] != g_kind[:-1])
                         | (g_mb[1:] != g_mb[:-1]) | (g_stage[1:] != g_stage[:-1]))
    starts = np.nonzero(new_group)[0]
    gx0 = x0[order][starts]
    gx1 = np.maximum.reduceat(x1[order], starts) if len(order) else np.zeros(0)
    first = order[starts]
    box_px = (gx1 - gx0) * px_per_unit
    char_px = font_pt * 0.62 * DPI / 72
    gmb = mbs[first]
    n_chars = np.where(gmb >= 0, np.floor(np.log10(np.maximum(gmb, 1))) + 1, 0)
    fits = (gmb >= 0) & (box_px >= n_chars * char_px + 3) & (ROW_IN * BAR * 72 >= font_pt * 1.1)
    cand = np.nonzero(fits)[0]
    if len(cand) > MAX_LABELS:  # keep the widest boxes, ties in timeline order
        cand = np.sort(cand[np.argsort(-box_px[cand], kind="stable")[:MAX_LABELS]])
    for g in cand.tolist():
        i = int(first[g])
        kind = KINDS[kinds[i]]
        fill = lighten(KIND_COLOURS[kind], CHUNK_LIGHTEN[int(levels[i])])
        box = None if kind not in KIND_HATCHES else {"boxstyle": "square,pad=0.1", "facecolor": fill,
                                                      "edgecolor": "none"}
        ax.text((gx0[g] + gx1[g]) / 2, span_row[i], str(int(mbs[i])), ha="center", va="center",
                fontsize=font_pt, color=text_colour(fill), zorder=3, clip_on=True, bbox=box)
