"""The compiled loop makes the SimPy engine's moves: the same spans, in the same order, the same
operations counted and the same compute time added by communication, on lowered programs of
every kind of op (transfers queued for a receiver, collectives of several simulated members,
folded ones, interference re-plans) and on hand-made ones."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from simtrain import api
from simtrain.engine import simulator as engine
from simtrain.errors import SimulationError
from simtrain.network.fixed import FixedLatency
from simtrain.workload.program import KIND, STREAM, Op, Program

CASES = {
    "1f1b": dict(model="llama3-70b", topology="seed-h100", gpus=64, tp=8, pp=4, dp=2, seq=8192, gbs=16,
                 schedule="1f1b"),
    "zb-h1": dict(model="llama3-70b", topology="seed-h100", gpus=64, tp=8, pp=4, dp=2, seq=8192, gbs=16,
                  schedule="zb-h1"),
    "dualpipe-moe": dict(model="mixtral-8x7b", topology="h100-ib", gpus=16, tp=2, pp=2, ep=4, seq=2048, gbs=16,
                         schedule="dualpipe"),
    "interleaved-unfolded": dict(model="llama3-8b", topology="h100-ib", gpus=32, tp=2, pp=4, seq=2048, gbs=16,
                                 schedule="interleaved-1f1b", vpp=2, fold=False),
    "zb-v-zero3": dict(model="llama3-8b", topology="h100-ib", gpus=16, tp=2, pp=4, seq=2048, gbs=8, schedule="zb-v",
                       zero=3),
}


def _both(monkeypatch, spec):
    """The run of ``spec`` through the compiled loop and through SimPy's event queue."""
    runs = {}
    plain = engine.run

    def run(program, network, **kw):
        runs["simpy"] = plain(program, network, compiled=False, **kw)
        runs["compiled"] = out = plain(program, network, compiled=True, **kw)
        return out

    monkeypatch.setattr(engine, "run", run)
    api.simulate(api.resolve(spec))
    return runs["compiled"], runs["simpy"]


def _same(a, b):
    assert a.num_events == b.num_events and a.slowdown_s == b.slowdown_s
    ta, tb = a.timeline, b.timeline
    assert ta.names == tb.names and list(ta.cols) == list(tb.cols)
    for name, col in ta.cols.items():
        assert col.dtype == tb.cols[name].dtype and np.array_equal(col, tb.cols[name]), name


@pytest.mark.quick
@pytest.mark.parametrize("name", list(CASES))
def test_the_compiled_loop_gives_the_simpy_engines_timeline(name, monkeypatch):
    compiled, simpy_run = _both(monkeypatch, CASES[name])
    assert compiled.num_events > 0
    _same(compiled, simpy_run)


class HalfSecond(FixedLatency):
    """Every transfer and collective takes 0.5 s (priced up front)."""

    def __init__(self):
        super().__init__(0.5)

    def collective_time(self, op, gpus, nbytes):
        return 0.5


def _op(prog, rank, stream, name, deps=(), duration=1.0, **kw):
    return prog.add(Op(0, rank, STREAM[stream], KIND["F"], name, 0, -1, -1, duration_s=duration,
                       deps=list(deps), **kw))


def _hand_program():
    """Two transfers queued for one receiver, an op with three dependencies, an instant op, a
    collective of two members and compute slowed beside them."""
    prog = Program()
    prog.rank_weight = {0: 1, 1: 1, 2: 1}
    prog.group_sets = [((0, 1),), ((0, 2),), ((1, 2),)]
    a = _op(prog, 0, "compute", "a", duration=1.0)
    b = _op(prog, 1, "compute", "b", duration=0.5)
    z = _op(prog, 2, "compute", "z", duration=0.0)
    s1 = prog.add(Op(0, 0, STREAM["pp_send"], KIND["pp"], "s1", 0, -1, 0, nbytes=1.0, comm="p2p", group_set=1,
                     peer=2, deps=[a.id]))
    s2 = prog.add(Op(0, 1, STREAM["pp_send"], KIND["pp"], "s2", 0, -1, 0, nbytes=1.0, comm="p2p", group_set=2,
                     peer=2, deps=[b.id]))
    for rank, dep in ((0, a.id), (1, b.id)):
        prog.add(Op(0, rank, STREAM["tp"], KIND["tp"], "ar", 0, -1, -1, nbytes=4.0, comm="all_reduce",
                    group_set=0, key=("k",), deps=[dep]))
    _op(prog, 2, "compute", "c", deps=[s1.id, s2.id, z.id], duration=2.0)
    _op(prog, 0, "compute", "d", duration=3.0)
    return prog


@pytest.mark.quick
@pytest.mark.parametrize("interference", [0.0, 0.3])
def test_hand_made_program_runs_alike(interference):
    runs = [engine.run(_hand_program(), HalfSecond(), comm_interference=interference, compiled=c)
            for c in (True, False)]
    _same(*runs)
    tl = runs[0].timeline
    recv = tl.spans(tl.mask(stream="pp_recv"))
    assert len(recv) == 2 and recv[0].end_s <= recv[1].start_s  # one at a time
    c = [x for x in tl.spans(tl.mask(rank=2, stream="compute")) if x.name == "c"][0]
    assert c.start_s == max(s.end_s for s in recv)
    if interference == 0:  # by hand: s2 ready at 0.5, s1 at 1.0 (0.5 s each), then c's 2 s
        assert [(s.start_s, s.end_s) for s in recv] == [(0.5, 1.0), (1.0, 1.5)] and (c.start_s, c.end_s) == (1.5, 3.5)


class FreeWhenEmpty(HalfSecond):
    """0.5 s per op of any bytes, nothing for an op of none: transfers priced at nothing wait behind
    a priced one for their receiver, and end as they start when it is done."""

    def collective_time(self, op, gpus, nbytes):
        return 0.5 if nbytes else 0.0

    def p2p_time(self, src, dst, nbytes):
        return 0.5 if nbytes else 0.0


def _free_program():
    """Rank 0 sends priced (s1) then free (s3) transfers to rank 2, rank 1 a free one (s2) ready
    while s1 runs; a free collective of two members and a free one of one; compute beside them."""
    prog = Program()
    prog.rank_weight = {0: 1, 1: 1, 2: 1}
    prog.group_sets = [((0, 1),), ((0, 2),), ((1, 2),)]
    a = _op(prog, 0, "compute", "a", duration=1.0)
    b = _op(prog, 1, "compute", "b", duration=1.25)
    for name, rank, size, gs, dep in (("s1", 0, 1.0, 1, a.id), ("s2", 1, 0.0, 2, b.id), ("s3", 0, 0.0, 1, a.id)):
        prog.add(Op(0, rank, STREAM["pp_send"], KIND["pp"], name, 0, -1, 0, nbytes=size, comm="p2p", group_set=gs,
                    peer=2, deps=[dep]))
    for rank, dep in ((0, a.id), (1, b.id)):
        prog.add(Op(0, rank, STREAM["tp"], KIND["tp"], "ar", 0, -1, -1, nbytes=0.0, comm="all_reduce",
                    group_set=0, key=("k",), deps=[dep]))
    solo = prog.add(Op(0, 2, STREAM["dp"], KIND["dp"], "solo", 0, -1, -1, nbytes=0.0, comm="all_reduce",
                       group_set=2, deps=[]))
    _op(prog, 2, "compute", "c", deps=list(range(3, 6)) + [solo.id], duration=2.0)
    _op(prog, 0, "compute", "d", duration=3.0)
    _op(prog, 1, "compute", "e", duration=0.75)
    return prog


@pytest.mark.quick
@pytest.mark.parametrize("network", [FixedLatency(), FreeWhenEmpty()], ids=["all-free", "some-free"])
@pytest.mark.parametrize("interference", [0.0, 0.3])
def test_communication_priced_at_nothing_runs_alike(network, interference):
    runs = [engine.run(_free_program(), network, comm_interference=interference, compiled=c) for c in (True, False)]
    _same(*runs)
    tl = runs[0].timeline
    recv = tl.spans(tl.mask(stream="pp_recv"))
    assert len(recv) == 3
    if type(network) is FreeWhenEmpty and interference == 0:  # s1 0.5 s from 1.0; s2 and s3 then at once
        assert sorted((s.start_s, s.end_s) for s in recv) == [(1.0, 1.5), (1.5, 1.5), (1.5, 1.5)]


@pytest.mark.quick
def test_a_lowered_run_on_a_free_network_is_the_simpy_engines(monkeypatch):
    compiled, simpy_run = _both(monkeypatch, dict(CASES["1f1b"], network="none"))
    _same(compiled, simpy_run)


@pytest.mark.quick
def test_the_loop_runs_without_numbas_runtime_where_numba_has_the_option():
    """Without it, each call between the loop's functions counts references atomically: 5 times
    slower on S1's program (the loop is the same either way)."""
    from numba.core.options import DefaultOptions

    from simtrain.engine import compiled
    assert compiled.OPTIONS == {"cache": True, "_nrt": False} and "_nrt" in vars(DefaultOptions)


@pytest.mark.quick
def test_errors_are_the_simpy_engines():
    prog = Program()
    prog.rank_weight = {0: 1, 1: 1}
    a = _op(prog, 0, "compute", "a", deps=[1])
    _op(prog, 1, "compute", "b", deps=[a.id])
    messages = []
    for compiled in (True, False):
        with pytest.raises(SimulationError, match="deadlock") as err:
            engine.run(prog, HalfSecond(), compiled=compiled)
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    for compiled in (True, False):
        with pytest.raises(SimulationError, match="max_events=3"):
            engine.run(_hand_program(), HalfSecond(), max_events=3, compiled=compiled)


@pytest.mark.quick
def test_the_engine_module_runs_priced_programs_compiled(monkeypatch):
    """``engine.run`` takes the compiled loop where every op is priced up front and it is asked to,
    the program is long enough or the loop has run in this process already (the tests above
    would compare the SimPy engine with itself otherwise)."""
    calls = []
    from simtrain.engine import priced
    monkeypatch.setattr(priced, "run_priced", functools.partial(lambda f, *a, **k: calls.append(1) or f(*a, **k),
                                                                priced.run_priced))
    engine.run(_hand_program(), HalfSecond(), compiled=True)
    engine.run(_hand_program(), HalfSecond(), compiled=False)
    engine.run(_hand_program(), FixedLatency(), compiled=True)  # communication free: compiled all the same
    assert engine.loop_loaded()  # the loop has run in this process: any program runs compiled
    engine.run(_hand_program(), HalfSecond())
    monkeypatch.setattr(engine, "loop_loaded", lambda: False)
    engine.run(_hand_program(), HalfSecond())  # short, the loop never run: the SimPy engine
    monkeypatch.setattr(engine, "COMPILED_MIN_OPS", 5)
    engine.run(_hand_program(), HalfSecond())  # as long as the threshold: compiled
    assert calls == [1, 1, 1, 1]
