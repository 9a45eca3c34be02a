"""build_schedule(): a scenario's pipeline schedule, as its run lowers it."""

from __future__ import annotations

import pytest

from simtrain import resolve
from simtrain.api.schedule import build_schedule

pytestmark = pytest.mark.quick


def test_the_schedule_has_the_scenarios_stages_and_micro_batches():
    sc = resolve({"model": "llama3-8b", "topology": "h100-ib", "gpus": 16, "tp": 2, "pp": 4, "seq": 2048,
                  "gbs": 16, "schedule": "interleaved-1f1b", "vpp": 2})
    schedule = build_schedule(sc)
    assert schedule.num_ranks == 4 and schedule.num_microbatches == sc.parallel.num_microbatches
    assert schedule.chain_length == 8  # vpp 2: two chunks per pipeline rank


def test_a_schedule_alone_replays_beside_its_closed_form():
    from simtrain.api.schedule import schedule_alone

    phases: list[str] = []
    alone = schedule_alone("1f1b", 4, 8, (1.0, 2.0, 1.0), progress=phases.append)
    assert phases == ["plan 1f1b", "replay"]
    assert alone.schedule.num_ranks == 4 and alone.schedule.num_microbatches == 8
    assert alone.run.makespan == alone.run.closed_form == 44.0  # (m + p - 1)(F + I + W)
    assert schedule_alone("1f1b", 4, 8, comm=0.5).run.closed_form is None  # none with transfer time
    assert alone.report["makespan"] == alone.run.makespan and alone.note == ""


def test_dualpipev_alone_says_when_it_ties_zb_h1():
    from simtrain.api.schedule import schedule_alone

    tie = schedule_alone("dualpipev", 4, 8)
    assert tie.note.startswith("note: the same makespan as zb-h1 (27)") and "--costs 1,1,0.5 gives 23.75" in tie.note
    assert schedule_alone("dualpipev", 4, 8, (1.0, 1.0, 0.5)).note == ""


@pytest.mark.parametrize("kwargs, needle", [
    ({"costs": (0.0, 1.0, 1.0)}, "F and I must be > 0"),
    ({"costs": (1.0, 1.0, 2e15)}, "at most 1e+15"),
    ({"comm": 2e15}, "--comm 2e+15"),
    ({"vpp": 2}, "schedule 1f1b has no model chunks"),
])
def test_a_schedule_alone_refuses_what_gives_no_schedule(kwargs, needle):
    from simtrain.api.schedule import schedule_alone
    from simtrain.errors import SimtrainError

    with pytest.raises(SimtrainError, match=needle.replace("+", r"\+")):
        schedule_alone("1f1b", 4, 8, **kwargs)
