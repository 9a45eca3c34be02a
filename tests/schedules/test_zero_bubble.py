"""ZB-H1, ZB-H2 and ZB-V: replayed makespans equal their closed forms (ZB-H1's for W <= min(F, I))."""

from __future__ import annotations

import pytest

from helpers import makespan
from simtrain.schedules import REGISTRY, generate


@pytest.mark.parametrize("p", range(1, 9))
def test_zero_bubble_closed_forms(p):
    for m in range(p, 33):
        h1 = makespan(generate("zb-h1", p, m))
        assert h1 == m * 3 + (p - 1) * (1 + 1 - 1) == REGISTRY.makespan("zb-h1", p, m, 1, 1, 1)
        if m >= 2 * p - 1:
            h2 = makespan(generate("zb-h2", p, m))
            zv = makespan(generate("zb-v", p, m))
            assert h2 == REGISTRY.makespan("zb-h2", p, m, 1, 1, 1) == m * 3 + (p - 1)
            assert zv == REGISTRY.makespan("zb-v", p, m, 1, 1, 1) == m * 3 + (p - 1) / 2
            # the papers: ZB-H2 and ZB-V have (almost) no bubble; ZB-V at ZB-H1's memory
            assert h2 <= h1 and zv <= h1
    # ZB-H1's formula holds for W <= min(F, I) (see its record)
    for F, I, W in [(2, 1, 1), (1, 2, 0.5), (1.5, 1.5, 1)]:  # noqa: E741,N806
        m = 3 * p
        assert makespan(generate("zb-h1", p, m), F, I, W) == pytest.approx(
            REGISTRY.makespan("zb-h1", p, m, F, I, W))
