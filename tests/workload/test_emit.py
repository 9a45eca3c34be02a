"""The groups a folded collective stands for: every group along the dimension that holds a member of
one of the pipeline groups the representative stands for, listed once (the same list whether or
not members of a group already listed are skipped)."""

from __future__ import annotations

import pytest

from helpers import tiny_model
from simtrain.specs.gpu import get_gpu
from simtrain.specs.parallel import ParallelSpec
from simtrain.topology.mesh import build_mesh
from simtrain.workload.emit import Emitter

pytestmark = pytest.mark.quick


def brute_force(mesh, dim, pp_groups, pp_index):
    """Every member's group, duplicates removed, sorted."""
    out = set()
    for pp_group in pp_groups:
        member = pp_group[pp_index]
        if dim == "dpcp":
            g = sorted({d for c in mesh.group_of("cp", member) for d in mesh.group_of("dp", c)})
        else:
            g = mesh.group_of(dim, member)
        out.add(tuple(g))
    return tuple(sorted(out))


@pytest.mark.parametrize("layout", [dict(tp=2, cp=2, dp=4, pp=2, ep=2), dict(tp=4, cp=1, dp=8, pp=4, ep=4),
                                    dict(tp=1, cp=4, dp=2, pp=3, ep=1)])
def test_folded_groups_are_every_members_group_once(layout):
    par = ParallelSpec(**layout)
    mesh = build_mesh(par.tp, par.cp, par.dp, par.pp, par.ep, gpus_per_node=8)
    em = Emitter(tiny_model(), par, get_gpu("h100-sxm"), mesh, fold=True)
    pp_groups = mesh.groups("pp")
    dims = ["tp", "cp", "dp", "dpcp", "edp", "ep"]
    for pp_index, rank in enumerate(pp_groups[0]):
        em.prog.pipeline_rank_of[rank] = pp_index
        for dim in dims:
            got = em.groups(dim, rank)
            assert got == brute_force(mesh, dim, pp_groups, pp_index)
            members = sorted(r for g in got for r in g)
            assert members == sorted(set(members))  # a partition of the ranks it covers
    dp_groups = em.groups("dp", pp_groups[0][0])
    assert len(dp_groups) == par.tp * par.cp  # every DP group of the first pipeline rank
