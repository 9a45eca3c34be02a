"""DualPipe and DualPipeV: replayed makespans equal the bubbles of DualPipe's README, never above 1F1B."""

from __future__ import annotations

import pytest

from helpers import makespan
from simtrain.schedules import REGISTRY, generate


@pytest.mark.parametrize("p", range(2, 11, 2))
def test_dualpipe_closed_forms(p):
    for m in range(2 * p, 4 * p + 1, 2):
        dp = makespan(generate("dualpipe", p, m))
        # README bubble (PP/2-1)(F&B + B - 3W) with F&B = F + B (no overlap): (p/2-1)*2
        assert dp == REGISTRY.makespan("dualpipe", p, m, 1, 1, 1) == m * 3 + (p // 2 - 1) * 2
        dv = makespan(generate("dualpipev", p, m))
        assert dv == REGISTRY.makespan("dualpipev", p, m, 1, 1, 1) == m * 3 + (p - 1)
        assert dp <= makespan(generate("1f1b", p, m)) and dv <= makespan(generate("1f1b", p, m))
