"""The timeline: a JSON round trip keeps every column; spans sort by start, rank, stream, then
the order given."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import simulate, simulate_settings, tiny_model
from simtrain.specs.parallel import ParallelSpec
from simtrain.engine.timeline import Timeline, span_order

pytestmark = pytest.mark.quick


def test_timeline_json_round_trip():
    model = tiny_model(layers=2)
    _, res, _ = simulate(model, ParallelSpec(pp=2, gbs=4, seq=256))
    data = json.loads(json.dumps(res.timeline.to_json()))
    back = Timeline.from_json(data)
    assert len(back) == len(res.timeline)
    for col, values in res.timeline.cols.items():
        assert (back[col] == values).all()


def _two_ranks() -> Timeline:
    from simtrain.engine.timeline import TimelineBuilder
    from simtrain.workload.program import KIND, STREAM

    b = TimelineBuilder()
    f, opt = b.name_id("F"), b.name_id("optimizer")
    c = STREAM["compute"]
    for rank, shift in ((0, 0.0), (1, 0.5)):
        for step in range(2):
            t = 3.0 * step + shift
            b.add(rank, c, KIND["F"], f, 0, -1, 0, t, t + 2.0, flops=10.0, alloc_bytes=4.0, free_bytes=4.0)
            b.add(rank, c, KIND["opt"], opt, -1, -1, -1, t + 2.0, t + 2.5)
    return b.build()


def test_step_ends_are_the_latest_optimizer_ends():
    assert _two_ranks().step_ends() == [3.0, 6.0]
    model = tiny_model(layers=2)
    _, res, _ = simulate(model, ParallelSpec(pp=2, gbs=4, seq=256))  # no optimizer steps
    assert res.timeline.step_ends() == []


def test_a_window_clips_and_shifts_the_spans_inside_it():
    """The window from 4 to 6 s holds the second step's spans; each F, started before 4 s, keeps
    its part inside and that share of its FLOPs, its release but not its allocation (made before
    the window); times are shifted to start at 0."""
    w = _two_ranks().window(4.0, 6.0)
    spans = sorted(w.spans(), key=lambda s: (s.rank, s.start_s))
    assert [(s.rank, s.kind, s.start_s, s.end_s) for s in spans] == [
        (0, "F", 0.0, 1.0), (0, "opt", 1.0, 1.5), (1, "F", 0.0, 1.5), (1, "opt", 1.5, 2.0)]
    assert [s.flops for s in spans if s.kind == "F"] == [5.0, 7.5]
    assert [(s.alloc_bytes, s.free_bytes) for s in spans if s.kind == "F"] == [(0.0, 4.0), (0.0, 4.0)]
    assert w.end_s == 2.0


def test_from_columns_sorts_stably_and_numbers_names_by_first_appearance():
    """Rows given out of order come back by (start, rank, stream, given order); names unused by any
    row are dropped and the rest numbered as they first appear."""
    import numpy as np

    names = ["unused", "b", "a"]
    rows = [  # rank, stream, name, start
        (1, 0, 1, 2.0),
        (0, 1, 2, 1.0),
        (0, 0, 1, 1.0),
        (0, 0, 2, 1.0),  # ties with the row above: stays after it
    ]
    cols = {c: np.asarray([r[i] for r in rows]) for i, c in enumerate(("rank", "stream", "name"))}
    cols["start_s"] = np.asarray([r[3] for r in rows])
    cols["end_s"] = cols["start_s"] + 0.5
    for c in ("kind", "stage", "layer", "mb", "arrow"):
        cols[c] = np.arange(len(rows))  # the given position, to follow the rows
    for c in ("flops", "bytes", "alloc_bytes", "free_bytes"):
        cols[c] = np.zeros(len(rows))
    tl = Timeline.from_columns(cols, names)
    assert tl["stage"].tolist() == [2, 3, 1, 0]
    assert tl.names == ["b", "a"]
    assert [tl.names[i] for i in tl["name"]] == ["b", "a", "a", "b"]
    assert tl["rank"].dtype == np.int32 and tl["start_s"].dtype == np.float64


def test_rank_columns_split_the_spans_of_each_rank_in_order():
    import numpy as np

    from simtrain.engine.timeline import Timeline, rank_columns

    cols = {c: np.zeros(5, dtype=np.int64) for c in ("stream", "kind", "name", "stage", "layer", "mb", "arrow")}
    cols["rank"] = np.array([3, 1, 3, 1, 3])
    cols.update({c: np.arange(5, dtype=float) for c in ("start_s", "end_s", "flops", "bytes", "alloc_bytes",
                                                         "free_bytes")})
    tl = Timeline.from_columns(cols, ["x"])
    split = rank_columns(tl)
    assert sorted(split) == [1, 3]
    for rank, c in split.items():
        mask = tl["rank"] == rank
        assert list(c["start_s"]) == list(tl["start_s"][mask])
    some = rank_columns(tl, ("end_s", "kind"))  # only the columns asked for, the same values
    assert {r: sorted(c) for r, c in some.items()} == {1: ["end_s", "kind"], 3: ["end_s", "kind"]}
    assert all((some[r][k] == split[r][k]).all() for r in some for k in ("end_s", "kind"))


def _reference_timeline(ops, rows, starts, ends) -> Timeline:
    """The program's timeline built the plain way: every column gathered in recorded order, the
    receivers' spans mended, then :meth:`Timeline.from_columns` sorts them."""
    import numpy as np

    from simtrain.workload.program import STREAM

    names = list(dict.fromkeys(ops.name))
    code = {nm: k for k, nm in enumerate(names)}
    cols: dict = {c: [] for c in ("rank", "stream", "kind", "name", "stage", "layer", "mb", "arrow", "start_s",
                                  "end_s", "flops", "bytes", "alloc_bytes", "free_bytes")}
    sends = sorted(((e, ~r) for r, e in zip(rows, ends) if r < 0))
    arrow = {op: k for k, (_, op) in enumerate(sends)}
    for r, s, e in zip(rows, starts, ends):
        i = ~r if r < 0 else r
        op = ops[i]
        name = op.name.replace("send", "recv") if r < 0 else op.name
        if name not in code:
            code[name] = len(names)
            names.append(name)
        compute = op.comm is None
        for c, v in (("rank", op.peer if r < 0 else op.rank), ("stream", STREAM["pp_recv"] if r < 0 else op.stream),
                     ("kind", op.kind), ("name", code[name]), ("stage", op.peer_stage if r < 0 else op.stage),
                     ("layer", op.layer), ("mb", op.mb), ("arrow", arrow.get(i, -1)), ("start_s", s), ("end_s", e),
                     ("flops", op.flops), ("bytes", op.nbytes), ("alloc_bytes", op.alloc if compute else 0.0),
                     ("free_bytes", op.free if compute else 0.0)):
            cols[c].append(v)
    return Timeline.from_columns({c: np.asarray(v) for c, v in cols.items()}, names)


@pytest.mark.parametrize("schedule", ["1f1b", "dualpipev"])
def test_program_timeline_equals_gathering_every_span_in_recorded_order(schedule, monkeypatch):
    """The engine's timeline, sorted first and gathered once, equals the same spans gathered one
    by one and sorted after: every column, its dtype and the name table."""
    import numpy as np

    from simtrain.engine import simulator

    seen = []
    build = simulator.program_timeline

    def spy(ops, rows, starts, ends, *compute):  # (the compiled run also passes its compute mask)
        seen.append(_reference_timeline(ops, rows, starts, ends))
        return build(ops, rows, starts, ends, *compute)

    monkeypatch.setattr(simulator, "program_timeline", spy)
    tl = simulate_settings(model="llama3-8b", topology="h100-ib", gpus=16, tp=2, pp=4, seq=2048, gbs=16,
                           schedule=schedule).timeline
    ref = seen[0]
    assert (tl["stream"] == 5).any()  # receivers' spans are there
    assert tl.names == ref.names
    for c, col in ref.cols.items():
        assert tl[c].dtype == col.dtype and np.array_equal(tl[c], col), c


@pytest.mark.quick
def test_span_order_is_start_then_rank_then_stream_then_the_order_given():
    rng = np.random.default_rng(7)
    n = 5_000
    start = rng.integers(0, 20, n) * 0.5  # many ties
    rank, stream = rng.integers(0, 300, n).astype(np.int32), rng.integers(0, 7, n).astype(np.int32)
    assert np.array_equal(span_order(start, rank, stream), np.lexsort((np.arange(n), stream, rank, start)))
    start[::97] = np.nan  # (no run records one; sorted last, as lexsort sorts them)
    assert np.array_equal(span_order(start, rank, stream), np.lexsort((np.arange(n), stream, rank, start)))


@pytest.mark.quick
@pytest.mark.parametrize("n, ties", [(0, False), (1, False), (2_000, False), (2_000, True)])
def test_span_order_of_spans_recorded_as_they_end_equals_the_lexsort(n, ties):
    """Nearly in order of start, as a run records them; without ties, with runs of equal starts."""
    rng = np.random.default_rng(n)
    start = np.sort(rng.integers(0, n // 4 + 1, n) * 0.25 if ties else rng.random(n))
    swap = rng.integers(0, max(n - 1, 1), n // 50)  # a few neighbours out of order
    start[swap], start[swap + 1] = start[swap + 1], start[swap].copy()
    rank, stream = rng.integers(0, 1024, n).astype(np.int32), rng.integers(0, 7, n).astype(np.int32)
    assert np.array_equal(span_order(start, rank, stream), np.lexsort((np.arange(n), stream, rank, start)))


@pytest.mark.quick
@pytest.mark.parametrize("deps", [[0], [1, 0], [1, 2, 0]])  # the first, the second, a third dependency
@pytest.mark.parametrize("piece", [1, 3, 1 << 19])  # the dependency columns checked in pieces of so many ops
def test_check_spans_finds_an_op_that_started_before_its_dependency_ended(deps, piece, monkeypatch):
    from simtrain.engine import timeline
    from simtrain.engine.timeline import check_spans

    monkeypatch.setattr(timeline, "CHECK_PIECE", piece)
    from simtrain.workload.program import KIND, STREAM, Program

    prog = Program()
    for i, stream in enumerate(("compute", "tp", "cp")):  # ops 0, 1 and 2, each on a stream of its own
        prog.append(0, STREAM[stream], KIND["F"], f"op{i}", 0, i, 0, duration_s=1.0)
    prog.append(0, STREAM["ep"], KIND["F"], "late", 0, 3, 0, duration_s=1.0, deps=deps)
    rows, starts, ends = [0, 1, 2, 3], [0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 2.0]
    check_spans(prog, rows, starts, ends)  # every dependency ended first
    with pytest.raises(AssertionError, match="dependency violated: .*late.* started before .*op0.* ended"):
        check_spans(prog, rows, starts, [1.5, 1.0, 1.0, 2.0])  # op 0 ends after op 3 started


def test_the_ranks_are_those_with_spans_in_order():
    """Counted where the ranks are small, sorted where they are far apart: the same list."""
    from simtrain.engine.timeline import TimelineBuilder
    from simtrain.workload.program import KIND, STREAM

    for ranks in ([5, 0, 5, 3], [10**9, 2, 10**9, 7]):
        b = TimelineBuilder()
        f = b.name_id("F")
        for i, r in enumerate(ranks):
            b.add(r, STREAM["compute"], KIND["F"], f, 0, -1, 0, float(i), i + 1.0)
        assert b.build().ranks == sorted(set(ranks))
        assert all(type(r) is int for r in b.build().ranks)
    assert _two_ranks().ranks == [0, 1]
