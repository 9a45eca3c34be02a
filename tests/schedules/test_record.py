"""Schedule records: the closed-form bubble is the closed-form makespan minus the work; hand-computed
bubbles, parameter copies and peaks in flight."""

from __future__ import annotations

import pytest

from helpers import BUILTIN_SCHEDULES
from simtrain.schedules import REGISTRY

pytestmark = pytest.mark.quick


@pytest.mark.parametrize("name", BUILTIN_SCHEDULES)
def test_bubble_is_makespan_minus_work(name):
    """The analytic bubble (t_mb per micro-batch, F = I = W = t_mb / 3) is the closed-form makespan
    at those costs minus the work m t_mb."""
    rec = REGISTRY[name]
    for p in (1, 2, 3, 4, 8):
        for m in (1, 2, 4, 7, 8, 16, 32):
            for v in ((1, 2, 3) if rec.takes("vpp") else (1,)):
                for t in (3.0, 0.1, 7.3):
                    span = rec.makespan(p, m, t / 3, t / 3, t / 3, vpp=v)
                    bubble = rec.bubble(p, m, t, vpp=v)
                    assert (span is None) == (bubble is None) == (not rec.covers(p, m, v)), (p, m, v)
                    if span is not None:
                        assert bubble == pytest.approx(span - m * t, rel=1e-12, abs=1e-12), (p, m, v, t)


def test_analytic_bubbles():
    """Hand-computed bubbles with F = I = W = 1 (t_mb = 3)."""
    def bubble(name, p, m, t, vpp=1):
        return REGISTRY.closed_form(name).bubble(p, m, t, vpp)

    t = 3.0
    assert bubble("gpipe", 4, 8, t) == bubble("1f1b", 4, 8, t) == 9.0
    assert bubble("1f1b", 4, 8, 0.1) == 3 * 0.1  # (p - 1) t_mb, not a sum of thirds
    assert bubble("interleaved-1f1b", 4, 8, t, vpp=2) == 4.5
    assert bubble("interleaved-1f1b", 4, 6, t, vpp=2) is None  # m % p != 0
    assert bubble("interleaved-1f1b", 4, 8, t, vpp=1) is None  # vpp 1 is not interleaved
    assert bubble("zb-h1", 4, 8, t) == 3.0  # (p-1)(F+I-W)
    assert bubble("zb-h1", 4, 3, t) is None
    assert bubble("zb-h2", 4, 8, t) == 3.0  # (p-1)F start-up
    assert bubble("zb-h2", 4, 6, t) is None
    assert bubble("zb-v", 4, 8, t) == 1.5  # (p-1)F/2
    assert bubble("dualpipe", 4, 8, t) == 2.0  # (p/2-1)(F&B+B-3W) = 1 x (3+2-3)
    assert bubble("dualpipe", 8, 16, t) == 6.0
    assert bubble("dualpipe", 3, 8, t) is None
    assert bubble("dualpipev", 4, 8, t) == 3.0  # (p-1)(F&B+B-3W)/2
    assert REGISTRY["dualpipe"].static_copies == 2 and REGISTRY["dualpipev"].static_copies == 1
    # 2p - 1 on every stage: the parallelogram's last ranks hold their deferred W's activations
    assert [REGISTRY.closed_form("zb-h2").in_flight(4, s, 8) for s in range(4)] == [7, 7, 7, 7]
    assert REGISTRY.closed_form("dualpipev").in_flight(4, 0, 8) == 4.5  # PP + 1 = 9 half-stage chunks
    assert REGISTRY.closed_form("interleaved-1f1b").in_flight(4, 0, 8, 2) == 5.5  # p + (p - 1)/v
