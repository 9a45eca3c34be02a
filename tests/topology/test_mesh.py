"""The device mesh: the seed's example of groups and coordinates, MoE groups folded into the DP ranks
(through ``simtrain mesh --json``)."""

from __future__ import annotations

from helpers import cli_json


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
