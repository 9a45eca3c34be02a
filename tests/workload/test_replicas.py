"""Rank replicas: an unfolded program whose ranks copy their pipeline position's first rank
equals the one lowered rank by rank, column for column; what cannot be copied is lowered."""

from __future__ import annotations

import pytest

from simtrain import api
from simtrain.topology.mesh import build_mesh
from simtrain.workload import lower as lower_module
from simtrain.workload.lower import lower
from simtrain.workload.options import WorkloadOptions

FIELDS = ("rank", "stream", "kind", "name", "stage", "layer", "mb", "duration_s", "flops", "nbytes", "comm",
          "group_set", "key", "peer", "peer_stage", "dep0", "dep1", "alloc", "free")


#: A small MoE model (4 layers, 32 experts): enough for EP groups of 16 on 72-GPU nodes, some of
#: which span two nodes.
SMALL_MOE = """name = "small-moe"
hidden = 1024
layers = 4
heads = 8
ffn = 4096
vocab = 32000
num_experts = 32
top_k = 4
moe_ffn = 512
"""


def _lowered(monkeypatch, replicated: bool, **settings):
    """The program of ``settings`` (unfolded) and its replicas (None: lowered rank by rank)."""
    sc = api.resolve(dict(dict(model="llama3-8b", topology="h100-ib", seq=1024, fold=False), **settings))
    par = sc.parallel
    mesh = build_mesh(par.tp, par.cp, par.dp, par.pp, ep=par.ep, etp=par.etp, order=par.order,
                      gpus_per_node=sc.cluster.gpus_per_node)
    opts = WorkloadOptions(fold=False, steps=settings.get("steps", 1))
    made = []
    real = lower_module.RankReplicas

    def spy(*args):
        made.append(real(*args))
        return made[-1]

    monkeypatch.setattr(lower_module, "RankReplicas", spy if replicated else lambda *a: None)
    prog = lower(sc.model, par, sc.gpu, api.build_schedule(sc, opts), mesh, opts)
    monkeypatch.undo()
    return prog, (made[0] if made else None)


def _assert_equal(a, b):
    assert len(a.ops) == len(b.ops)
    for f in FIELDS:
        assert list(getattr(a.ops, f)) == list(getattr(b.ops, f)), f
    assert a.ops.more == b.ops.more
    assert list(a.order) == list(b.order) and a.order == b.order
    assert list(a.members.items()) == list(b.members.items()) and a.group_sets == b.group_sets and a.static_bytes == b.static_bytes


CASES = [
    dict(gpus=16, tp=2, pp=4, gbs=32),
    dict(gpus=32, tp=2, pp=2, cp=2, gbs=16, schedule="interleaved-1f1b", vpp=2, sp=False),
    dict(gpus=16, tp=2, pp=2, gbs=16, steps=2, overlap_p2p_comm=False),
    dict(gpus=16, tp=2, pp=2, gbs=16, zero=3, schedule="zb-h1"),
    dict(gpus=16, tp=1, pp=4, gbs=32, schedule="dualpipev"),
    dict(model="mixtral-8x7b", gpus=32, tp=2, pp=2, ep=4, gbs=16, order="tp-cp-dp-ep-pp"),
    dict(model="mixtral-8x7b", gpus=48, tp=1, pp=2, ep=8, gbs=48, moe_dispatcher="deepep"),
]


@pytest.mark.parametrize("settings", CASES[:1], ids=["1f1b"])
@pytest.mark.quick
def test_a_replicated_program_equals_the_one_lowered_rank_by_rank_quick(monkeypatch, settings):
    fast, replicas = _lowered(monkeypatch, True, **settings)
    full, _ = _lowered(monkeypatch, False, **settings)
    assert replicas.copied > 0
    _assert_equal(fast, full)


def test_ranks_whose_ep_groups_span_other_nodes_copy_their_own_kind(monkeypatch, tmp_path):
    """On 72-GPU nodes, an EP group of 16 lies on one node or across two (8 + 8): the all-to-all's
    bytes differ, so each kind has its own source, and the copies still equal the lowered ranks."""
    model = tmp_path / "small-moe.toml"
    model.write_text(SMALL_MOE, encoding="utf-8")
    settings = dict(model=str(model), topology="gb200-nvl72", nodes=4, gpus=288, tp=1, pp=2, ep=16, gbs=288,
                    moe_dispatcher="deepep")
    fast, replicas = _lowered(monkeypatch, True, **settings)
    full, _ = _lowered(monkeypatch, False, **settings)
    assert replicas.copied == 288 - 4  # two pipeline positions x two kinds of EP group
    _assert_equal(fast, full)
    sent = {n for n, c in zip(fast.ops.nbytes, fast.ops.comm) if c == "all_to_all"}
    assert len(sent) == 2  # the two kinds move different bytes (not one copied for the other)


@pytest.mark.parametrize("settings", CASES[1:])
def test_a_replicated_program_equals_the_one_lowered_rank_by_rank(monkeypatch, settings):
    fast, replicas = _lowered(monkeypatch, True, **settings)
    full, _ = _lowered(monkeypatch, False, **settings)
    assert replicas.copied > 0
    _assert_equal(fast, full)


@pytest.mark.quick
def test_a_rank_no_other_rank_resembles_is_kept_as_no_source(monkeypatch):
    """Every rank its own pipeline position (pp = GPUs): nothing to copy, no source kept, and the
    program is the one lowered rank by rank."""
    fast, replicas = _lowered(monkeypatch, True, gpus=4, tp=1, pp=4, gbs=8)
    full, _ = _lowered(monkeypatch, False, gpus=4, tp=1, pp=4, gbs=8)
    assert replicas.copied == 0 and len(replicas._sources) == 4
    assert all(source is None for source in replicas._sources.values())
    _assert_equal(fast, full)
