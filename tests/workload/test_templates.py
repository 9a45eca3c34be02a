"""Action templates: instantiated actions equal emitted ones, op for op, and the cases that must
not be templated are emitted in full."""

from __future__ import annotations

import pytest

from simtrain import api
from simtrain.topology.mesh import build_mesh
from simtrain.workload import templates
from simtrain.workload.lower import lower
from simtrain.workload.options import WorkloadOptions
from simtrain.workload.program import KINDS

FIELDS = ("rank", "stream", "kind", "name", "stage", "layer", "mb", "duration_s", "flops", "nbytes", "comm",
          "group_set", "key", "peer", "peer_stage", "deps", "alloc", "free")


def _program(monkeypatch, templated: bool, **settings):
    sc = api.resolve(dict(dict(model="llama3-8b", topology="h100-ib", seq=1024), **settings))
    par = sc.parallel
    mesh = build_mesh(par.tp, par.cp, par.dp, par.pp, ep=par.ep, etp=par.etp, order=par.order,
                      gpus_per_node=sc.cluster.gpus_per_node)
    opts = WorkloadOptions(fold=sc.fold, steps=settings.get("steps", 1), routing=sc.routing)
    if not templated:  # no template is ever stored: every action is emitted in full
        monkeypatch.setattr(templates, "_capture", lambda *a, **k: None)
    return lower(sc.model, par, sc.gpu, api.build_schedule(sc, opts), mesh, opts)


@pytest.mark.parametrize("settings", [
    dict(gpus=16, tp=2, pp=4, gbs=32),
    dict(gpus=16, tp=2, pp=4, gbs=32, schedule="interleaved-1f1b", vpp=2, sp=False),
    dict(gpus=16, tp=4, pp=2, gbs=16, schedule="zb-h1", recompute="selective"),
    dict(gpus=16, tp=2, pp=2, gbs=16, steps=2, overlap_p2p_comm=False, fold=False),
    dict(gpus=8, tp=2, pp=2, gbs=16, zero=3),
    dict(model="mixtral-8x7b", gpus=16, tp=2, pp=2, ep=4, gbs=16, routing_skew=1.0),  # folded by EP position
])
def test_instantiated_actions_equal_emitted_ones(monkeypatch, settings):
    fast = _program(monkeypatch, True, **settings)
    monkeypatch.undo()
    full = _program(monkeypatch, False, **settings)
    assert len(fast.ops) == len(full.ops)
    for a, b in zip(fast.ops, full.ops):
        assert [getattr(a, f) for f in FIELDS] == [getattr(b, f) for f in FIELDS], a.label()
    assert fast.order == full.order and fast.members == full.members and fast.group_sets == full.group_sets


@pytest.mark.quick
def test_first_forward_of_a_step_waits_for_its_gathers_and_is_not_captured(monkeypatch):
    captured = []
    real = templates._capture

    def spy(ops, start, *rest):
        tpl = real(ops, start, *rest)
        captured.append((KINDS[ops[start].kind], ops[start].mb, tpl is not None))
        return tpl

    monkeypatch.setattr(templates, "_capture", spy)
    _program(monkeypatch, True, gpus=8, tp=2, pp=1, gbs=16)
    # one rank, ZeRO-1: micro-batch 0's forward waits for the parameter gathers, so it is emitted
    # without capture; its backward and the next forward are captured, every later action copied
    assert captured == [("B", 0, True), ("F", 1, True)]


@pytest.mark.quick
@pytest.mark.parametrize("templated", [True, False])
def test_the_members_of_a_collective_hold_one_key_object(monkeypatch, templated):
    """Copied or emitted, every op of one collective (on every simulated rank) holds the same key
    object, so an unfolded run keeps one tuple per collective, not one per member."""
    prog = _program(monkeypatch, templated, gpus=16, tp=2, pp=2, gbs=16, fold=False)
    keys = [k for k in prog.ops.key if k is not None]
    assert len({id(k) for k in keys}) == len(set(keys)) < len(keys)
    assert max(prog.members.values()) > 1


@pytest.mark.quick
@pytest.mark.parametrize("settings, by_rank", [
    (dict(gpus=16, tp=2, pp=2, gbs=16), True),  # folded: a key names its rank, one member each
    (dict(gpus=16, tp=2, pp=2, gbs=16, fold=False), False),
    (dict(model="mixtral-8x7b", gpus=16, tp=2, pp=2, ep=4, gbs=16, routing_skew=1.0), False),
])
def test_copies_count_members_only_where_keys_are_shared(monkeypatch, settings, by_rank):
    """Where a key names its rank, a copy neither shares nor counts its keys: the program keeps no
    collective's member count (each has one member; the gradient norm's reduction over the stages,
    emitted in full, has several); elsewhere collectives of several members are counted."""
    seen = []
    real = templates.ActionTemplates._instantiate

    def spy(self, *args):
        seen.append(self.em.keys_name_their_rank)
        return real(self, *args)

    monkeypatch.setattr(templates.ActionTemplates, "_instantiate", spy)
    prog = _program(monkeypatch, True, **settings)
    assert seen and set(seen) == {by_rank}
    assert (not [k for k in prog.members if len(k) == 3]) == by_rank  # (stream, group or rank, number)
