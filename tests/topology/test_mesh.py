"""The device mesh: the seed's example of groups and coordinates, MoE groups folded into the DP ranks
(through ``simtrain mesh --json``)."""

from __future__ import annotations

import pytest

from helpers import cli_json

pytestmark = pytest.mark.quick


def test_seed_mesh_example():
    info = cli_json("mesh", "--gpus", 16, "--tp", 2, "--cp", 2, "--dp", 2, "--pp", 2, "--rank", 13)
    g = info["groups"]
    assert g["tp"][:4] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert g["cp"][:4] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert g["dp"][:4] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert g["pp"][:4] == [[0, 8], [1, 9], [2, 10], [3, 11]]
    assert all(len(g[d]) == 8 for d in ("tp", "cp", "dp", "pp"))
    assert info["intra_node"] == {"tp": True, "cp": True, "dp": True, "pp": False}
    assert info["coords"] == {"pp": 1, "dp": 1, "cp": 0, "tp": 1}


def test_mesh_moe_folding():
    info = cli_json("mesh", "--gpus", 16, "--tp", 2, "--cp", 1, "--pp", 2, "--ep", 4, "--rank", 5)
    # EP groups are carved out of the DP ranks of one stage: etp=2 innermost, then ep
    assert info["groups"]["ep"][0] == [0, 2, 4, 6]
    assert info["groups"]["edp"][0] == [0]
    assert info["coords"]["ep"] == 2


def test_groups_and_group_of_by_strides_at_131072_gpus():
    """TP8 x DP1024 x PP16 in the default order tp-cp-ep-dp-pp: TP groups are 8 consecutive ranks,
    DP groups 1024 ranks 8 apart, PP groups 16 ranks 8192 apart (stride = product of the sizes of
    the dimensions inside)."""
    from simtrain.topology.mesh import build_mesh

    mesh = build_mesh(tp=8, cp=1, dp=1024, pp=16)
    r = 127_513  # = 15 * 8192 + 579 * 8 + 1: pp 15, dp 579, tp 1
    assert mesh.coords(r) == {"tp": 1, "cp": 0, "dp": 579, "pp": 15}
    assert mesh.group_of("tp", r) == list(range(127_512, 127_520))
    assert mesh.group_of("dp", r) == list(range(15 * 8192 + 1, 16 * 8192, 8))
    assert mesh.group_of("pp", r) == list(range(4633, 131_072, 8192))
    pp = mesh.dense.group_array("pp")
    assert pp.shape == (8192, 16) and pp[4633].tolist() == mesh.group_of("pp", r)
    assert (pp[:, 0] == range(8192)).all()
    assert mesh.intra_node("tp") and not mesh.intra_node("dp") and not mesh.intra_node("pp")
    assert mesh.dense.stride("pp") == 8192


def test_group_array_rows_are_the_groups_of_their_members():
    from simtrain.topology.mesh import build_mesh

    mesh = build_mesh(tp=2, cp=2, dp=3, pp=2, ep=2, order="tp-cp-dp-ep-pp")
    for grid in (mesh.dense, mesh.expert):
        for dim, size in zip(grid.dims, grid.sizes):
            rows = grid.group_array(dim)
            assert rows.shape == (grid.world // size, size)
            assert sorted(rows.ravel().tolist()) == list(range(grid.world))  # a partition
            for row in rows.tolist():
                for member in row:
                    assert grid.group_of(dim, member) == row
