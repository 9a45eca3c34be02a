"""Overlapped F&B pairs: the halves' components alternate on the compute stream, communication
goes right after its producer, the order stays topological, and DualPipeV hides all-to-alls."""

from __future__ import annotations

import random

import pytest

from helpers import simulate_settings
from simtrain.workload.overlap import interleave
from simtrain.workload.program import KIND, STREAM, Op, Program


def _op(prog: Program, name: str, stream: str, deps: list[int]) -> int:
    kind = "F" if stream == "compute" else stream.split("_")[0]
    return prog.add(Op(0, 0, STREAM[stream], KIND[kind], name, 0, -1, -1, deps=deps)).id


def _names(prog: Program, stream: str) -> list[str]:
    return [prog.ops[i].name for i in prog.order[(0, STREAM[stream])]]


def _pair() -> tuple[Program, int]:
    """A forward half attn -> dispatch -> experts -> combine -> attn2 and a backward half
    combine' -> experts' -> dispatch' -> attn', as an MoE layer emits them."""
    prog = Program()
    _op(prog, "before", "compute", [])
    attn = _op(prog, "F.attn", "compute", [0])
    dispatch = _op(prog, "F.dispatch", "ep", [attn])
    experts = _op(prog, "F.experts", "compute", [dispatch])
    combine = _op(prog, "F.combine", "ep", [experts])
    _op(prog, "F.attn2", "compute", [combine])
    mid = len(prog.ops)
    b_combine = _op(prog, "B.combine", "ep", [])
    b_experts = _op(prog, "B.experts", "compute", [b_combine])
    b_dispatch = _op(prog, "B.dispatch", "ep", [b_experts])
    _op(prog, "B.attn", "compute", [b_dispatch])
    return prog, mid


@pytest.mark.quick
def test_segments_alternate_and_communication_follows_its_producer():
    prog, mid = _pair()
    interleave(prog, 0, 1, mid, len(prog.ops))
    # F0 = attn, B0 = experts (its combine needs nothing), F1 = experts, B1 = attn, F2 = attn2
    assert _names(prog, "compute") == ["before", "F.attn", "B.experts", "F.experts", "B.attn", "F.attn2"]
    assert _names(prog, "ep") == ["B.combine", "F.dispatch", "B.dispatch", "F.combine"]


@pytest.mark.quick
def test_a_dependency_between_the_halves_keeps_the_plain_order():
    prog, mid = _pair()
    prog.ops[mid + 1].deps.append(mid - 1)  # B.experts waits for F.attn2: no interleaving possible
    before = {k: list(v) for k, v in prog.order.items()}
    interleave(prog, 0, 1, mid, len(prog.ops))
    assert {k: list(v) for k, v in prog.order.items()} == before


def _is_topological(prog: Program, lo: int) -> bool:
    """Streams in order and dependencies cannot wait on each other: some global order lists
    every op after its dependencies and keeps every stream's order."""
    pos = {(s, i): k for s, ids in prog.order.items() for k, i in enumerate(ids)}
    done: set[int] = set(range(lo))
    heads = {s: 0 for s in prog.order}
    progress = True
    while progress:
        progress = False
        for s, ids in prog.order.items():
            k = heads[s]
            if k < len(ids) and all(d in done for d in prog.ops[ids[k]].deps):
                done.add(ids[k])
                heads[s] = k + 1
                progress = True
    return len(done) == len(prog.ops) and bool(pos)


@pytest.mark.quick
@pytest.mark.parametrize("seed", range(40))
def test_random_pairs_stay_deadlock_free(seed):
    rnd = random.Random(seed)
    prog = Program()
    _op(prog, "before", "compute", [])
    bounds = []
    for _half in range(2):
        lo = len(prog.ops)
        for _ in range(rnd.randint(1, 12)):
            stream = rnd.choice(["compute", "compute", "ep", "tp", "pp_send"])
            own = list(range(lo, len(prog.ops)))
            deps = rnd.sample(own, min(len(own), rnd.randint(0, 2)))
            _op(prog, "x", stream, deps)
        bounds.append(lo)
    if rnd.random() < 0.3 and bounds[1] < len(prog.ops):  # sometimes a cross-half dependency
        prog.ops[-1].deps.append(bounds[1] - 1)
    interleave(prog, 0, bounds[0], bounds[1], len(prog.ops))
    assert _is_topological(prog, 0)
    for ids in prog.order.values():
        assert sorted(ids) == sorted(set(ids))


@pytest.mark.quick
def test_dualpipev_hides_expert_all_to_alls_behind_the_other_half():
    base = dict(model="mixtral-8x7b", topology="h100-ib", gpus=64, tp=1, pp=2, ep=8, seq=2048, gbs=256)
    dual = simulate_settings(**base, schedule="dualpipev")
    one = simulate_settings(**base, schedule="1f1b")
    ep_dual, ep_one = (r.report["overlapped_comm_s"]["ep"] for r in (dual, one))
    exposed_dual, exposed_one = (r.report["exposed_comm_s"]["ep"] for r in (dual, one))
    assert ep_dual > 3 * ep_one
    assert exposed_dual < 0.7 * exposed_one
    assert dual.report["step_time_s"] < one.report["step_time_s"]
    # inside one overlapped pair the compute stream alternates between the two micro-batches
    tl = dual.timeline
    spans = sorted(tl.spans(tl.mask(rank=tl.ranks[0], stream="compute")), key=lambda s: s.start_s)
    mbs = [s.mb for s in spans if s.kind in ("F", "B")]
    switches = sum(1 for a, b in zip(mbs, mbs[1:]) if a != b)
    assert switches > 4 * len(set(mbs))


MOE_VPP = dict(model="mixtral-8x7b", topology="h100-ib", gpus=16, tp=2, pp=2, vpp=2, ep=4, seq=2048, gbs=16,
               schedule="interleaved-1f1b")


def _program(**settings):
    """The lowered program of a scenario, as :func:`simtrain.api.simulate` builds it."""
    from simtrain import api
    from simtrain.topology.mesh import build_mesh
    from simtrain.workload.lower import lower
    from simtrain.workload.options import WorkloadOptions

    sc = api.resolve(settings)
    par = sc.parallel
    mesh = build_mesh(par.tp, par.cp, par.dp, par.pp, ep=par.ep, etp=par.etp, order=par.order,
                      gpus_per_node=sc.cluster.gpus_per_node)
    opts = WorkloadOptions(fold=sc.fold, routing=sc.routing)
    return lower(sc.model, par, sc.gpu, api.build_schedule(sc, opts), mesh, opts)


def test_1f1b_overlap_hides_expert_all_to_alls_under_the_other_micro_batch():
    """Megatron-LM's --overlap-moe-expert-parallel-comm on interleaved 1F1B: a shorter step and
    less exposed EP time than the plain schedule."""
    plain = simulate_settings(**MOE_VPP).report
    combined = simulate_settings(**MOE_VPP, overlap_moe_expert_parallel_comm=True).report
    assert combined["step_time_s"] < plain["step_time_s"] * 0.99
    assert combined["exposed_comm_s"]["ep"] < plain["exposed_comm_s"]["ep"] * 0.8
    assert combined["config"]["overlap_moe_expert_parallel_comm"] is True
    assert plain["config"]["overlap_moe_expert_parallel_comm"] is False


@pytest.mark.quick
def test_1f1b_overlap_only_reorders_the_ops():
    """The same ops (name, stage, layer, micro-batch, stream, duration, bytes) on each rank; only
    their order on the streams changes."""
    def ops(prog):
        return sorted((o.rank, o.stream, o.name, o.stage, o.layer, o.mb, o.duration_s, o.nbytes) for o in prog.ops)

    plain, combined = _program(**MOE_VPP), _program(**MOE_VPP, overlap_moe_expert_parallel_comm=True)
    assert ops(plain) == ops(combined)
    compute = (combined.ranks[0], STREAM["compute"])
    assert [plain.ops[i].name for i in plain.order[compute]] != [combined.ops[i].name for i in combined.order[compute]]


@pytest.mark.quick
@pytest.mark.parametrize("seed", range(20))
def test_a_remembered_reorder_is_the_reorder_itself(seed):
    """Copies of random pairs, emitted one after another: the memo's answer for a copy (found by
    its shape) equals computing it afresh, and a pair of another shape gets its own entry."""
    rnd = random.Random(seed)

    def layout() -> tuple[list[tuple[str, list[int]]], int]:
        ops: list[tuple[str, list[int]]] = []
        cut = 0
        for _half in range(2):
            lo = cut = len(ops)
            for _ in range(rnd.randint(1, 10)):
                own = list(range(lo, len(ops)))
                ops.append((rnd.choice(["compute", "compute", "ep", "tp"]),
                            rnd.sample(own, min(len(own), rnd.randint(0, 3)))))
        return ops, cut

    def emit(prog: Program, pair: tuple[list[tuple[str, list[int]]], int]) -> tuple[int, int, int]:
        lo = len(prog.ops)
        for stream, deps in pair[0]:
            _op(prog, "x", stream, [lo + d for d in deps])
        return lo, lo + pair[1], len(prog.ops)

    first = layout()
    longer = (first[0] + [("compute", [len(first[0]) - 1])], first[1])  # one more op: another shape
    rewired = ([(stream, []) for stream, _ in first[0]], first[1])  # the same streams, no dependencies
    memo: dict = {}
    fresh, cached = Program(), Program()
    for prog, m in ((fresh, None), (cached, memo)):
        _op(prog, "before", "compute", [])
        for pair in (first, first, longer, first, rewired):
            interleave(prog, 0, *emit(prog, pair), memo=m)
    assert len(memo) == (2 if all(not deps for _, deps in first[0]) else 3)
    assert {k: list(v) for k, v in cached.order.items()} == {k: list(v) for k, v in fresh.order.items()}


def test_remembered_reorders_lower_the_same_programs(monkeypatch):
    """DualPipeV and 1F1B overlap lowered with the lowering's memo and without it: every stream's
    order is the same."""
    from simtrain.workload import lower as lowering

    plain = lowering.interleave
    for settings in (dict(MOE_VPP, overlap_moe_expert_parallel_comm=True, fold=False),
                     dict(MOE_VPP, schedule="dualpipev", vpp=1, routing_skew=0.8)):
        remembered = _program(**settings)
        with monkeypatch.context() as m:
            m.setattr(lowering, "interleave", lambda p, r, a, b, c, memo=None: plain(p, r, a, b, c))
            fresh = _program(**settings)
        assert {k: list(v) for k, v in remembered.order.items()} == {k: list(v) for k, v in fresh.order.items()}
