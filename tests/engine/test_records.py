"""The loop's op records, filled compiled: positions for dependencies (codes below zero kept),
the class, no argument or waiters, one member, and a compute op's duration or a communication
op's price."""

from __future__ import annotations

import numpy as np
import pytest

from simtrain.engine import loop_code, loop_layout as L
from simtrain.engine.records import fill


@pytest.mark.quick
@pytest.mark.parametrize("through", ["numba", "machine code"])
def test_the_records_are_filled_by_position(through):
    ops = np.array([2, 0, 1], dtype=np.int32)  # position -> op id
    pos_of = np.array([1, 2, 0], dtype=np.int32)  # op id -> position
    dep0 = np.array([-1, 0, -2], dtype=np.int32)  # op 2: a code below zero (MORE)
    dep1 = np.array([-1, -1, 1], dtype=np.int32)
    cls = np.array([L.COMPUTE, L.COLLECTIVE, L.COMPUTE], dtype=np.int8)
    duration, price = np.array([1.5, 0.0, 2.5]), np.array([0.0, 0.25, 0.0])
    rec, cost = np.zeros((3, L.W), dtype=np.int32), np.zeros(3)
    run = fill if through == "numba" else loop_code.RECORDS.fill
    run(rec, cost, ops, pos_of, dep0, dep1, cls, duration, price)
    assert rec[:, L.DEP0].tolist() == [-2, -1, pos_of[0]]
    assert rec[:, L.DEP1].tolist() == [pos_of[1], -1, -1]
    assert rec[:, L.CLS].tolist() == cls[ops].tolist()
    assert (rec[:, [L.ARG, L.WHEAD, L.WTAIL]] == -1).all() and (rec[:, L.NEED] == 1).all()
    assert cost.tolist() == [2.5, 1.5, 0.25]
