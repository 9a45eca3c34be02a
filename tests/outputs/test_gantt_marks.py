"""The marks of a Gantt chart: boxes less than a pixel apart merged per row, and compound paths
that hold every box once (tests/outputs/test_gantt.py checks they draw the same pixels)."""

from __future__ import annotations

import numpy as np
import pytest

from simtrain.outputs.gantt_marks import compound, merged


@pytest.mark.quick
def test_boxes_less_than_a_pixel_apart_merge_per_row():
    x0 = np.array([0.0, 1.05, 3.0, 0.5, 2.0, 2.2])
    x1 = np.array([1.0, 2.0, 4.0, 1.5, 2.1, 2.3])
    rows = np.array([0, 0, 0, 1, 1, 1])
    a, b, r = merged(x0, x1, rows, gap=0.1)
    assert a.tolist() == [0.0, 3.0, 0.5, 2.0]
    assert b.tolist() == [2.0, 4.0, 1.5, 2.3]
    assert r.tolist() == [0, 0, 1, 1]
    # a box inside another, and rows far apart in time, stay in their rows
    a, b, r = merged(np.array([5.0, 5.5, 0.0]), np.array([9.0, 6.0, 0.5]), np.array([3, 3, 7]), gap=0.01)
    assert (a.tolist(), b.tolist(), r.tolist()) == ([5.0, 0.0], [9.0, 0.5], [3, 7])


@pytest.mark.quick
def test_compound_paths_hold_every_box_once():
    a, b, row = np.array([0.0, 2.0, 5.0]), np.array([1.0, 3.0, 6.0]), np.array([0.0, 0.0, 1.0])
    paths = compound(a, b, row)  # boxes 0.8 of a row high
    assert len(paths) == 2  # boxes 0-1, then box 2
    first = paths[0].vertices.tolist()
    assert first[:5] == [[0.0, -0.4], [1.0, -0.4], [1.0, 0.4], [0.0, 0.4], [0.0, -0.4]]
    assert first[5:] == [[2.0, -0.4], [3.0, -0.4], [3.0, 0.4], [2.0, 0.4], [2.0, -0.4]]
    assert paths[1].vertices.tolist() == [[5.0, 0.6], [6.0, 0.6], [6.0, 1.4], [5.0, 1.4], [5.0, 0.6]]
    assert paths[0].codes.tolist() == [1, 2, 2, 2, 79] * 2  # MOVETO, LINETO x3, CLOSEPOLY
    assert len(compound(a[:1], b[:1], row[:1])) == 1
