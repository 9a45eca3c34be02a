"""The step lower bound a search prunes with: never above a simulated step, on every schedule,
MoE, recompute, ZeRO, CP and TP overlap; close to the busiest rank's compute; none where it may not
hold."""

from __future__ import annotations

import numpy as np
import pytest

from simtrain import api
from simtrain.workload.bound import step_lower_bound
from simtrain.workload.program import KIND

_S = dict(model="llama3-8b", topology="h100-ib", seq=2048)
_MOE = dict(model="mixtral-8x7b", topology="h100-ib", seq=2048)
CASES = [
    dict(_S, gpus=16, tp=2, pp=2, gbs=16),
    dict(_S, gpus=16, tp=2, pp=2, gbs=16, schedule="gpipe", zero=0),
    dict(_S, gpus=16, tp=2, pp=2, gbs=16, schedule="interleaved-1f1b", vpp=2, zero=3),
    dict(_S, gpus=16, tp=4, pp=4, gbs=16, schedule="zb-h1", recompute="full"),
    dict(_S, gpus=8, tp=2, pp=4, gbs=14, schedule="zb-h2", recompute="selective"),
    dict(_S, gpus=8, tp=2, pp=4, gbs=8, schedule="zb-v", first_stage_layers=3, last_stage_layers=5),
    dict(_MOE, gpus=16, tp=2, pp=2, ep=4, gbs=16, schedule="dualpipe"),
    dict(_MOE, gpus=16, tp=2, pp=2, ep=4, gbs=16, schedule="dualpipev"),
    dict(_S, gpus=8, tp=2, pp=4, gbs=8, schedule="zb-auto", balance_stages=True),
    dict(_S, seq=16384, gpus=16, tp=2, cp=2, pp=2, gbs=8, recompute="2"),
    dict(_S, gpus=16, tp=4, pp=2, gbs=8, network="none", sp=False),
    dict(_S, gpus=16, tp=4, pp=2, gbs=8, tp_comm_overlap=True, fp8=True),
    dict(_MOE, gpus=32, tp=2, pp=2, ep=8, gbs=32, schedule="interleaved-1f1b", vpp=2,
         overlap_moe_expert_parallel_comm=True),
]
_COMPUTE = [KIND[k] for k in ("F", "B", "I", "W", "R", "opt")]


@pytest.mark.parametrize("settings", CASES, ids=[f"{c.get('schedule', '1f1b')}-{i}" for i, c in enumerate(CASES)])
def test_the_bound_never_exceeds_the_busiest_ranks_compute(settings):
    scenario = api.resolve(settings)
    bound = step_lower_bound(scenario)
    result = api.simulate(scenario)
    c = result.timeline.cols
    compute = np.isin(c["kind"], _COMPUTE)
    busiest = max(float((c["end_s"] - c["start_s"])[compute & (c["rank"] == r)].sum())
                  for r in np.unique(c["rank"][compute]))
    assert bound <= busiest <= result.report["step_time_s"]
    assert bound >= 0.7 * busiest  # tight enough to prune with


@pytest.mark.quick
def test_no_bound_where_the_costs_may_differ_by_rank():
    base = dict(_S, gpus=16, tp=2, pp=2, gbs=16)
    assert step_lower_bound(api.resolve(base)) > 0
    for extra in (dict(jitter=0.1), dict(straggler="3:0.5"), dict(steps=2),
                  dict(_MOE, ep=4, routing_skew=0.8)):
        assert step_lower_bound(api.resolve({**base, **extra})) is None, extra
