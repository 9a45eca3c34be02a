"""Perturbed clusters end to end: stragglers, slow nodes, other GPU generations, degraded and
failed links; folding around them; their cost in the report."""

from __future__ import annotations

import numpy as np
import pytest

from simtrain import api
from simtrain.errors import SpecError
from simtrain.workload.program import STREAM

from helpers import assert_close

SMALL = dict(model="llama3-8b", topology="h100-ib", seq=256, gbs=16)


def _step(settings: dict, **kw) -> api.SimResult:
    return api.simulate(api.resolve(settings), perturbation_costs=False, **kw)


def _compute_before_first_reduction_s(result: api.SimResult, rank: int) -> float:
    """Compute seconds ``rank`` runs before its first gradient reduction starts: the forward and
    the backward of the first gradient bucket."""
    tl = result.timeline
    mine = tl["rank"] == rank
    reduction = np.isin(tl["name"], [i for i, n in enumerate(tl.names) if n == "dp.reduce_scatter"])
    first = float(np.min(tl["start_s"][mine & (tl["stream"] == STREAM["dp"]) & reduction]))
    mask = mine & (tl["stream"] == STREAM["compute"]) & (tl["start_s"] < first)
    return float(np.sum(np.minimum(tl["end_s"][mask], first) - tl["start_s"][mask]))


def test_a_straggler_costs_a_tp_layout_its_compute_and_a_comm_bound_dp_layout_less():
    # TP 8 with blocking TP collectives: every layer waits for the slow GPU, so the step grows by
    # (1/0.8 - 1) of the compute. Pure DP bound by its gradient reductions (seq 256 on 200 Gb/s
    # NICs): the slow GPU's extra compute hides under the reductions that queue behind the first
    # bucket, so it costs at most (1/0.8 - 1) of the compute before the first reduction starts.
    quiet = dict(comm_interference=0.0)
    tp = dict(SMALL, gpus=8, tp=8, pp=1, tp_backward_overlap=False, **quiet)
    base, slow = _step(tp), _step(dict(tp, straggler="3:0.8"))
    compute = base.report["breakdown_s"]["compute"]
    assert slow.report["step_time_s"] - base.report["step_time_s"] == pytest.approx(0.25 * compute, rel=0.05)

    dp = dict(SMALL, topology="a100-hdr", gpus=16, tp=1, pp=1, **quiet)
    base, slow = _step(dp), _step(dict(dp, straggler="3:0.8"))
    assert base.report["exposed_comm_s"]["dp"] > base.report["breakdown_s"]["compute"]  # reduction-bound
    cost = slow.report["step_time_s"] - base.report["step_time_s"]
    assert 0 < cost <= 0.25 * _compute_before_first_reduction_s(base, 0) * (1 + 1e-9)  # rank 0 stands for all 16
    assert cost < 0.5 * 0.25 * base.report["breakdown_s"]["compute"]


LAYOUTS = [
    (dict(SMALL, gpus=64, tp=4, pp=2), dict(straggler="5:0.8,40:0.5")),
    (dict(SMALL, gpus=64, tp=4, pp=2), dict(straggler="5:0.7,13:0.7,21:0.7")),
    (dict(SMALL, seq=1024, gpus=32, tp=2, pp=2, cp=2), dict(slow_node="1:0.7")),
    (dict(SMALL, gpus=64, gbs=32, tp=2, pp=4, schedule="interleaved-1f1b", vpp=2), dict(node_gpu="2:a100-80g")),
    (dict(SMALL, gpus=32, tp=4, pp=2, network="flow"), dict(straggler="9:0.6")),
]


@pytest.mark.parametrize("layout, perturbation", LAYOUTS)
def test_folded_runs_with_perturbations_equal_unfolded_runs(layout, perturbation):
    folded = _step({**layout, **perturbation})
    unfolded = _step({**layout, **perturbation, "fold": False})
    assert folded.report["simulated_ranks"] < unfolded.report["simulated_ranks"] == layout["gpus"]
    if layout.get("network") == "flow":
        # in the flow network a perturbed group's shifted timing changes which flows of the groups
        # a representative stands for share a link with it, which folding cannot see: the step is
        # the same, the split of its exposed communication into kinds within 1%
        assert folded.report["step_time_s"] == pytest.approx(unfolded.report["step_time_s"], rel=1e-9)
        for key in ("breakdown_s", "exposed_comm_s"):
            for kind, value in unfolded.report[key].items():
                assert folded.report[key][kind] == pytest.approx(value, rel=1e-2, abs=1e-9), (key, kind)
    else:
        assert_close(dict(folded.report), dict(unfolded.report), "report",
                     skip={"simulated_ranks", "num_events", "config"}, ran_only={"links.top"})
    plain = _step(layout)
    assert folded.report["step_time_s"] > plain.report["step_time_s"]


def test_the_report_prices_each_perturbation_against_the_plain_run():
    layout = dict(SMALL, gpus=64, tp=4, pp=2)
    result = api.simulate(api.resolve(dict(layout, straggler="5:0.8", slow_node="7:0.5")))
    p = result.report["perturbations"]
    plain = _step(layout).report["step_time_s"]
    alone = _step(dict(layout, straggler="5:0.8")).report["step_time_s"]
    assert p["baseline_step_s"] == plain
    assert p["cost_s"] == pytest.approx(result.report["step_time_s"] - plain)
    assert p["cost_by_setting_s"]["straggler"] == pytest.approx(alone - plain)
    assert set(p["gpus_slowed"]) == {"5", *map(str, range(56, 64))}
    assert any("[slowed x0.8]" in label for label in result.rank_labels.values())
    assert _step(layout).report["perturbations"] == {}


def test_an_older_gpu_generation_on_some_nodes_slows_the_step():
    """A100s on the second stage's node: the pipeline runs at about that stage's pace, nearly
    the step of A100s everywhere, well above the H100s' (989 against 312 TFLOPS, at 256 tokens
    per micro-batch, where fixed costs dilute the gap)."""
    layout = dict(SMALL, gpus=16, tp=8, pp=2)
    mixed = _step(dict(layout, node_gpu="1:a100-80g"))
    h100 = _step(layout).report["step_time_s"]
    a100 = _step(dict(layout, node_gpu="0:a100-80g,1:a100-80g")).report["step_time_s"]
    assert a100 > 1.4 * h100
    assert a100 >= mixed.report["step_time_s"] > 0.9 * a100
    assert "[a100-80g]" in mixed.rank_labels[8]


def test_failed_spine_links_reroute_and_slow_cross_leaf_reductions_in_flow_mode():
    # 8 nodes on two leaves; each of the 8 DP rings (one per GPU index) crosses the leaves twice.
    # With leaf0 down to one spine its 8 flows per direction share one uplink of 4 NICs' capacity.
    layout = dict(SMALL, seq=2048, gpus=64, tp=8, pp=1, network="flow")
    failed = ",".join(f"leaf0-spine{s}" for s in range(1, 8))
    plain, cut = _step(layout), _step(dict(layout, fail_link=failed))
    assert cut.report["exposed_comm_s"]["dp"] > 1.5 * plain.report["exposed_comm_s"]["dp"]
    assert cut.report["step_time_s"] > plain.report["step_time_s"]
    busy = cut.report["links"]["top"]
    assert all("spine" not in link["link"] or "spine0" in link["link"] for link in busy if "leaf0" in link["link"])


@pytest.mark.quick
def test_a_failure_that_disconnects_a_group_names_the_group():
    layout = dict(SMALL, gpus=64, tp=8, pp=1)
    with pytest.raises(SpecError, match=r"^--fail-link node1/nic3-leaf0: disconnects the dp group of GPUs "
                                        r"\(3, 11, 19, 27, 35, 43, 51, 59\): gpu 3 has no route to gpu 11$"):
        _step(dict(layout, fail_link="node1/nic3-leaf0"))


@pytest.mark.quick
def test_the_cost_report_runs_without_them_and_with_each_setting_alone():
    from simtrain.api import perturbations as perturbed
    from simtrain.specs.perturbation import Perturbations

    p = perturbed.from_texts(straggler="1:0.5", throttle="0", seed=4)
    seen = []

    def step_with(q: Perturbations) -> float:
        seen.append(q)
        return 1.5 if q.any else 1.0

    out = perturbed.cost_report(p, 1.5, 8, 8, step_with)
    assert seen == [Perturbations(seed=4), p.only("straggler"), p.only("throttle")]
    assert out["baseline_step_s"] == 1.0 and out["cost_by_setting_s"] == {"straggler": 0.5, "throttle": 0.0}
    assert perturbed.cost_report(Perturbations(), 1.0, 8, 8, step_with) == {}
