"""Folding: the simulated pipeline groups and the groups each stands for, by hand."""

from __future__ import annotations

import pytest

from simtrain.topology.mesh import build_mesh
from simtrain.workload.fold import fold_classes, reached

pytestmark = pytest.mark.quick


def test_three_levels_of_folding():
    # 16 GPUs, DP 8 x PP 2: pipeline groups [r, r + 8]; EP 4 carved from DP, EP position r % 4
    mesh = build_mesh(tp=1, cp=1, dp=8, pp=2, ep=4)
    groups = [[r, r + 8] for r in range(8)]
    assert fold_classes(mesh, fold=False, by_ep=True) == [(g, [g]) for g in groups]
    assert fold_classes(mesh, fold=True, by_ep=False) == [([0, 8], groups)]
    assert fold_classes(mesh, fold=True, by_ep=True) == [
        ([j, j + 8], [[j, j + 8], [j + 4, j + 12]]) for j in range(4)]


def test_expert_tp_ranks_share_an_ep_position():
    # TP 2 = expert TP 2, DP 4, EP 2: ranks 0,1 hold EP position 0, ranks 2,3 position 1, ...
    mesh = build_mesh(tp=2, cp=1, dp=4, pp=1, ep=2)
    assert fold_classes(mesh, fold=True, by_ep=True) == [
        ([0], [[0], [1], [4], [5]]), ([2], [[2], [3], [6], [7]])]


def test_an_order_that_moves_the_ep_position_along_the_pipeline_is_not_folded():
    # pp inside ep in the rank order: rank 2 is pipeline rank 1 of rank 0's pipeline but holds EP
    # position 1 in the expert grid, so no pipeline group keeps one EP position
    mesh = build_mesh(tp=1, cp=2, dp=2, pp=2, ep=2, order="tp-cp-pp-ep-dp")
    assert [mesh.expert.coords(r)["ep"] for r in mesh.group_of("pp", 0)] == [0, 1]
    assert fold_classes(mesh, fold=True, by_ep=True) == [(g, [g]) for g in mesh.groups("pp")]


def test_folding_around_a_slow_gpu():
    # 32 GPUs, TP 4 x DP 4 x PP 2: pipeline groups [r, r + 16]; GPU 5 (TP position 1, DP 1) is slow.
    # Its TP group [4..7] waits for it every layer, so their four pipeline groups are simulated rank by
    # rank; the other twelve fold by TP position: four representatives, each for three groups.
    mesh = build_mesh(tp=4, cp=1, dp=4, pp=2)
    classes = fold_classes(mesh, fold=True, by_ep=False, touched={5: (0.8, None)})
    unfolded = [([r, r + 16], [[r, r + 16]]) for r in range(4, 8)]
    folded = [([j, j + 16], [[j + d, j + d + 16] for d in (0, 8, 12)]) for j in range(4)]
    assert sorted(classes) == sorted(unfolded + folded)
    assert sum(len(stands) for _, stands in classes) == 16


def test_reached_pipelines_close_over_every_layer_dimension():
    # CP 2 inside TP 2: GPU 0's TP group {0, 1} and CP group {0, 2} reach GPUs 0-3 through TP and CP
    mesh = build_mesh(tp=2, cp=2, dp=2, pp=1)
    assert reached(mesh, {0}) == [[0], [1], [2], [3]]
    assert reached(mesh, {4, 7}) == [[4], [5], [6], [7]]


def test_sets_perturbed_alike_fold_together():
    # GPUs 5 and 13 (TP position 1 of DP 1 and DP 3, both pipeline position 0) at the same speed:
    # their two TP-connected sets run the same programs and fold into one class per TP position;
    # GPU 9 at another speed keeps its set apart
    mesh = build_mesh(tp=4, cp=1, dp=4, pp=2)
    alike = fold_classes(mesh, fold=True, by_ep=False, touched={5: (0.8, None), 13: (0.8, None)})
    assert [c for c in alike if 4 <= c[0][0] < 8] == [([r, r + 16], [[r, r + 16], [r + 8, r + 24]])
                                                     for r in range(4, 8)]
    assert [c for c in alike if c[0][0] < 4] == [([r, r + 16], [[r, r + 16], [r + 8, r + 24]]) for r in range(4)]
    assert len(alike) == 8
    apart = fold_classes(mesh, fold=True, by_ep=False, touched={5: (0.8, None), 9: (0.5, None)})
    assert len(apart) == 12
