"""Interleaved 1F1B: the replayed makespan is the closed form m (F + B) + (p - 1)(F + B) / v where it
applies (F = I = W = 1, free communication)."""

from __future__ import annotations

import pytest

from helpers import makespan
from simtrain.errors import ScheduleError
from simtrain.schedules import REGISTRY, generate


@pytest.mark.parametrize("p", range(1, 9))
def test_interleaved_closed_form(p):
    for v in range(2, 5):
        for m in range(p, 33, p):
            s = generate("interleaved-1f1b", p, m, vpp=v)
            expect = m * 3 + (p - 1) * 3 / v
            assert makespan(s) == pytest.approx(expect)
            assert REGISTRY.makespan("interleaved-1f1b", p, m, 1, 1, 1, vpp=v) == pytest.approx(expect)
    if p > 1:
        assert REGISTRY.makespan("interleaved-1f1b", p, p + 1, 1, 1, 1, vpp=2) is None


@pytest.mark.quick
@pytest.mark.parametrize("kw", [{}, {"vpp": 1}])
def test_interleaved_needs_two_chunks(kw):
    """Without vpp, or with vpp 1 (plain 1F1B), the schedule is refused with a valid vpp named,
    and no closed form claims to cover it."""
    with pytest.raises(ScheduleError, match=r"vpp >= 2 .*--vpp 2"):
        generate("interleaved-1f1b", 4, 8, **kw)
    assert REGISTRY.makespan("interleaved-1f1b", 4, 8, 1, 1, 1, vpp=1) is None


@pytest.mark.quick
def test_search_lists_no_single_chunk_interleaved_copy_of_1f1b():
    """A configuration search drops interleaved-1f1b at vpp 1 (its closed form does not cover it)
    and keeps it at vpp 2."""
    from simtrain.layout_search.simulated import analytic_estimate, enumerate_candidates

    base = {"model": "llama3-8b", "topology": "h100-ib", "seq": 2048, "gbs": 32}
    found = {(c.as_dict()["schedule"], c.as_dict()["vpp"]): analytic_estimate(c) is not None
             for c in enumerate_candidates(base, gpus=16, gpus_per_node=8, schedules=("1f1b", "interleaved-1f1b"),
                                           vpps=(1, 2), tps=(2,), cps=(1,), pps=(2,))}
    assert found == {("1f1b", 1): True, ("interleaved-1f1b", 1): False, ("interleaved-1f1b", 2): True}
