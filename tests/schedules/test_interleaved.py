"""Interleaved 1F1B: the replayed makespan is the closed form m (F + B) + (p - 1)(F + B) / v where it
applies (F = I = W = 1, free communication)."""

from __future__ import annotations

import pytest

from helpers import makespan
from simtrain.schedules import REGISTRY, generate


@pytest.mark.parametrize("p", range(1, 9))
def test_interleaved_closed_form(p):
    for v in range(1, 5):
        for m in range(p, 33, p):
            s = generate("interleaved-1f1b", p, m, vpp=v)
            expect = m * 3 + (p - 1) * 3 / v
            assert makespan(s) == pytest.approx(expect)
            assert REGISTRY.makespan("interleaved-1f1b", p, m, 1, 1, 1, vpp=v) == pytest.approx(expect)
    if p > 1:
        assert REGISTRY.makespan("interleaved-1f1b", p, p + 1, 1, 1, 1, vpp=2) is None
