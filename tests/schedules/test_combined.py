"""Megatron-LM's 1F1B overlap as a schedule transformation: one more warm-up forward, then each
remaining forward paired with the next backward as an F&B action; orders kept, always valid."""

from __future__ import annotations

import pytest

from simtrain.errors import ScheduleError
from simtrain.schedules import generate, load_schedule, validate
from simtrain.schedules.combined import combine_1f1b

pytestmark = pytest.mark.quick


def test_no_pipelining_pairs_each_forward_with_the_previous_backward():
    """combined_1f1b_schedule_for_no_pipelining: F0, then F(i+1) with B(i), then the last B."""
    s = combine_1f1b(generate("1f1b", 1, 4))
    assert s.text() == [["0F0", "0F1&0B0", "0F2&0B1", "0F3&0B2", "0B3"]]


def test_1f1b_gets_one_more_warm_up_forward_per_rank():
    s = combine_1f1b(generate("1f1b", 2, 4))
    assert s.text() == [["0F0", "0F1", "0F2&0B0", "0F3&0B1", "0B2", "0B3"],
                        ["1F0", "1F1&1B0", "1F2&1B1", "1F3&1B2", "1B3"]]
    validate(s)


@pytest.mark.parametrize("pp, m, vpp", [(2, 4, 2), (2, 4, 4), (4, 8, 2), (4, 4, 3), (4, 12, 2), (8, 16, 4),
                                        (3, 9, 2)])
def test_interleaved_pairs_keep_the_order_and_stay_valid(pp, m, vpp):
    plain = generate("interleaved-1f1b", pp, m, vpp=vpp)
    s = combine_1f1b(plain)
    validate(s)  # complete, on the right ranks, deadlock-free
    for r, (old, new) in enumerate(zip(plain.actions, s.actions)):
        halves = [h for a in new for h in a.halves()]
        assert [a for a in halves if a.kind == "F"] == [a for a in old if a.kind == "F"]
        assert [a for a in halves if a.kind == "B"] == [a for a in old if a.kind == "B"]
        warm = min(2 * (pp - r - 1) + (vpp - 1) * pp, m * vpp)  # Megatron-core's warm-up forwards
        new_warm = next((i for i, a in enumerate(new) if a.kind != "F"), len(new))
        assert new_warm == min(warm + 1, m * vpp)  # get_pp_rank_microbatches: num_warmup += 1
        assert all(a.mb != a.b_mb for a in new if a.kind == "FB")  # two micro-batches per step
    assert any(a.kind == "FB" for row in s.actions for a in row)
    assert s.meta["combined_1f1b"] and s.name == plain.name


def test_load_schedule_combines_on_request_only():
    assert load_schedule("interleaved-1f1b", 2, 4, vpp=2) == generate("interleaved-1f1b", 2, 4, vpp=2)
    assert load_schedule("1f1b", 2, 4, combined_1f1b=True) == combine_1f1b(generate("1f1b", 2, 4))


@pytest.mark.parametrize("name", ["gpipe", "zb-h1", "dualpipev"])
def test_other_schedules_are_refused(name):
    with pytest.raises(ScheduleError, match="applies to 1f1b, interleaved-1f1b only"):
        combine_1f1b(generate(name, 2, 4))
