"""GPipe and 1F1B: the replayed makespan is the closed form (m + p - 1)(F + B) (F = I = W = 1, free
communication)."""

from __future__ import annotations

import pytest

from helpers import makespan
from simtrain.schedules import REGISTRY, generate

pytestmark = pytest.mark.quick


@pytest.mark.parametrize("p", range(1, 9))
def test_gpipe_1f1b_closed_form(p):
    for m in range(1, 33):
        for name in ("gpipe", "1f1b"):
            assert makespan(generate(name, p, m)) == (m + p - 1) * 3
            assert REGISTRY.makespan(name, p, m, 1, 1, 1) == (m + p - 1) * 3
