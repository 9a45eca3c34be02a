"""DualPipe and DualPipeV: replayed makespans equal the bubbles of DualPipe's README, never above 1F1B;
DualPipeV's order is PyTorch's ScheduleDualPipeV's, rebuilt here from its source as a reference."""

from __future__ import annotations

import pytest

from helpers import makespan
from simtrain.schedules import REGISTRY, generate, replay, scaled_costs
from simtrain.schedules.ir import Action, Schedule
from simtrain.schedules.validate import validate


@pytest.mark.quick
@pytest.mark.parametrize("p", range(2, 11, 2))
def test_dualpipe_closed_forms(p):
    for m in range(2 * p, 4 * p + 1, 2):
        dp = makespan(generate("dualpipe", p, m))
        # README bubble (PP/2-1)(F&B + B - 3W) with F&B = F + B (no overlap): (p/2-1)*2
        assert dp == REGISTRY.makespan("dualpipe", p, m, 1, 1, 1) == m * 3 + (p // 2 - 1) * 2
        dv = makespan(generate("dualpipev", p, m))
        assert dv == REGISTRY.makespan("dualpipev", p, m, 1, 1, 1) == m * 3 + (p - 1)
        assert dp <= makespan(generate("1f1b", p, m)) and dv <= makespan(generate("1f1b", p, m))


def torch_dualpipev(p: int, m: int) -> Schedule:
    """PyTorch's DualPipeV order: ``ScheduleDualPipeV._calculate_single_rank_operations`` in
    pytorch/pytorch ``torch/distributed/pipelining/schedules.py``, rewritten with its counters.

    Per rank: counters per (stage, kind), a full backward counted on the I counter (and the W
    one); an I queues its W, ``add_weight_action_if_pending`` pops the oldest; the eight steps
    with the counts of that function (``step_1 = 2(p - r - 1)`` ... ``step_8 = r + 1``).
    """
    rows = []
    for r in range(p):
        s0, s1 = r, 2 * p - 1 - r  # generate_rank_to_stage_mapping(p, 2p, style="v")
        count: dict[tuple[int, str], int] = {}
        queue: list[tuple[int, int]] = []
        row: list[Action] = []

        def take(stage, kind):
            mb = count.get((stage, kind), 0)
            count[(stage, kind)] = mb + 1
            return mb

        def add(stage, kind):
            mb = take(stage, "I" if kind in ("I", "B") else kind)
            if kind == "I":
                queue.append((stage, mb))
            row.append(Action(stage, kind, mb))

        def overlap(fstage, bstage):
            row.append(Action(fstage, "FB", take(fstage, "F"), bstage, take(bstage, "I")))

        def weight():
            if queue:
                stage, mb = queue.pop(0)
                row.append(Action(stage, "W", mb))

        for _ in range(2 * (p - r - 1)):
            add(s0, "F")
        for _ in range(r + 1):
            add(s0, "F")
            add(s1, "F")
        for _ in range(p - r - 1):
            add(s1, "I")
            weight()
            add(s1, "F")
        for i in range(m - 2 * p + r + 1):
            if i == 0 and r == p - 1:
                add(s0, "F")
                add(s1, "B")
            else:
                overlap(s0, s1)
            overlap(s1, s0)
        for _ in range(p - r - 1):
            add(s1, "B")
            overlap(s1, s0)
        zb = False
        for i in range(r + 1):
            if i == (r + 1) // 2 and r % 2 == 1:
                zb = True
            add(s1, "I" if zb else "B")
            if i == (r + 1) // 2 and r % 2 == 0:
                zb = True
            add(s0, "I" if zb else "B")
        for _ in range(p - r - 1):
            weight()
            add(s0, "I" if zb else "B")
        for _ in range(r + 1):
            weight()
        rows.append(tuple(row))
    return Schedule("torch-dualpipev", p, m, tuple(j if j < p else 2 * p - 1 - j for j in range(2 * p)),
                    tuple(rows))


@pytest.mark.quick
def test_torch_reference_by_hand():
    """The reference reproduces p = 2, m = 4 worked by hand from PyTorch's source."""
    s = torch_dualpipev(2, 4)
    row0 = [str(a) for a in s.actions[0]]
    # rank 0 (stages 0 and 3): step 1 two F0, step 2 one F0 F1 pair, step 3 one I1 W1 F1
    assert row0[:7] == ["0F0", "0F1", "0F2", "3F0", "3I0", "3W0", "3F1"]
    # step 4: m - 2p + r + 1 = 1 round F0&B1, F1&B0; step 5: B1, F1&B0
    assert row0[7:11] == ["0F3&3B1", "3F2&0B0", "3B2", "3F3&0B1"]
    # step 6, one round, i = 0 = (r + 1) // 2 with r even: B1 full, then B0 split (I);
    # step 7: the queued W, then I0; step 8: the last W
    assert row0[11:] == ["3B3", "0I2", "0W2", "0I3", "0W3"]
    row1 = [str(a) for a in s.actions[1]]
    # rank 1 (stages 1 and 2): step 2 twice; step 4 two rounds, the first not overlapped
    assert row1[:9] == ["1F0", "2F0", "1F1", "2F1", "1F2", "2B0", "2F2&1B0", "1F3&2B1", "2F3&1B1"]
    # step 6, two rounds, r odd: split from i = 1 on; step 8: two W, oldest first
    assert row1[9:] == ["2B2", "1B2", "2I3", "1I3", "2W3", "1W3"]


@pytest.mark.parametrize("p", range(1, 9))
def test_dualpipev_is_pytorchs_order(p):
    """For every (p, m) PyTorch accepts (m >= 2p), our DualPipeV is PyTorch's order; replayed
    with the same costs its makespan is therefore never longer, for several cost mixes."""
    for m in range(2 * p, 2 * p + 7):
        ours, ref = generate("dualpipev", p, m), torch_dualpipev(p, m)
        validate(ref)
        assert ours.actions == ref.actions
        for costs in ((1, 1, 1), (1, 1, 0.5), (1, 2, 1), (2, 1, 1)):
            assert makespan(ours, *costs) <= makespan(ref, *costs)


@pytest.mark.quick
@pytest.mark.parametrize("p", range(1, 9))
def test_dualpipev_peak_in_flight(p):
    """DualPipe's PP + 1 chunk activations with PP = 2p half-stage chunks: p + 1/2 stages, within
    DualPipe's p + 1; the record says the same."""
    for m in range(2 * p, 2 * p + 5):
        rep = replay(generate("dualpipev", p, m), (1, 1, 1))
        assert rep.peak_inflight_chunks == tuple([2 * p + 1] * p)
        assert rep.peak_inflight == tuple([p + 0.5] * p)
        assert all(REGISTRY["dualpipev"].in_flight(p, s, m) == p + 0.5 for s in range(p))
        if p % 2 == 0 and m % 2 == 0:
            dp = replay(generate("dualpipe", p, m), (1, 1, 1))
            assert dp.peak_inflight == tuple([p + 1.0] * p)
            assert all(REGISTRY["dualpipe"].in_flight(p, s, m) == p + 1 for s in range(p))


@pytest.mark.parametrize("name", ["dualpipe", "dualpipev"])
def test_closed_form_agreement_as_documented(name):
    """The record's docstring: the replay matches the README bubble when F = I and W <= F, is
    shorter when I > F, longer when I < F or W > F (equal where the bubble's factor is zero:
    DualPipe on 2 ranks, DualPipeV on 1)."""
    for p in range(1, 9):
        for m in range(2 * p, 2 * p + 5):
            if not REGISTRY[name].covers(p, m):
                continue
            trivial = (p // 2 - 1 if name == "dualpipe" else p - 1) == 0
            s = generate(name, p, m)

            def gap(F, I, W):  # noqa: E741,N803
                return replay(s, scaled_costs(s, F, I, W)).makespan - REGISTRY.makespan(name, p, m, F, I, W)

            for costs in ((1, 1, 1), (1, 1, 0.5), (2, 2, 1), (1, 1, 0)):
                assert gap(*costs) == pytest.approx(0, abs=1e-9)
            for costs in ((1, 2, 1), (1, 1.5, 0.25)):
                assert gap(*costs) == pytest.approx(0, abs=1e-9) if trivial else gap(*costs) < 0
            for costs in ((2, 1, 1), (1, 0.5, 0.5), (1, 1, 2)):
                assert gap(*costs) == pytest.approx(0, abs=1e-9) if trivial else gap(*costs) > 0
