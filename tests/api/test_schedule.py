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
